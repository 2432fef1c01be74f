package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// The symbolize scenario runs rawstack addr2line, llvm-symbolizer and
// binutils addr2line -i -f -C end to end (process start included) on the
// same addresses of big real binaries, interleaved, and compares the
// output of rawstack with llvm-symbolizer's block by block.
func init() {
	register(&scenario{name: "symbolize", order: 40, run: runSymbolize})
}

type symCorpus struct {
	name, path, missing string
}

func symCorpora() []symCorpus {
	var out []symCorpus
	// A large C++ binary with full DWARF: Debian's debug build of
	// libstdc++ (package libstdc++6-12-dbg).
	out = append(out, symCorpus{name: "libstdc++-debug", path: "/usr/lib/x86_64-linux-gnu/debug/libstdc++.so.6.0.30",
		missing: "apt-get install libstdc++6-12-dbg"})
	// glibc's separate debug file (package libc6-dbg), found by the build
	// id of the installed libc.
	libc := symCorpus{name: "glibc-debug", missing: "apt-get install libc6-dbg"}
	if f, err := elf.Open("/usr/lib/x86_64-linux-gnu/libc.so.6"); err == nil {
		if id := locate.BuildID(f); len(id) > 1 {
			h := fmt.Sprintf("%x", id)
			libc.path = filepath.Join(locate.DefaultDebugDir, ".build-id", h[:2], h[2:]+".debug")
		}
		f.Close()
	}
	return append(out, libc)
}

// textAddrs draws n addresses uniformly from the executable sections.
func textAddrs(path string, n int) ([]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type span struct{ lo, n uint64 }
	var spans []span
	var total uint64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			spans = append(spans, span{s.Addr, s.Size})
			total += s.Size
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("%s: no executable section", path)
	}
	r := rand.New(rand.NewSource(1))
	out := make([]uint64, n)
	for i := range out {
		x := uint64(r.Int63n(int64(total)))
		for _, s := range spans {
			if x < s.n {
				out[i] = s.lo + x
				break
			}
			x -= s.n
		}
	}
	return out, nil
}

type tool struct {
	name string
	args []string
}

func runTool(t tool, input []byte) ([]byte, time.Duration, error) {
	cmd := exec.Command(t.args[0], t.args[1:]...)
	cmd.Stdin = bytes.NewReader(input)
	var out bytes.Buffer
	cmd.Stdout = &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %v: %s", t.name, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), d, nil
}

func medianDur(ds []time.Duration) time.Duration {
	return time.Duration(medianBy(ds, func(d time.Duration) float64 { return float64(d) }))
}

// compareLLVM counts rawstack blocks identical to llvm-symbolizer's, those
// that differ only where LLVM 14's demangler gave up (the name is left
// mangled and demangles to ours), those that differ only in the text of
// a demangled name, and the rest (frames or file:line:column differ).
func compareLLVM(ours, theirs []byte) (same, demangler, nameText, other int) {
	a := strings.SplitAfter(string(ours), "\n\n")
	b := strings.SplitAfter(string(theirs), "\n\n")
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			same++
			continue
		}
		x, y := strings.Split(a[i], "\n"), strings.Split(b[i], "\n")
		if len(x) != len(y) {
			other++
			continue
		}
		onlyMangled, onlyNames := true, true
		for j := range x {
			if x[j] == y[j] {
				continue
			}
			if j%2 == 1 {
				onlyNames = false
			}
			if !(j%2 == 0 && strings.HasPrefix(y[j], "_Z") && symbolizer.Demangle(y[j]) == x[j]) {
				onlyMangled = false
			}
		}
		switch {
		case onlyMangled:
			demangler++
		case onlyNames:
			nameText++
		default:
			other++
		}
	}
	if len(a) != len(b) {
		other += abs(len(a) - len(b))
	}
	return
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func runSymbolize(cfg *config) ([]row, error) {
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	n, rounds := 20000, 11
	if cfg.short {
		n, rounds = 5000, 3
	}
	var rows []row
	for _, c := range symCorpora() {
		scen := "symbolize/" + c.name
		if _, err := os.Stat(c.path); c.path == "" || err != nil {
			r, err := absent(scen, "wall ms", "corpus missing: "+c.missing)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
			continue
		}
		addrs, err := textAddrs(c.path, n)
		if err != nil {
			return nil, err
		}
		var in bytes.Buffer
		for _, a := range addrs {
			fmt.Fprintf(&in, "%#x\n", a)
		}
		tools := []tool{{name: "rawstack", args: []string{rawstack, "addr2line", "--obj", c.path}}}
		if p, err := exec.LookPath("llvm-symbolizer"); err == nil {
			tools = append(tools, tool{name: "llvm-symbolizer", args: []string{p, "--obj", c.path}})
		} else if err := needPeer("llvm-symbolizer not installed"); err != nil {
			return nil, err
		}
		if p, err := exec.LookPath("addr2line"); err == nil {
			tools = append(tools, tool{name: "addr2line -i -f -C", args: []string{p, "-i", "-f", "-C", "-e", c.path}})
		} else if err := needPeer("addr2line not installed"); err != nil {
			return nil, err
		}
		times := make([][]time.Duration, len(tools))
		outs := make([][]byte, len(tools))
		// Warm the page cache, then interleave the tools round by round.
		for i, t := range tools {
			if outs[i], _, err = runTool(t, in.Bytes()); err != nil {
				return nil, err
			}
		}
		for r := 0; r < rounds; r++ {
			sides := make([]func() error, len(tools))
			for i, t := range tools {
				sides[i] = func() error {
					_, d, err := runTool(t, in.Bytes())
					times[i] = append(times[i], d)
					return err
				}
			}
			if err := inTurn(r, sides...); err != nil {
				return nil, err
			}
		}
		ours := medianDur(times[0])
		fmt.Fprintf(cfg.logger, "  %s: %d addresses, rawstack %v", c.name, n, ours)
		for i := 1; i < len(tools); i++ {
			fmt.Fprintf(cfg.logger, ", %s %v", tools[i].name, medianDur(times[i]))
		}
		fmt.Fprintln(cfg.logger)
		for i := 1; i < len(tools); i++ {
			r := row{Scenario: scen, Metric: fmt.Sprintf("wall ms, %d addrs", n), Rawstack: float64(ours.Microseconds()) / 1000,
				Peer: tools[i].name, PeerVal: float64(medianDur(times[i]).Microseconds()) / 1000, Better: "lower"}
			if tools[i].name == "llvm-symbolizer" {
				same, dem, names, other := compareLLVM(outs[0], outs[i])
				r.Note = fmt.Sprintf("target 2x; output: %d identical, %d differ only where LLVM 14 left names mangled, %d only in demangled text, %d in frames or lines",
					same, dem, names, other)
			} else {
				r.Note = "target: faster"
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}
