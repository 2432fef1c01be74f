//go:build linux && (amd64 || arm64)

package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/rawstack/rawstack/platform/linux/cpython"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

//go:generate sh bpf/build.sh

func init() {
	tracking.RegisterEBPF(tracking.Backend{
		Probe: Probe,
		Open: func(cfg platform.Config, h platform.Handler) (tracking.Session, error) {
			s, err := Open(cfg, h)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Launch: func(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (tracking.Session, error) {
			s, err := Launch(cmd, cfg, h)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	})
}

// probeFeatures checks the kernel features the programs need, as
// cilium/ebpf's feature probes see them.
func probeFeatures() error {
	for _, f := range []struct {
		name string
		err  func() error
	}{
		{"BPF ring buffer maps (Linux 5.8)", func() error { return features.HaveMapType(ebpf.RingBuf) }},
		{"BPF perf-event programs", func() error { return features.HaveProgramType(ebpf.PerfEvent) }},
	} {
		if err := f.err(); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return &platform.NotSupportedError{Feature: "eBPF back end", Reason: "the kernel lacks " + f.name}
			}
			if errors.Is(err, errPerm) {
				return &platform.PermissionError{Op: "probing " + f.name, Need: "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)", Err: err}
			}
			return fmt.Errorf("probing %s: %w", f.name, err)
		}
	}
	return nil
}

// programs is the kernel side of the eBPF back end: the loaded
// collection (programs and maps), its links and the ring buffer the
// session reads. Its methods are called from one goroutine.
type programs struct {
	spec  bpfSpec
	coll  *ebpf.Collection
	links []link.Link
	rb    *ringReader
	lost  []uint64
}

func load(spec bpfSpec) (*programs, error) {
	cs, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(object))
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF object: %w", err)
	}
	b2u := func(b bool) uint32 {
		if b {
			return 1
		}
		return 0
	}
	cs.Maps["events"].MaxEntries = uint32(spec.RingBytes)
	// Hash maps are preallocated: shrink those the session does not use
	// (1.6 MiB of the 5.9 MiB of BPF memory a whole-host session had).
	if spec.All {
		cs.Maps["targets"].MaxEntries = 1
	}
	if !spec.OffCPU {
		cs.Maps["offstart"].MaxEntries = 1
	}
	if !spec.Python {
		cs.Maps["py_procs"].MaxEntries = 1
		cs.Maps["py_threads"].MaxEntries = 1
	}
	if spec.AllocRate == 0 {
		cs.Maps["live"].MaxEntries = 1
		cs.Maps["alloc_calls"].MaxEntries = 1
		for _, a := range allocProbes {
			delete(cs.Programs, a.prog)
		}
		delete(cs.Programs, "alloc_return")
		delete(cs.Programs, "shim_alloc")
		delete(cs.Programs, "shim_free")
	}
	for name, v := range map[string]any{
		"all_procs": b2u(spec.All), "copy_stack": b2u(spec.CopyStack), "stack_bytes": uint32(spec.StackBytes), "self_tgid": uint32(spec.SelfPid),
		"wakeup_bytes": uint64(spec.WakeupBytes), "alloc_rate": uint64(spec.AllocRate), "python": b2u(spec.Python),
		"wake_new": b2u(spec.WakeNew), "go_regs": b2u(spec.GoRegs), "jit_wake_ns": uint64(spec.JITWake),
	} {
		if err := cs.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting BPF constant %s: %w", name, err)
		}
	}
	if !spec.OffCPU {
		delete(cs.Programs, "on_switch")
	}
	if spec.JITWake == 0 {
		cs.Maps["jit_procs"].MaxEntries = 1
	}
	if !spec.WakeNew {
		cs.Maps["seen"].MaxEntries = 1
		delete(cs.Programs, "on_exec")
	}
	p := &programs{spec: spec}
	p.coll, err = ebpf.NewCollection(cs)
	if err != nil {
		return nil, loadError(err)
	}
	ev := p.coll.Maps["events"]
	p.rb, err = newRingReader(ev.FD(), int(ev.MaxEntries()))
	if err != nil {
		p.Close()
		return nil, err
	}
	// Fork tracking first, so that no child of a target escapes.
	names := []string{"on_fork", "on_exit"}
	if spec.WakeNew {
		names = append(names, "on_exec")
	}
	for _, name := range names {
		if err := p.attach(name); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

func (p *programs) attach(name string) error {
	l, err := link.AttachTracing(link.TracingOptions{Program: p.coll.Programs[name]})
	if err != nil {
		return fmt.Errorf("attaching %s (tp_btf): %w", name, err)
	}
	p.links = append(p.links, l)
	return nil
}

func (p *programs) Select(pid uint32) error {
	if err := p.coll.Maps["targets"].Put(pid, uint8(1)); err != nil {
		return fmt.Errorf("selecting pid %d: %w", pid, err)
	}
	return nil
}

// pyProc is struct py_proc of bpf/rawstack.bpf.c.
type pyProc struct {
	Runtime                                                 uint64
	InterpretersHead, ThreadsHead, TSNext                   uint32
	RTGIL, InterpGIL                                        uint32
	TSFrame, CFrameFrame, TSTid                             uint32
	FrCode, FrInstr, FrPrevious, FrOwner, FrIsEntry, FrSize uint32
	GILHolder, GILLocked                                    uint32
	Legacy, PthreadTid                                      uint32
}

// SetPyProcess tells the cpu-clock program how to read the Python frames
// of process pid's threads at each of their samples.
func (p *programs) SetPyProcess(pid uint32, w cpython.Walk) error {
	if w.Runtime == 0 { // gone
		return p.coll.Maps["py_procs"].Delete(pid)
	}
	v := pyProc{Runtime: w.Runtime, InterpretersHead: w.InterpretersHead, ThreadsHead: w.ThreadsHead, TSNext: w.TSNext,
		RTGIL: w.RTGIL, InterpGIL: w.InterpGIL, TSFrame: w.TSFrame, CFrameFrame: w.CFrameFrame, TSTid: w.TSTid,
		FrCode: w.FrCode, FrInstr: w.FrInstr, FrPrevious: w.FrPrevious, FrOwner: w.FrOwner, FrIsEntry: w.FrIsEntry, FrSize: w.FrSize,
		GILHolder: w.GILHolder, GILLocked: w.GILLocked, PthreadTid: w.PthreadTid}
	if w.Legacy {
		v.Legacy = 1
	}
	return p.coll.Maps["py_procs"].Put(pid, v)
}

// SetV8Process makes the samples of process pid, which runs V8, wake
// the reader (bpfSpec.JITWake).
func (p *programs) SetV8Process(pid uint32) error {
	return p.coll.Maps["jit_procs"].Put(pid, uint8(1))
}

// SetPyThread tells the cpu-clock program where thread tid's state and
// its interpreter's GIL are, for a thread it did not find itself (the
// thread list is longer than it walks).
func (p *programs) SetPyThread(tid uint32, tstate, gil uint64) error {
	return p.coll.Maps["py_threads"].Put(tid, [2]uint64{tstate, gil})
}

func (p *programs) PerfProgramFD() int { return p.coll.Programs["on_cpu"].FD() }

func (p *programs) Start() error {
	if err := p.coll.Variables["running"].Set(uint32(1)); err != nil {
		return fmt.Errorf("starting the BPF programs: %w", err)
	}
	if p.spec.OffCPU {
		return p.attach("on_switch")
	}
	return nil
}

func (p *programs) RingFD() int { return p.coll.Maps["events"].FD() }

func (p *programs) Next() ([]byte, bool) { return p.rb.next() }

func (p *programs) Lost() (ring, offCPU, alloc uint64) {
	sum := func(reason uint32) uint64 {
		if err := p.coll.Maps["lost"].Lookup(reason, &p.lost); err != nil {
			return 0
		}
		var n uint64
		for _, v := range p.lost {
			n += v
		}
		return n
	}
	return sum(0), sum(1), sum(2) // LOST_RING, LOST_OFFSTART, LOST_ALLOC
}

func (p *programs) Close() error {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	if p.rb != nil {
		p.rb.close()
		p.rb = nil
	}
	if p.coll != nil {
		p.coll.Close()
		p.coll = nil
	}
	return nil
}

// loadError explains a failure to load the BPF collection.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		log := ve.Log
		if len(log) > 20 {
			log = log[len(log)-20:]
		}
		return fmt.Errorf("the kernel's verifier rejected rawstack's BPF program: %v\n%s", ve.Cause, strings.Join(log, "\n"))
	}
	if errors.Is(err, errPerm) {
		return &platform.PermissionError{Op: "loading eBPF programs", Need: "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)", Err: err}
	}
	return fmt.Errorf("loading rawstack's BPF programs: %w", err)
}
