package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// The PDB scenario (issue 6): symbolize addresses of a PE image from its
// PDB, inline frames included, in llvm-symbolizer's text format, against
// llvm-symbolizer itself (native PDB reader) on the same image and
// addresses. Both sides run as users run them: a fresh process (rawstack
// addr2line, llvm-symbolizer-19) that opens the image and its PDB and
// answers the addresses from stdin, start-up included; runs alternate
// (A B, B A, ...), and the speedup is the median of the per-pair ratios.
func init() {
	register(&scenario{name: "pdb-symbolize", order: 60, run: runPDBSymbolize})
}

// pdbFixtureSrc finds symbolizer/pdb/testdata from the repository root or
// from benchmarks/.
func pdbFixtureSrc() (string, error) {
	for _, d := range []string{"symbolizer/pdb/testdata", "../symbolizer/pdb/testdata"} {
		if _, err := os.Stat(filepath.Join(d, "prog.c")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("symbolizer/pdb/testdata not found; run from the repository root")
}

func buildPDBFixture(cfg *config) (string, error) {
	for _, tool := range []string{"clang", "lld-link"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not installed: %w", tool, err)
		}
	}
	src, err := pdbFixtureSrc()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.work, "pdb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cc := []string{"clang", "--target=x86_64-pc-windows-msvc", "-O2", "-g", "-gcodeview", "-fno-exceptions", "-fno-rtti", "-c"}
	for _, c := range [][]string{
		append(append([]string{}, cc...), src+"/prog.c", "-o", "prog.obj"),
		append(append([]string{}, cc...), src+"/shapes.cpp", "-o", "shapes.obj"),
		append(append([]string{}, cc...), src+"/interp.cpp", "-o", "interp.obj"),
		append(append([]string{}, cc...), src+"/nocrt.cpp", "-o", "nocrt.obj"),
		{"lld-link", "/debug", "/nodefaultlib", "/entry:main", "/subsystem:console", "prog.obj", "shapes.obj", "interp.obj", "nocrt.obj", "/out:prog.exe", "/pdb:prog.pdb"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return filepath.Join(dir, "prog.exe"), nil
}

func runPDBSymbolize(cfg *config) ([]row, error) {
	const name = "pdb-symbolize"
	// llvm-symbolizer 19: LLVM 14's PDB reader gives some inlined ranges
	// the next range's line (see symbolizer/pdb inlineLineOffset).
	if _, err := exec.LookPath("llvm-symbolizer-19"); err != nil {
		return absent(name, "addresses/s", "llvm-symbolizer-19 not installed (apt-get install llvm-19)")
	}
	exe, err := buildPDBFixture(cfg)
	if err != nil {
		return absent(name, "addresses/s", err.Error())
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	img, err := pe.Open(exe)
	if err != nil {
		return nil, err
	}
	base := img.ImageBase
	var start, end uint32
	for _, s := range img.PE.Sections {
		if s.Name == ".text" {
			start, end = s.VirtualAddress, s.VirtualAddress+s.VirtualSize
		}
	}
	img.Close()
	if end == start {
		return nil, fmt.Errorf("%s: no .text", exe)
	}

	// Every byte of .text, in a fixed pseudo-random order, repeated.
	n, pairs := 200000, 11
	if cfg.short {
		n, pairs = 40000, 3
	}
	var in bytes.Buffer
	x := uint32(2463534242)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		fmt.Fprintf(&in, "%#x\n", base+uint64(start+x%(end-start)))
	}
	type side struct {
		name string
		args []string
		out  []byte
		secs []float64
	}
	ours := &side{name: "rawstack addr2line", args: []string{cli, "addr2line", "--obj", exe}}
	theirs := &side{name: "llvm-symbolizer-19", args: []string{"llvm-symbolizer-19", "--obj=" + exe}}
	run := func(sd *side) func() error {
		return func() error {
			var stderr bytes.Buffer
			cmd := exec.Command(sd.args[0], sd.args[1:]...)
			cmd.Stdin, cmd.Stderr = bytes.NewReader(in.Bytes()), &stderr
			t0 := time.Now()
			out, err := cmd.Output()
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("%s %s: %v: %s", sd.name, exe, err, bytes.TrimSpace(stderr.Bytes()))
			}
			sd.out, sd.secs = out, append(sd.secs, d.Seconds())
			return nil
		}
	}
	var ratios []float64
	identical := true
	for p := 0; p < pairs; p++ {
		if err := inTurn(p, run(ours), run(theirs)); err != nil {
			return nil, err
		}
		ratios = append(ratios, theirs.secs[p]/ours.secs[p])
		if !bytes.Equal(ours.out, theirs.out) {
			identical = false
		}
	}
	mo, mt, mr := median(ours.secs), median(theirs.secs), median(ratios)
	note := fmt.Sprintf("%d addresses over %d bytes of .text, inline frames on, fresh process each, %d alternating pairs; median speedup %.2fx; output identical", n, end-start, pairs, mr)
	if !identical {
		note = fmt.Sprintf("OUTPUT DIFFERS from llvm-symbolizer-19; median speedup %.2fx", mr)
	}
	fmt.Fprintf(cfg.logger, "  pdb-symbolize: rawstack %.1f ms, llvm-symbolizer-19 %.1f ms (medians of %d pairs), ratio %.2f\n", mo*1000, mt*1000, pairs, mr)
	return []row{
		{Scenario: name, Metric: "addresses/s", Rawstack: float64(n) / mo, Peer: "llvm-symbolizer-19", PeerVal: float64(n) / mt, Better: "higher", Note: note},
		{Scenario: name, Metric: "total ms", Rawstack: mo * 1000, Peer: "llvm-symbolizer-19", PeerVal: mt * 1000, Better: "lower", Note: "target: >= 2x faster"},
	}, nil
}
