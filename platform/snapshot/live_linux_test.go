package snapshot

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// fixtures are the programs the live tests compare, each with the symbol
// substrings of its blocking leaf, its recursive chain and the function
// that starts the chain in each worker.
var fixtures = []struct {
	name, cc, src      string
	flags              []string
	leaf, chain, outer string
}{
	{"c-gcc", "gcc", "threads.c", []string{"-O2", "-fomit-frame-pointer", "-pthread"}, "leaf_block", "chain_", "worker"},
	{"c-clang", "clang", "threads.c", []string{"-O2", "-fomit-frame-pointer", "-pthread"}, "leaf_block", "chain_", "worker"},
	{"cc-g++", "g++", "threads.cc", []string{"-O2", "-fomit-frame-pointer", "-pthread"}, "leaf_block", "Stepper", "main"},
	{"cc-clang++", "clang++", "threads.cc", []string{"-O2", "-fomit-frame-pointer", "-pthread"}, "leaf_block", "Stepper", "main"},
	{"rust", "rustc", "threads.rs", []string{"-O", "-C", "force-frame-pointers=no"}, "leaf_block", "chain_", "worker"},
}

// snapshotOrSkip snapshots pid, skipping the test where ptrace is not
// permitted.
func snapshotOrSkip(t *testing.T, pid int, opts *Options) *Snapshot {
	t.Helper()
	snap, err := Process(pid, opts)
	var pe *platform.PermissionError
	if errors.As(err, &pe) {
		testbuild.Skip(t, "ptrace not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// stacks are per-thread pcs keyed by tid.
type stacks map[int][]uint64

func (s *Snapshot) stacks() stacks {
	m := stacks{}
	for _, t := range s.Threads {
		m[t.Tid] = t.PCs
	}
	return m
}

// gdbStacks attaches gdb to pid and returns each thread's real frames:
// gdb's inline and tail-call frames come from debug information, not from
// the stack, and are dropped.
func gdbStacks(t *testing.T, pid int) stacks {
	t.Helper()
	testbuild.Need(t, "gdb", "gdb is the stack oracle")
	script, _ := filepath.Abs(filepath.Join("testdata", "gdbstacks.py"))
	out := runOracle(t, "gdb", "-batch", "-nx", "-p", strconv.Itoa(pid), "-x", script)
	return parseGDBStacks(t, out)
}

// parseGDBStacks parses gdbstacks.py's output.
func parseGDBStacks(t *testing.T, out []byte) stacks {
	t.Helper()
	m := stacks{}
	tid := -1
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "TID":
			tid, _ = strconv.Atoi(f[1])
			m[tid] = nil
		case len(f) >= 3 && f[0] == "FRAME" && tid >= 0:
			if f[2] == "inline" || f[2] == "tailcall" {
				continue
			}
			pc, err := strconv.ParseUint(f[1], 16, 64)
			if err != nil {
				t.Fatalf("gdb line %q: %v", line, err)
			}
			m[tid] = append(m[tid], pc)
		}
	}
	if len(m) == 0 {
		t.Fatalf("gdb printed no threads:\n%s", out)
	}
	return m
}

// euStacks runs eu-stack -p pid and returns each thread's pcs.
func euStacks(t *testing.T, pid int) stacks {
	t.Helper()
	testbuild.Need(t, "eu-stack", "elfutils' eu-stack is the stack oracle")
	// eu-stack exits 1 when it cannot unwind some thread to its end (Go
	// threads); what it printed still counts.
	out := runOracleStatus(t, true, "eu-stack", "-p", strconv.Itoa(pid))
	m := stacks{}
	tid := -1
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "TID "); ok {
			tid, _ = strconv.Atoi(strings.TrimSuffix(v, ":"))
			m[tid] = nil
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[0], "#") && tid >= 0 {
			pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			if err != nil {
				t.Fatalf("eu-stack line %q: %v", line, err)
			}
			m[tid] = append(m[tid], pc)
		}
	}
	return m
}

func runOracle(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	return runOracleStatus(t, false, name, args...)
}

// runOracleStatus runs an oracle; with partialOK a failure that still
// printed something is not an error.
func runOracleStatus(t *testing.T, partialOK bool, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && partialOK && errors.As(err, &ee) && len(out) > 0 {
		return out
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// threadStates returns the state letter of every thread of pid
// (/proc/PID/task/TID/stat) and the TracerPid of each.
func threadStates(t *testing.T, pid int) map[int]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]string{}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		state := strings.Fields(string(b[i+1:]))[0]
		st, _ := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
				state += " tracer=" + strings.TrimSpace(v)
			}
		}
		m[tid] = state
	}
	return m
}

// checkReleased fails unless every thread of pid runs again, untraced.
func checkReleased(t *testing.T, pid int) {
	t.Helper()
	for tid, st := range threadStates(t, pid) {
		if st != "S tracer=0" && st != "R tracer=0" {
			t.Errorf("after the snapshot tid %d is %q, want sleeping or running and untraced", tid, st)
		}
	}
}

// TestProcessMatchesGDB compares the stack of every thread of a
// multi-threaded -O2 -fomit-frame-pointer program with gdb's and
// eu-stack's, pc for pc.
func TestProcessMatchesGDB(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			bin := testbuild.CC(t, fx.cc, "", []string{filepath.Join("testdata", fx.src)}, fx.flags...)
			cmd := startFixture(t, bin, "5", "7")
			pid := cmd.Process.Pid
			snap := snapshotOrSkip(t, pid, nil)
			checkReleased(t, pid)
			if len(snap.Threads) != 6 {
				t.Fatalf("snapshot has %d threads, want 6", len(snap.Threads))
			}
			syms := loadSymtab(t, bin)
			exe := snap.Module(snap.Threads[1].PCs[1])
			if exe == nil || !exe.HasCFI || exe.File == "" {
				t.Fatalf("the fixture's module is %+v, want one with CFI", exe)
			}
			if f, err := elf.Open(bin); err != nil {
				t.Fatal(err)
			} else {
				want := elfBuildID(f)
				f.Close()
				if len(want) == 0 || !bytes.Equal(exe.BuildID, want) {
					t.Errorf("build id %x, want %x", exe.BuildID, want)
				}
			}
			for _, th := range snap.Threads {
				if th.Err != nil {
					t.Errorf("tid %d: %v", th.Tid, th.Err)
					continue
				}
				if th.Stop != arch.StopOutermost {
					t.Errorf("tid %d: unwind stopped with %v, want the outermost frame:%s", th.Tid, th.Stop, hexPCs(th.PCs))
				}
				if th.Tid == pid {
					continue
				}
				// Workers: the leaf, then 8+ frames of the chain, then
				// the function that started it.
				var names []string
				for _, pc := range th.PCs[1:] {
					if m := snap.Module(pc); m == exe {
						names = append(names, syms.name(pc-1-exe.Bias))
					}
				}
				chain := 0
				for _, n := range names {
					if strings.Contains(n, fx.chain) {
						chain++
					}
				}
				leaf, outer := -1, -1
				for k, n := range names {
					if leaf < 0 && strings.Contains(n, fx.leaf) {
						leaf = k
					}
					if leaf >= 0 && strings.Contains(n, fx.outer) {
						outer = k
					}
				}
				if leaf < 0 || outer < leaf || chain < 8 {
					t.Errorf("tid %d: fixture frames %v, want %s, 8+ %s*, %s", th.Tid, names, fx.leaf, fx.chain, fx.outer)
				}
			}
			got := snap.stacks()
			compare := func(oracle string, want stacks) {
				for tid, w := range want {
					g, ok := got[tid]
					if !ok {
						t.Errorf("%s: tid %d missing from the snapshot", oracle, tid)
						continue
					}
					if hexPCs(g) != hexPCs(w) {
						t.Errorf("%s: tid %d\n got:%s\nwant:%s", oracle, tid, hexPCs(g), hexPCs(w))
					}
				}
				if len(want) != len(got) {
					t.Errorf("%s: %d threads, snapshot %d", oracle, len(want), len(got))
				}
			}
			compare("gdb", gdbStacks(t, pid))
			compare("eu-stack", euStacks(t, pid))
			// A second snapshot after the oracles detached sees the same.
			again := snapshotOrSkip(t, pid, nil)
			checkReleased(t, pid)
			for tid, pcs := range again.stacks() {
				if hexPCs(pcs) != hexPCs(got[tid]) {
					t.Errorf("second snapshot: tid %d differs:%s vs%s", tid, hexPCs(pcs), hexPCs(got[tid]))
				}
			}
		})
	}
}

// TestProcessOptions: WhileReleasing sees the unwound stacks and runs
// before Process returns; NoThreadNames leaves the names empty, which
// are read otherwise; the stacks are the same either way.
//
// The second snapshot shares the threads among a tracer thread per CPU:
// the stacks must not change.
func TestProcessOptions(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{filepath.Join("testdata", "threads.c")}, "-O2", "-fomit-frame-pointer", "-pthread")
	cmd := startFixture(t, bin, "30", "5")
	pid := cmd.Process.Pid
	plain := snapshotOrSkip(t, pid, nil)
	manyTracers(t)
	var seen [][]uint64
	done := false
	snap := snapshotOrSkip(t, pid, &Options{NoThreadNames: true, WhileReleasing: func(s *Snapshot) {
		for _, th := range s.Threads {
			seen = append(seen, append([]uint64(nil), th.PCs...))
		}
		time.Sleep(20 * time.Millisecond) // Process waits for it
		done = true
	}})
	checkReleased(t, pid)
	if !done {
		t.Fatal("Process returned before WhileReleasing did")
	}
	if len(seen) != len(snap.Threads) || len(snap.Threads) != 31 {
		t.Fatalf("WhileReleasing saw %d threads, the snapshot has %d, want 31", len(seen), len(snap.Threads))
	}
	for i, th := range snap.Threads {
		if th.Name != "" {
			t.Errorf("tid %d named %q with NoThreadNames", th.Tid, th.Name)
		}
		if len(th.PCs) < 3 || fmt.Sprint(th.PCs) != fmt.Sprint(seen[i]) {
			t.Errorf("tid %d: WhileReleasing saw %x, the snapshot has %x", th.Tid, seen[i], th.PCs)
		}
	}
	if plain.stacks()[pid] == nil || fmt.Sprint(plain.stacks()) != fmt.Sprint(snap.stacks()) {
		t.Errorf("stacks differ with the options:\n%v\n%v", plain.stacks(), snap.stacks())
	}
	named := 0
	for _, th := range plain.Threads {
		if th.Name != "" {
			named++
		}
	}
	if named != len(plain.Threads) {
		t.Errorf("%d of %d threads named without NoThreadNames", named, len(plain.Threads))
	}
}
