package format

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// DumpEvent formats an event on one line, for debugging and golden files.
func DumpEvent(ev *Event) string {
	switch ev.Kind {
	case KindProcess:
		e := ev.Process
		s := fmt.Sprintf("Process t=%d pid=%d ppid=%d name=%q cmdline=%q", e.Time, e.Pid, e.Ppid, e.Name, e.Cmdline)
		for _, a := range e.Attrs {
			s += fmt.Sprintf(" %s=%q", a.Key, a.Value)
		}
		return s
	case KindProcessEnd:
		e := ev.ProcessEnd
		return fmt.Sprintf("ProcessEnd t=%d pid=%d exit=%d", e.Time, e.Pid, e.ExitCode)
	case KindClockSync:
		e := ev.ClockSync
		return fmt.Sprintf("ClockSync t=%d wall=%d", e.Time, e.WallNano)
	case KindThreadStart:
		e := ev.ThreadStart
		return fmt.Sprintf("ThreadStart t=%d pid=%d tid=%d", e.Time, e.Pid, e.Tid)
	case KindThreadName:
		e := ev.ThreadName
		return fmt.Sprintf("ThreadName t=%d pid=%d tid=%d name=%q", e.Time, e.Pid, e.Tid, e.Name)
	case KindThreadEnd:
		e := ev.ThreadEnd
		return fmt.Sprintf("ThreadEnd t=%d pid=%d tid=%d", e.Time, e.Pid, e.Tid)
	case KindModuleLoad:
		e := &ev.ModuleLoad
		var b strings.Builder
		fmt.Fprintf(&b, "ModuleLoad t=%d pid=%d id=%d base=%#x size=%#x off=%#x kind=%v path=%q", e.Time, e.Pid, e.ID, e.Base, e.Size, e.FileOffset, e.Kind, e.Path)
		if len(e.BuildID) > 0 {
			fmt.Fprintf(&b, " buildid=%s", hex.EncodeToString(e.BuildID))
		}
		if e.GoBuildID != "" {
			fmt.Fprintf(&b, " gobuildid=%q", e.GoBuildID)
		}
		if e.HasPDB() {
			fmt.Fprintf(&b, " pdb=%s age=%d pdbpath=%q", hex.EncodeToString(e.PDBGUID[:]), e.PDBAge, e.PDBPath)
		}
		if e.TimeDateStamp != 0 || e.SizeOfImage != 0 {
			fmt.Fprintf(&b, " codeid=%08X%x", e.TimeDateStamp, e.SizeOfImage)
		}
		return b.String()
	case KindModuleUnload:
		e := ev.ModuleUnload
		return fmt.Sprintf("ModuleUnload t=%d pid=%d id=%d", e.Time, e.Pid, e.ID)
	case KindString:
		return fmt.Sprintf("String id=%d %q", ev.String.ID, ev.String.Value)
	case KindStack:
		var b strings.Builder
		fmt.Fprintf(&b, "Stack id=%d [", ev.Stack.ID)
		for i, pc := range ev.Stack.PCs {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%#x", pc)
		}
		b.WriteByte(']')
		return b.String()
	case KindSample:
		e := ev.Sample
		s := fmt.Sprintf("Sample t=%d pid=%d tid=%d cpu=%d weight=%d stack=%d flags=%#x", e.Time, e.Pid, e.Tid, int32(e.CPU), e.Weight, e.Stack, uint8(e.Flags))
		if e.Goroutine != 0 || e.Labels != 0 {
			s += fmt.Sprintf(" goroutine=%d labels=%d", e.Goroutine, e.Labels)
		}
		if e.Python != 0 {
			s += fmt.Sprintf(" python=%d", e.Python)
		}
		if !e.Link.IsZero() {
			s += fmt.Sprintf(" trace_id=%x span_id=%x", e.Link.TraceID, e.Link.SpanID)
		}
		return s
	case KindLabelSet:
		var b strings.Builder
		fmt.Fprintf(&b, "LabelSet id=%d {", ev.LabelSet.ID)
		for i, l := range ev.LabelSet.Labels {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q:%q", l.Key, l.Value)
		}
		b.WriteByte('}')
		return b.String()
	case KindRawStack:
		e := &ev.RawStack
		s := fmt.Sprintf("RawStack t=%d pid=%d tid=%d cpu=%d weight=%d flags=%#x kernel=%d regmask=%#x regs=%#x stackaddr=%#x data=%d bytes", e.Time, e.Pid, e.Tid, int32(e.CPU), e.Weight, uint8(e.Flags), e.Kernel, e.RegMask, e.Regs, e.StackAddr, len(e.Data))
		if e.Python != 0 {
			s += fmt.Sprintf(" python=%d", e.Python)
		}
		if e.Chain != 0 {
			s += fmt.Sprintf(" chain=%d", e.Chain)
		}
		return s
	case KindSpanBegin:
		e := ev.SpanBegin
		s := fmt.Sprintf("SpanBegin t=%d tid=%d id=%d parent=%d name=%d stack=%d", e.Time, e.Tid, e.ID, e.Parent, e.Name, e.Stack)
		if e.Goroutine != 0 || e.GoStart != 0 {
			s += fmt.Sprintf(" goroutine=%d gostart=%d", e.Goroutine, e.GoStart)
		}
		if !e.Link.IsZero() {
			s += fmt.Sprintf(" link=%x/%x", e.Link.TraceID, e.Link.SpanID)
		}
		return s
	case KindSpanEnd:
		e := ev.SpanEnd
		return fmt.Sprintf("SpanEnd t=%d tid=%d id=%d", e.Time, e.Tid, e.ID)
	case KindMarker:
		e := ev.Marker
		s := fmt.Sprintf("Marker t=%d tid=%d name=%d stack=%d", e.Time, e.Tid, e.Name, e.Stack)
		if e.Goroutine != 0 {
			s += fmt.Sprintf(" goroutine=%d", e.Goroutine)
		}
		return s
	case KindCounter:
		e := ev.Counter
		return fmt.Sprintf("Counter t=%d name=%d value=%g", e.Time, e.Name, e.Value)
	case KindLost:
		e := ev.Lost
		return fmt.Sprintf("Lost t=%d pid=%d count=%d reason=%v", e.Time, e.Pid, e.Count, e.Reason)
	case KindJITCode:
		e := &ev.JITCode
		var b strings.Builder
		fmt.Fprintf(&b, "JITCode t=%d pid=%d addr=%#x size=%#x name=%d source=%v", e.Time, e.Pid, e.Addr, e.Size, e.Name, e.Source)
		if e.Code != nil {
			fmt.Fprintf(&b, " code=%d bytes", len(e.Code))
		}
		for _, l := range e.Lines {
			fmt.Fprintf(&b, " +%#x:%d:%d:%d", l.Offset, l.File, l.Line, l.Column)
		}
		return b.String()
	case KindJITUnload:
		e := ev.JITUnload
		return fmt.Sprintf("JITUnload t=%d pid=%d addr=%#x size=%#x", e.Time, e.Pid, e.Addr, e.Size)
	case KindAlloc:
		e := ev.Alloc
		return fmt.Sprintf("Alloc t=%d pid=%d tid=%d stack=%d addr=%#x bytes=%d objects=%d", e.Time, e.Pid, e.Tid, e.Stack, e.Addr, e.Bytes, e.Objects)
	case KindFree:
		e := ev.Free
		return fmt.Sprintf("Free t=%d pid=%d tid=%d addr=%#x stack=%d bytes=%d objects=%d", e.Time, e.Pid, e.Tid, e.Addr, e.Stack, e.Bytes, e.Objects)
	case KindPyCode:
		e := &ev.PyCode
		return fmt.Sprintf("PyCode id=%d name=%q file=%q firstline=%d table=%v lines=%x", e.ID, e.Name, e.File, e.FirstLine, e.Table, e.Lines)
	case KindPyStack:
		var b strings.Builder
		fmt.Fprintf(&b, "PyStack id=%d [", ev.PyStack.ID)
		for i, f := range ev.PyStack.Frames {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d+%#x", f.Code, f.Offset)
			if f.Entry {
				b.WriteString("!")
			}
		}
		b.WriteByte(']')
		if ev.PyStack.GIL != PyGILNone {
			b.WriteString(" gil=" + ev.PyStack.GIL.String())
		}
		if len(ev.PyStack.JIT) > 0 {
			b.WriteString(" jit=[")
			for i, f := range ev.PyStack.JIT {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%#x:%d:%d:%v", f.PC, f.Func, f.Line, f.Tier)
				if f.Inlined {
					b.WriteString("^")
				}
			}
			b.WriteByte(']')
		}
		return b.String()
	case KindJITFunc:
		e := &ev.JITFunc
		return fmt.Sprintf("JITFunc id=%d runtime=%v name=%q file=%q", e.ID, e.Runtime, e.Name, e.File)
	case KindUnknown:
		return fmt.Sprintf("Unknown code=%d body=%d bytes", ev.Code, len(ev.Unknown))
	}
	return ev.Kind.String()
}
