package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// buildLLDChain builds arch/testdata/lldchain with clang, linked with lld:
// the executable lldchain (main -> lib_a) and liblldchain.so (lib_a ->
// lib_b -> lib_c, which spins), -O2 -fomit-frame-pointer. Both are small
// enough that lld starts their code segment in the read-only segment's
// file page at a link-time address a page further (p_vaddr != p_offset);
// the test fails if they do not, since that is the layout under test.
func buildLLDChain(t *testing.T) string {
	t.Helper()
	testbuild.NeedAll(t, "the lldchain fixture is built with clang and linked with lld", "clang", "ld.lld")
	exe := testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-ec", "clang -O2 -g -fomit-frame-pointer -fPIC -shared -fuse-ld=lld -o liblldchain.so {in0}/lib.c\n" +
			"clang -O2 -g -fomit-frame-pointer -fuse-ld=lld -o lldchain {in0}/main.c -L. -llldchain -Wl,-rpath,'$ORIGIN'"},
		Inputs: []string{"../../arch/testdata/lldchain"},
		Out:    "lldchain",
		Key:    "clang lld",
	})
	for _, p := range []string{exe, filepath.Join(filepath.Dir(exe), "liblldchain.so")} {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var shifted bool
		for _, x := range f.Progs {
			shifted = shifted || x.Type == elf.PT_LOAD && x.Flags&elf.PF_X != 0 && x.Vaddr != x.Off && x.Off < 0x1000
		}
		f.Close()
		if !shifted {
			t.Fatalf("%s: the code segment does not start in file page 0 at p_vaddr != p_offset: not the lld layout under test", p)
		}
	}
	return exe
}

// TestRecordDWARFLLD records the lld-linked chain with --unwind dwarf on
// the perf back end (online and --keep-raw) and on the eBPF one: nearly
// every sample must hold main;lib_a;lib_b;lib_c. A load bias taken from
// the read-only segment used to leave only lib_c.
func TestRecordDWARFLLD(t *testing.T) {
	exe := buildLLDChain(t)
	for _, c := range []struct {
		name  string
		probe func() error
		extra []string
	}{
		{"perf", linux.Probe, nil},
		{"perf-keep-raw", linux.Probe, []string{"--keep-raw", "--stack-size", "4096"}},
		{"ebpf", linux.ProbeBPF, []string{"--backend", "ebpf"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testbuild.Feature(t, c.probe())
			dir := t.TempDir()
			out := filepath.Join(dir, "t.rawstack")
			args := append(append([]string{"record", "-q", "-o", out, "-F", "499", "--unwind", "dwarf"}, c.extra...), "--", exe, "0.5")
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != 0 {
				t.Fatalf("%q exited %d: %s", args, code, stderr.String())
			}
			share, all := foldedShare(t, out, ";main;lib_a;lib_b;lib_c")
			t.Logf("%.1f%% of %d samples hold main;lib_a;lib_b;lib_c", 100*share, all)
			if all < 100 || share < 0.95 {
				t.Errorf("%.1f%% of %d samples hold main;lib_a;lib_b;lib_c, want ≥ 95%%", 100*share, all)
			}
		})
	}
}

// TestSnapshotLLD stops the lld-linked chain (SIGSTOP) and takes its
// stack twice, with rawstack snapshot -p and with eu-stack, the oracle:
// the same pcs, frame for frame, and rawstack names lib_c, lib_b, lib_a
// and main as eu-stack does.
func TestSnapshotLLD(t *testing.T) {
	testbuild.Need(t, "eu-stack", "eu-stack is the oracle of the stopped process's stack")
	exe := buildLLDChain(t)
	cmd := exec.Command(exe, "-1")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(pipe)
	for sc.Scan() && sc.Text() != "ready" {
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	// Past "ready" it only computes, in lib_c; let it get there.
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Wait until the kernel has stopped it.
	for i := 0; ; i++ {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "T" {
			break
		}
		if i == 1000 {
			t.Fatal("the fixture does not stop")
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 1e6}, nil)
	}
	var ours, stderr bytes.Buffer
	if code := run([]string{"snapshot", "-p", pid}, &ours, &stderr); code != 0 {
		testbuild.Feature(t, linux.Probe())
		t.Fatalf("snapshot -p exited %d: %s", code, stderr.String())
	}
	theirs, err := exec.Command("eu-stack", "-p", pid).CombinedOutput()
	if err != nil {
		t.Fatalf("eu-stack: %v\n%s", err, theirs)
	}
	frame := regexp.MustCompile(`(?m)^#(\d+)\s+0x([0-9a-f]+)\s+(\S+)`)
	parse := func(s string) (pcs, names []string) {
		for _, m := range frame.FindAllStringSubmatch(s, -1) {
			pcs = append(pcs, strings.TrimLeft(m[2], "0"))
			names = append(names, m[3])
		}
		return pcs, names
	}
	op, on := parse(ours.String())
	tp, tn := parse(string(theirs))
	t.Logf("rawstack snapshot:\n%s\neu-stack:\n%s", ours.String(), theirs)
	if len(tp) < 7 {
		t.Fatalf("eu-stack found %d frames, want the chain's 7 or more", len(tp))
	}
	if len(op) != len(tp) {
		t.Errorf("rawstack snapshot found %d frames, eu-stack %d", len(op), len(tp))
	}
	for i := range min(len(op), len(tp)) {
		if op[i] != tp[i] {
			t.Errorf("frame #%d: rawstack 0x%s, eu-stack 0x%s", i, op[i], tp[i])
		}
	}
	var chain []string
	for i, n := range tn {
		if strings.HasPrefix(n, "lib_") || n == "main" {
			if i >= len(on) || on[i] != n {
				t.Errorf("frame #%d: eu-stack names %s, rawstack %v", i, n, on[min(i, len(on)-1):])
			}
			chain = append(chain, n)
		}
	}
	if want := "lib_c lib_b lib_a main"; strings.Join(chain, " ") != want {
		t.Errorf("eu-stack's chain is %q, want %q", chain, want)
	}
}
