package snapshot

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startFixture runs bin with args, waits for it to print "ready" and
// kills it when the test ends.
func startFixture(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	return startCmd(t, exec.Command(bin, args...))
}

// startCmd starts cmd, waits for it to print "ready" and for its threads
// to settle, and kills it when the test ends.
func startCmd(t testing.TB, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	bin := cmd.Path
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("%s exited before it was ready", bin)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", bin)
	}
	waitSettled(t, cmd.Process.Pid)
	return cmd
}

// waitSettled waits until every thread of pid has been asleep for two
// polls in a row: the main thread prints "ready" just before it blocks, and
// the oracles must see the same stacks as the snapshot.
func waitSettled(t testing.TB, pid int) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	quiet := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		asleep := true
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'S' {
				asleep = false
				break
			}
		}
		if !asleep {
			quiet = 0
			continue
		}
		if quiet++; quiet == 2 {
			return
		}
	}
	t.Fatalf("threads of pid %d did not settle in 30s", pid)
}

// symtab names addresses of one ELF file from its symbol table.
type symtab struct {
	syms []elf.Symbol
}

func loadSymtab(t testing.TB, path string) *symtab {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var fn []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			fn = append(fn, s)
		}
	}
	sort.Slice(fn, func(i, j int) bool { return fn[i].Value < fn[j].Value })
	return &symtab{fn}
}

func (s *symtab) name(addr uint64) string {
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].Value > addr })
	if i == 0 {
		return ""
	}
	if sy := s.syms[i-1]; addr < sy.Value+sy.Size {
		return sy.Name
	}
	return ""
}

func hexPCs(pcs []uint64) string {
	var b strings.Builder
	for _, pc := range pcs {
		fmt.Fprintf(&b, " %#x", pc)
	}
	return b.String()
}
