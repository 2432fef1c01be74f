package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pe"
	"github.com/rawstack/rawstack/symbolizer/symsrv"
)

// The PDB scenario (issue 6): symbolize addresses of a PE image from its
// PDB, inline frames included, in llvm-symbolizer's text format, against
// llvm-symbolizer itself (native PDB reader) on the same image and
// addresses. Each side starts from nothing: rawstack opens the image and
// PDB in-process, llvm-symbolizer is a fresh process reading stdin.
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
		return []row{{Scenario: name, Metric: "addresses/s", Note: "llvm-symbolizer-19 not installed"}}, nil
	}
	exe, err := buildPDBFixture(cfg)
	if err != nil {
		return []row{{Scenario: name, Metric: "addresses/s", Note: err.Error()}}, nil
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
	n := 200000
	if cfg.short {
		n = 40000
	}
	vas := make([]uint64, n)
	x := uint32(2463534242)
	for i := range vas {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		vas[i] = base + uint64(start+x%(end-start))
	}
	var in bytes.Buffer
	for _, va := range vas {
		fmt.Fprintf(&in, "%#x\n", va)
	}

	rawstack := func() ([]byte, time.Duration, error) {
		t0 := time.Now()
		src, err := symsrv.OpenPE(exe, nil)
		if err != nil {
			return nil, 0, err
		}
		defer src.Close()
		out := make([]byte, 0, 64*n)
		var frames []symbolizer.Frame
		for _, va := range vas {
			frames, err = src.Symbolize(va-base, frames[:0])
			if err != nil {
				return nil, 0, err
			}
			out = symbolizer.AppendLLVM(out, frames)
		}
		return out, time.Since(t0), nil
	}
	peer := func() ([]byte, time.Duration, error) {
		t0 := time.Now()
		cmd := exec.Command("llvm-symbolizer-19", "--obj="+exe)
		cmd.Stdin = bytes.NewReader(in.Bytes())
		out, err := cmd.Output()
		return out, time.Since(t0), err
	}

	var ours, theirs []time.Duration
	identical := true
	for round := 0; round < 3; round++ {
		a, da, err := rawstack()
		if err != nil {
			return nil, err
		}
		b, db, err := peer()
		if err != nil {
			return nil, fmt.Errorf("llvm-symbolizer: %v", err)
		}
		ours, theirs = append(ours, da), append(theirs, db)
		if !bytes.Equal(a, b) {
			identical = false
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	mo, mt := med(ours), med(theirs)
	note := fmt.Sprintf("%d addresses over %d bytes of .text, inline frames on; output identical", n, end-start)
	if !identical {
		note = "OUTPUT DIFFERS from llvm-symbolizer-19"
	}
	fmt.Fprintf(cfg.logger, "  pdb-symbolize: rawstack %v, llvm-symbolizer-19 %v (median of 3)\n", mo, mt)
	return []row{
		{Scenario: name, Metric: "addresses/s", Rawstack: float64(n) / mo.Seconds(), Peer: "llvm-symbolizer-19", PeerVal: float64(n) / mt.Seconds(), Better: "higher", Note: note},
		{Scenario: name, Metric: "total ms", Rawstack: float64(mo.Microseconds()) / 1000, Peer: "llvm-symbolizer-19", PeerVal: float64(mt.Microseconds()) / 1000, Better: "lower", Note: "target: >= 2x faster"},
	}, nil
}
