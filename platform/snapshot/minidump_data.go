package snapshot

import "fmt"

// maxDumpStack caps the stack bytes Data copies per thread.
const maxDumpStack = 1 << 24

// Data returns the dump's threads (with their stack memory), modules and
// other memory ranges, ready for [WriteMinidump].
func (d *Minidump) Data() (*MinidumpData, error) {
	out := &MinidumpData{Arch: d.Arch, Pid: uint32(d.Pid), Time: d.Time, Modules: d.Modules}
	stacks := map[uint64]bool{}
	for _, t := range d.Threads {
		td := MinidumpThreadData{Tid: t.Tid, Teb: t.Teb, Name: t.Name, Context: t.Context}
		if t.StackSize > 0 {
			if t.StackSize > maxDumpStack {
				return nil, &MinidumpError{File: d.Name, Msg: fmt.Sprintf("thread %d: stack of %d bytes", t.Tid, t.StackSize)}
			}
			td.Stack = MinidumpMemory{Start: t.StackStart, Data: make([]byte, t.StackSize)}
			if err := d.ReadMemory(t.StackStart, td.Stack.Data); err != nil {
				return nil, err
			}
			stacks[t.StackStart] = true
		}
		out.Threads = append(out.Threads, td)
	}
	var total uint64
	for _, r := range d.Memory {
		if stacks[r.Start] {
			continue
		}
		if total += r.Size; total > 1<<32 {
			return nil, &MinidumpError{File: d.Name, Msg: "more than 4 GiB of memory ranges"}
		}
		b := make([]byte, r.Size)
		if err := d.ReadMemory(r.Start, b); err != nil {
			return nil, err
		}
		out.Memory = append(out.Memory, MinidumpMemory{Start: r.Start, Data: b})
	}
	return out, nil
}
