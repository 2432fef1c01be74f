package otlp

import (
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
)

// TestBuilderForgets: a long whole-host stream does not grow the
// Builder — stacks older than the writer's table (Options.MaxStacks) and
// the modules of processes that ended are forgotten at Flush, while the
// stacks and modules still in use keep naming samples.
func TestBuilderForgets(t *testing.T) {
	b := NewBuilder(format.Header{OS: format.OSLinux, Arch: format.ArchAMD64}, Options{Raw: true, RawKernel: true, MaxStacks: 100})
	ev := func(e format.Event) { b.Event(&e) }
	ev(format.Event{Kind: format.KindProcess, Process: format.Process{Pid: 1, Name: "init"}})
	ev(format.Event{Kind: format.KindModuleLoad, ModuleLoad: format.ModuleLoad{ID: 1, Pid: 1, Base: 0x1000, Size: 0x1000, Path: "/sbin/init"}})
	var id uint64
	flushed := 0
	for pid := uint32(2); pid < 1000; pid++ {
		// A short-lived process: a module, two stacks, a sample, its end.
		ev(format.Event{Kind: format.KindProcess, Process: format.Process{Time: int64(pid), Pid: pid, Name: "true"}})
		ev(format.Event{Kind: format.KindModuleLoad, ModuleLoad: format.ModuleLoad{Time: int64(pid), ID: uint64(pid), Pid: pid, Base: 0x1000, Size: 0x1000, Path: "/bin/true"}})
		for i := 0; i < 2; i++ {
			id++
			ev(format.Event{Kind: format.KindStack, Stack: format.Stack{ID: id, PCs: []uint64{0x1010 + uint64(pid)}}})
		}
		ev(format.Event{Kind: format.KindSample, Sample: format.Sample{Time: int64(pid), Pid: pid, Tid: pid, Weight: 1, Stack: id}})
		ev(format.Event{Kind: format.KindProcessEnd, ProcessEnd: format.ProcessEnd{Time: int64(pid), Pid: pid}})
		if pid%10 == 0 {
			p, n := b.Flush()
			if err := otlpcheck.Check(p); err != nil {
				t.Fatalf("batch %d: %v", pid/10, err)
			}
			flushed += n
		}
	}
	_, n := b.Flush()
	if flushed += n; flushed != 998 {
		t.Fatalf("%d samples flushed, want 998", flushed)
	}
	if len(b.stacks) > 100 {
		t.Errorf("%d stacks held, the writer's table holds 100", len(b.stacks))
	}
	if n := len(b.db.Modules()); n != 1 {
		t.Errorf("%d modules held, want init's alone", n)
	}
	// The live process's module and the recent stacks still name samples.
	ev(format.Event{Kind: format.KindSample, Sample: format.Sample{Time: 2000, Pid: 1, Tid: 1, Weight: 1, Stack: id}})
	p, _ := b.Flush()
	if err := otlpcheck.Check(p); err != nil {
		t.Fatal(err)
	}
	d := p.Dictionary()
	loc := d.LocationTable().At(int(d.StackTable().At(1).LocationIndices().At(0)))
	if loc.MappingIndex() == 0 || b.Counts().UnknownStacks != 0 {
		t.Errorf("the last sample: mapping %d, %d unknown stacks", loc.MappingIndex(), b.Counts().UnknownStacks)
	}
}
