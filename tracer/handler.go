package tracer

import (
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

// handler receives the back end's events and encodes them; it is the
// Tracer seen as a platform.Handler.
type handler Tracer

var _ platform.Handler = (*handler)(nil)

func (h *handler) Process(e *format.Process) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.procs[e.Pid]; !ok {
		t.nProcs++
	}
	t.procs[e.Pid] = *e
	t.w.WriteProcess(*e)
}

func (h *handler) ProcessEnd(e *format.ProcessEnd) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs, e.Pid)
	t.dropJIT(e.Pid)
	t.w.WriteProcessEnd(*e)
}

func (h *handler) ThreadStart(e *format.ThreadStart) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.threads[e.Tid]; !ok {
		t.nThreads++
	}
	t.threads[e.Tid] = threadState{pid: e.Pid}
	t.w.WriteThreadStart(*e)
}

func (h *handler) ThreadName(e *format.ThreadName) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	th, ok := t.threads[e.Tid]
	if !ok {
		t.nThreads++
	}
	th.pid, th.name = e.Pid, e.Name
	t.threads[e.Tid] = th
	t.w.WriteThreadName(*e)
}

func (h *handler) ThreadEnd(e *format.ThreadEnd) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.threads, e.Tid)
	t.w.WriteThreadEnd(*e)
}

func (h *handler) ModuleLoad(e *format.ModuleLoad) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nModules++
	t.modules[e.ID] = *e
	t.w.WriteModuleLoad(e)
}

func (h *handler) ModuleUnload(e *format.ModuleUnload) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.modules, e.ID)
	t.w.WriteModuleUnload(*e)
}

func (h *handler) Sample(s *platform.Sample) {
	t := (*Tracer)(h)
	t.mu.Lock()
	var py uint64
	if len(s.Python) > 0 || len(s.NewPyCodes) > 0 || s.PyGIL != format.PyGILNone || len(s.JIT) > 0 || len(s.NewJITFuncs) > 0 {
		py = t.python.intern(t.w, s.NewPyCodes, s.Python, s.PyGIL, s.NewJITFuncs, s.JIT)
	}
	if s.Stack != nil {
		var chain uint64
		if len(s.Chain) > 0 {
			chain = t.internStack(s.Chain)
		}
		t.inChunk++
		t.w.WriteRawStack(&format.RawStack{Time: s.Time, Pid: s.Pid, Tid: s.Tid, CPU: s.CPU, Weight: s.Weight, Flags: s.Flags,
			RegMask: s.RegMask, Regs: s.Regs, StackAddr: s.StackAddr, Data: s.Stack, Kernel: t.internStack(s.PCs), Python: py, Chain: chain})
		t.mu.Unlock()
		return
	}
	id := t.internStack(s.PCs)
	if s.NewLabels != nil && s.LabelSet == uint64(len(t.labelSets))+1 {
		t.labelSets = append(t.labelSets, s.NewLabels)
		t.w.WriteLabelSet(s.LabelSet, s.NewLabels)
	}
	var link Link
	goid := s.Goroutine
	if t.links.used.Load() {
		if s.Time >= t.links.drained {
			t.drainSpansLocked() // the spans begun before the sample
		}
		var lg uint64
		link, lg = t.linkOf(s.G, s.Tid, s.Time)
		if goid == 0 {
			goid = lg
		}
	}
	t.inChunk++
	t.w.WriteSample(format.Sample{Time: s.Time, Pid: s.Pid, Tid: s.Tid, CPU: s.CPU, Weight: s.Weight, Stack: id, Flags: s.Flags,
		Goroutine: goid, Labels: s.LabelSet, Python: py, Link: link})
	t.mu.Unlock()
}

// Alloc writes a sampled native allocation (platform.AllocHandler).
func (h *handler) Alloc(a *platform.Alloc) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.WriteAlloc(format.Alloc{Time: a.Time, Pid: a.Pid, Tid: a.Tid, Stack: t.internStack(a.PCs), Addr: a.Addr, Bytes: a.Bytes, Objects: a.Objects})
}

// Free writes the free of a sampled native allocation.
func (h *handler) Free(e *format.Free) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.WriteFree(*e)
}

func (h *handler) Lost(e *format.Lost) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.WriteLost(*e)
}
