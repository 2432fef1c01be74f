package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// The PE scenario (issue 10): rawstack addr2line against
// llvm-symbolizer-19 on Windows binaries that carry DWARF inside the PE:
// a Go program for Windows and a mingw-w64 gcc -O2 -g program. End to
// end: each side is a fresh process that opens the image and answers the
// same addresses from stdin; runs alternate (A B, B A, ...), and the figure is the
// median of the per-pair ratios. The Go image is linked with
// -compressdwarf=false because llvm-symbolizer 19 cannot read the Go
// linker's compressed .zdebug sections in PE (it would answer from the
// symbol table alone, a different amount of work).
func init() {
	register(&scenario{name: "pe-symbolize", order: 61, run: runPESymbolize})
}

const peOracle = "llvm-symbolizer-19"

// peFixtureSrc finds symbolizer/elfsrc/testdata from the repository root
// or from benchmarks/.
func peFixtureSrc() (string, error) {
	for _, d := range []string{"symbolizer/elfsrc/testdata", "../symbolizer/elfsrc/testdata"} {
		if _, err := os.Stat(filepath.Join(d, "prog.c")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("symbolizer/elfsrc/testdata not found; run from the repository root")
}

func buildPEFixtures(cfg *config) (goExe, mingwExe string, err error) {
	src, err := peFixtureSrc()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(cfg.work, "pe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module goprog\ngo 1.22\n"), 0o644); err != nil {
		return "", "", err
	}
	b, err := os.ReadFile(filepath.Join(src, "goprog", "main.go"))
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), b, 0o644); err != nil {
		return "", "", err
	}
	gob := exec.Command("go", "build", "-ldflags=-compressdwarf=false", "-o", "goprog.exe", ".")
	gob.Dir = dir
	gob.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := gob.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build for windows: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("x86_64-w64-mingw32-gcc"); err != nil {
		return "", "", fmt.Errorf("x86_64-w64-mingw32-gcc not installed (apt-get install mingw-w64)")
	}
	mg := exec.Command("x86_64-w64-mingw32-gcc", "-O2", "-g", "-o", filepath.Join(dir, "prog.exe"), filepath.Join(src, "prog.c"))
	if out, err := mg.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("mingw gcc: %v\n%s", err, out)
	}
	return filepath.Join(dir, "goprog.exe"), filepath.Join(dir, "prog.exe"), nil
}

func runPESymbolize(cfg *config) ([]row, error) {
	const name = "pe-symbolize"
	if _, err := exec.LookPath(peOracle); err != nil {
		return absent(name, "addresses/s", peOracle+" not installed (apt-get install llvm-19)")
	}
	goExe, mingwExe, err := buildPEFixtures(cfg)
	if err != nil {
		return absent(name, "addresses/s", err.Error())
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	n, pairs := 20000, 11
	if cfg.short {
		n, pairs = 5000, 3
	}
	var rows []row
	for _, fx := range []struct{ label, exe string }{{"go", goExe}, {"mingw", mingwExe}} {
		in, err := peAddrs(fx.exe, n)
		if err != nil {
			return nil, err
		}
		run := func(bin string, args ...string) ([]byte, time.Duration, error) {
			cmd := exec.Command(bin, args...)
			cmd.Stdin = bytes.NewReader(in)
			t0 := time.Now()
			out, err := cmd.Output()
			return out, time.Since(t0), err
		}
		var ours, theirs, ratios []float64
		identical := true
		for p := 0; p < pairs; p++ {
			var a, b []byte
			var da, db time.Duration
			err := inTurn(p, func() (err error) {
				if a, da, err = run(cli, "addr2line", "--obj", fx.exe); err != nil {
					err = fmt.Errorf("rawstack addr2line %s: %v", fx.exe, err)
				}
				return err
			}, func() (err error) {
				if b, db, err = run(peOracle, "--obj", fx.exe); err != nil {
					err = fmt.Errorf("%s %s: %v", peOracle, fx.exe, err)
				}
				return err
			})
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(a, b) {
				identical = false
			}
			ours, theirs = append(ours, da.Seconds()), append(theirs, db.Seconds())
			ratios = append(ratios, db.Seconds()/da.Seconds())
		}
		mo, mt, mr := median(ours), median(theirs), median(ratios)
		note := fmt.Sprintf("%d addresses of .text, fresh process each, %d A/B pairs; median speedup %.2fx; output identical", n, pairs, mr)
		if !identical {
			note = fmt.Sprintf("OUTPUT DIFFERS from %s; median speedup %.2fx", peOracle, mr)
		}
		fmt.Fprintf(cfg.logger, "  pe-symbolize %s: rawstack %.1f ms, %s %.1f ms (medians of %d pairs), ratio %.2f\n", fx.label, mo*1000, peOracle, mt*1000, pairs, mr)
		rows = append(rows, row{Scenario: name + "-" + fx.label, Metric: "addresses/s", Rawstack: float64(n) / mo, Peer: peOracle, PeerVal: float64(n) / mt, Better: "higher", Note: note})
	}
	return rows, nil
}

// peAddrs returns n virtual addresses of the image's .text in a fixed
// pseudo-random order, one per line.
func peAddrs(exe string, n int) ([]byte, error) {
	img, err := pe.Open(exe)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	var start, end uint32
	for _, s := range img.PE.Sections {
		if s.Name == ".text" {
			start, end = s.VirtualAddress, s.VirtualAddress+s.VirtualSize
		}
	}
	if end == start {
		return nil, fmt.Errorf("%s: no .text", exe)
	}
	var in bytes.Buffer
	x := uint32(2463534242)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		fmt.Fprintf(&in, "%#x\n", img.ImageBase+uint64(start+x%(end-start)))
	}
	return in.Bytes(), nil
}
