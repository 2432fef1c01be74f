//go:build linux

package tracer

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

func needPerf(t testing.TB) {
	t.Helper()
	testbuild.Feature(t, linux.Probe())
}

// trace is a decoded stream.
type trace struct {
	procs    map[uint32]format.Process
	procEnds map[uint32]bool
	threads  map[uint32]string // tid → last name
	modules  map[uint64]format.ModuleLoad
	stacks   map[uint64][]uint64
	strings  map[uint64]string
	samples  []format.Sample
	markers  []format.Marker
	lost     []format.Lost
	clock    int
}

func readTrace(t testing.TB, b []byte) *trace {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("reading stream header: %v", err)
	}
	tr := &trace{procs: map[uint32]format.Process{}, procEnds: map[uint32]bool{}, threads: map[uint32]string{},
		modules: map[uint64]format.ModuleLoad{}, stacks: map[uint64][]uint64{}, strings: map[uint64]string{}}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading stream: %v", err)
		}
		switch ev.Kind {
		case format.KindProcess:
			tr.procs[ev.Process.Pid] = ev.Process
		case format.KindProcessEnd:
			tr.procEnds[ev.ProcessEnd.Pid] = true
		case format.KindClockSync:
			tr.clock++
		case format.KindThreadStart:
			if _, ok := tr.threads[ev.ThreadStart.Tid]; !ok {
				tr.threads[ev.ThreadStart.Tid] = ""
			}
		case format.KindThreadName:
			tr.threads[ev.ThreadName.Tid] = ev.ThreadName.Name
		case format.KindModuleLoad:
			m := ev.ModuleLoad
			m.BuildID = append([]byte(nil), m.BuildID...)
			tr.modules[m.ID] = m
		case format.KindStack:
			tr.stacks[ev.Stack.ID] = append([]uint64(nil), ev.Stack.PCs...)
		case format.KindString:
			tr.strings[ev.String.ID] = ev.String.Value
		case format.KindSample:
			if ev.Sample.Stack != 0 {
				if _, ok := tr.stacks[ev.Sample.Stack]; !ok {
					t.Fatalf("sample at offset %d refers to undefined stack %d", ev.Offset, ev.Sample.Stack)
				}
			}
			tr.samples = append(tr.samples, ev.Sample)
		case format.KindMarker:
			tr.markers = append(tr.markers, ev.Marker)
		case format.KindLost:
			tr.lost = append(tr.lost, ev.Lost)
		}
	}
	return tr
}

// symtab maps addresses of one ELF file to function names.
type symtab struct {
	f     *elf.File
	syms  []elf.Symbol
	loads []elf.ProgHeader
}

func openSymtab(t testing.TB, path string) *symtab {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
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
	st := &symtab{f: f, syms: fn}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			st.loads = append(st.loads, p.ProgHeader)
		}
	}
	return st
}

// lookup names the function at absolute address pc of process pid, using
// the module in tr that maps it (it must be path).
func (st *symtab) lookup(tr *trace, pid uint32, path string, pc uint64) string {
	for _, m := range tr.modules {
		if m.Pid != pid || m.Path != path || pc < m.Base || pc >= m.Base+m.Size {
			continue
		}
		off := pc - m.Base + m.FileOffset
		for _, p := range st.loads {
			if off >= p.Off && off < p.Off+p.Filesz {
				va := off - p.Off + p.Vaddr
				i := sort.Search(len(st.syms), func(i int) bool { return st.syms[i].Value > va }) - 1
				if i >= 0 && va < st.syms[i].Value+st.syms[i].Size {
					return st.syms[i].Name
				}
			}
		}
	}
	return ""
}

// hasChain reports whether stack pcs holds c, b, a, main consecutively.
func hasChain(st *symtab, tr *trace, pid uint32, path string, pcs []uint64) bool {
	want := []string{"c", "b", "a", "main"}
	for i := range pcs {
		ok := true
		for j, w := range want {
			if i+j >= len(pcs) {
				return false
			}
			pc := pcs[i+j]
			if i+j > 0 {
				pc-- // return address: look up the call
			}
			if st.lookup(tr, pid, path, pc) != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestLaunchChain(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Command: exec.Command(bin, "0.8"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	total, good := 0, 0
	for _, s := range d.samples {
		if s.Pid != pid {
			continue
		}
		total++
		if hasChain(st, d, pid, bin, d.stacks[s.Stack]) {
			good++
		}
	}
	t.Logf("%d of %d samples hold main→a→b→c; %d modules, %d lost events; stats %+v", good, total, len(d.modules), len(d.lost), tr.Stats())
	if testing.Verbose() {
		for _, m := range d.modules {
			t.Logf("module %+v", m)
		}
		for id, s := range d.stacks {
			t.Logf("stack %d: %x", id, s)
		}
	}
	if total < 100 {
		t.Fatalf("only %d samples of pid %d in 0.8 s of CPU at 1000 Hz", total, pid)
	}
	if frac := float64(good) / float64(total); frac < 0.95 {
		t.Errorf("%.1f%% of samples hold main→a→b→c, want ≥ 95%%", 100*frac)
	}
	if !d.procEnds[pid] {
		t.Errorf("no ProcessEnd for pid %d", pid)
	}
	var exe *format.ModuleLoad
	for _, m := range d.modules {
		if m.Path == bin {
			exe = &m
			break
		}
	}
	if exe == nil || len(exe.BuildID) == 0 || exe.Kind != format.ModuleELF {
		t.Errorf("executable module %s missing or without build id: %+v", bin, exe)
	}
}
