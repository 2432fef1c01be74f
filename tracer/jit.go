package tracer

import (
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

var _ platform.JITHandler = (*handler)(nil)

// jitKey identifies live JIT code for hot join snapshots.
type jitKey struct {
	pid  uint32
	addr uint64
}

// maxLiveJIT caps the JIT entries kept for snapshots of streams added
// later; beyond it a late stream misses the oldest code's names.
const maxLiveJIT = 1 << 20

// JITCode interns the code's name and source files and writes a JITCode
// event; the entry is kept while valid, for hot join snapshots.
func (h *handler) JITCode(e *platform.JITCode) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	ev := format.JITCode{Time: e.Time, Pid: e.Pid, Addr: e.Addr, Size: e.Size, Source: e.Source, Code: e.Code}
	if e.Name != "" {
		ev.Name = t.internString(e.Name)
	}
	if len(e.Lines) > 0 {
		t.jitLines = t.jitLines[:0]
		for _, l := range e.Lines {
			var file uint64
			if l.File != "" {
				file = t.internString(l.File)
			}
			t.jitLines = append(t.jitLines, format.JITLine{Offset: l.Offset, Line: l.Line, Column: l.Column, File: file})
		}
		ev.Lines = t.jitLines
	}
	t.w.WriteJITCode(&ev)
	if t.jit == nil {
		t.jit = map[jitKey]format.JITCode{}
	}
	if len(t.jit) < maxLiveJIT {
		keep := ev
		keep.Code = append([]byte(nil), ev.Code...)
		keep.Lines = append([]format.JITLine(nil), ev.Lines...)
		if ev.Code == nil {
			keep.Code = nil
		}
		t.jit[jitKey{e.Pid, e.Addr}] = keep
	}
}

// JITUnload writes a JITUnload event and forgets the code it ends.
func (h *handler) JITUnload(e *format.JITUnload) {
	t := (*Tracer)(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.WriteJITUnload(*e)
	for k, c := range t.jit {
		if k.pid == e.Pid && c.Addr < e.Addr+e.Size && e.Addr < c.Addr+c.Size {
			delete(t.jit, k)
		}
	}
}

// dropJIT forgets the JIT code of an exited process. Called with t.mu held.
func (t *Tracer) dropJIT(pid uint32) {
	for k := range t.jit {
		if k.pid == pid {
			delete(t.jit, k)
		}
	}
}
