package allocshim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// Injection: a running process gets the sampler the way heaptrack
// attaches, without gdb. The recorder stops one of its threads with
// ptrace at a point outside the allocator and the dynamic linker (a
// thread running the program's own code, or blocked in a system call
// that is not one the allocator makes), saves its registers (the general
// ones and the whole extended state), and makes it call dlopen on the
// sampler's file, placed where the process's mount namespace sees it,
// then rawstack_attach, which finds the program's allocator
// (dlsym(RTLD_DEFAULT)), maps the ring and points the allocator slots
// of every loaded module (their GOT entries: JUMP_SLOT and GLOB_DAT
// relocations naming malloc, free, calloc, realloc, posix_memalign,
// aligned_alloc, memalign, valloc, pvalloc and operator new and delete)
// at the sampler. Each call returns to address 0, whose fault stops the
// thread again; the registers are put back and the thread let go. The
// other threads run all the while: a lock one of them holds is released.
// Only the architecture's part (the registers of a call) is per
// architecture (inject_linux_amd64.go).

// InjectError says why the sampler could not be injected into a
// process; the recorder falls back to uprobes and says why.
type InjectError struct {
	Pid    int
	Reason string
	Err    error
}

func (e *InjectError) Error() string {
	s := fmt.Sprintf("pid %d: the allocation sampler cannot be injected: %s", e.Pid, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *InjectError) Unwrap() error { return e.Err }

// TargetDir is where the sampler's file and the ring go for process pid:
// Host is the directory as the recorder reaches it, Target as the
// process sees it. For a process in the recorder's mount namespace both
// are the recorder's own directory of the system's temporary one
// (Install's); for one in another (a container, unshare -m) its
// /tmp/rawstack-UID, reached through /proc/PID/root.
type TargetDir struct {
	Host, Target string
}

// DirFor returns the TargetDir of process pid, made if need be.
func DirFor(pid int) (TargetDir, error) {
	root := procfs.Dir(pid) + "/root"
	theirs, err := os.Readlink(procfs.Dir(pid) + "/ns/mnt")
	if err != nil {
		return TargetDir{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	var rs, ms syscall.Stat_t
	if ours, err := os.Readlink("/proc/self/ns/mnt"); err == nil && ours == theirs &&
		syscall.Stat(root+"/", &rs) == nil && syscall.Stat("/", &ms) == nil && rs.Dev == ms.Dev && rs.Ino == ms.Ino {
		d, err := installDir()
		return TargetDir{Host: d, Target: d}, err
	}
	name := "rawstack-" + strconv.Itoa(os.Geteuid())
	host := filepath.Join(root, "tmp", name)
	if err := os.Mkdir(host, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return TargetDir{}, fmt.Errorf("pid %d: placing the allocation sampler: %w", pid, err)
	}
	if err := private(host); err != nil {
		return TargetDir{}, fmt.Errorf("pid %d: placing the allocation sampler: %w", pid, err)
	}
	return TargetDir{Host: host, Target: "/tmp/" + name}, nil
}

// InjectConfig is what Inject gives the sampler.
type InjectConfig struct {
	Dir  TargetDir // where the sampler's file goes (DirFor)
	Rate int       // mean sampling interval in bytes
	// Ring is the shared ring, made in Dir.Host (nil: the markers
	// serve).
	Ring *Ring
}

// Injection is a sampler injected into a running process.
type Injection struct {
	Pid int
	// Lib is the sampler's file as the recorder reaches it (for uprobes
	// on its markers), Target as the process sees it.
	Lib, Target string
	// Slots is how many allocator slots were redirected; Ringed says the
	// sampler writes the ring (else its markers serve); Hooked says
	// modules loaded later are announced to it by the dynamic linker
	// (else it looks for them once a second).
	Slots          int
	Ringed, Hooked bool
	// Restored is how many slots the detach put back.
	Restored int
	// Elapsed is how long the target's stopped thread was held.
	Elapsed time.Duration
}

// attachArgs is struct attach_args of shim.c.
const (
	attachArgsSize = 4 + 4 + 8 + 1024 + 4*4
	attachRingOff  = 16
	attachOutOff   = 16 + 1024
)

// attachErr says what an error rawstack_attach returns (negated) means,
// as shim.c's ATTACH_ERR_*; "" for another.
func attachErr(n int64) string {
	switch n {
	case 1:
		return "the sampler refused its arguments"
	case 2:
		return "the process already runs the sampler, preloaded"
	case 3:
		return "no malloc and free were found in the process"
	case 4:
		return "the sampler could not map its memory"
	case 5:
		return "another attach or detach is under way"
	}
	return ""
}

// Inject loads the sampler into process pid and attaches it (see the
// package comment). A process that cannot take it (statically linked,
// its own malloc in the executable, ptrace refused, no dlopen in its C
// library, no thread found outside the allocator) gives an
// *InjectError.
func Inject(pid int, cfg InjectConfig) (*Injection, error) {
	if !archInject {
		return nil, &InjectError{Pid: pid, Reason: "injection is implemented for x86-64 only (" + runtime.GOARCH + ")"}
	}
	if err := injectable(pid); err != nil {
		return nil, err
	}
	lib, err := Install(cfg.Dir.Host)
	if err != nil {
		return nil, &InjectError{Pid: pid, Reason: "placing the sampler's file", Err: err}
	}
	target := filepath.Join(cfg.Dir.Target, filepath.Base(lib))
	dl, err := loaderSymbols(pid)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t, err := stopSafeThread(pid, 2*time.Second)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer t.release()
	scratch := t.scratch()
	if err := t.write(scratch, append([]byte(target), 0)); err != nil {
		return nil, &InjectError{Pid: pid, Reason: "writing into the process", Err: err}
	}
	const rtldNow = 2
	h, err := t.call(dl.dlopen, scratch, rtldNow)
	if err != nil {
		return nil, err
	}
	if h == 0 {
		msg := "dlopen returned NULL"
		if p, err := t.call(dl.dlerror); err == nil && p != 0 {
			if s, err := t.cstring(p, 512); err == nil {
				msg = s
			}
		}
		return nil, &InjectError{Pid: pid, Reason: "dlopen(" + target + ") in the process failed", Err: errors.New(msg)}
	}
	base, err := loadedAt(pid, target)
	if err != nil {
		return nil, err
	}
	attach, err := objectSymbol("rawstack_attach")
	if err != nil {
		return nil, &InjectError{Pid: pid, Reason: "the sampler's object", Err: err}
	}
	args := make([]byte, attachArgsSize)
	le := binary.LittleEndian
	le.PutUint32(args, attachArgsSize)
	le.PutUint64(args[8:], uint64(max(cfg.Rate, 1)))
	if cfg.Ring != nil {
		p := filepath.Join(cfg.Dir.Target, filepath.Base(cfg.Ring.Path()))
		if len(p) >= 1024 {
			return nil, &InjectError{Pid: pid, Reason: "the ring's path is too long: " + p}
		}
		copy(args[attachRingOff:], p)
	}
	if err := t.write(scratch, args); err != nil {
		return nil, &InjectError{Pid: pid, Reason: "writing into the process", Err: err}
	}
	rc, err := t.call(base+attach, scratch)
	if err != nil {
		return nil, err
	}
	if err := t.read(scratch, args); err != nil {
		return nil, &InjectError{Pid: pid, Reason: "reading the sampler's answer", Err: err}
	}
	if n := int64(int32(rc)); n < 0 {
		why := attachErr(-n)
		if why == "" {
			why = fmt.Sprintf("rawstack_attach returned %d", n)
		}
		return nil, &InjectError{Pid: pid, Reason: why}
	}
	out := args[attachOutOff:]
	in := &Injection{Pid: pid, Lib: lib, Target: target, Slots: int(int32(le.Uint32(out))),
		Ringed: le.Uint32(out[8:]) != 0, Hooked: le.Uint32(out[12:]) != 0, Elapsed: time.Since(start)}
	return in, nil
}

// Detach ends the injected sampler at a clean detach: it calls
// rawstack_detach in the process, which makes the sampler inert and
// puts every slot back. The sampler's file stays loaded (a thread may be
// inside it); a process that is gone is not an error.
func (in *Injection) Detach() error {
	base, err := loadedAt(in.Pid, in.Target)
	if err != nil {
		if _, serr := os.Stat(procfs.Dir(in.Pid)); serr != nil {
			return nil
		}
		return err
	}
	detach, err := objectSymbol("rawstack_detach")
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for try := 0; ; try++ {
		t, err := stopSafeThread(in.Pid, 500*time.Millisecond)
		if err != nil {
			if _, serr := os.Stat(procfs.Dir(in.Pid)); serr != nil {
				return nil
			}
			return err
		}
		rc, err := t.call(base + detach)
		t.release()
		if err != nil {
			return err
		}
		if int32(rc) != -5 || try == 50 { // -ATTACH_ERR_BUSY: another thread was patching
			if int32(rc) < 0 {
				return &InjectError{Pid: in.Pid, Reason: fmt.Sprintf("rawstack_detach returned %d", int32(rc))}
			}
			in.Restored = int(int32(rc))
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

// injectable checks what can be told from the files: the process runs a
// dynamic loader, and its executable does not define malloc (its own
// calls would not go through a slot).
func injectable(pid int) error {
	f, err := elf.Open(procfs.Dir(pid) + "/exe")
	if err != nil {
		return &InjectError{Pid: pid, Reason: "reading its executable", Err: err}
	}
	defer f.Close()
	interp := false
	for _, p := range f.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	if !interp {
		return &InjectError{Pid: pid, Reason: "it is statically linked (no dynamic loader to load the sampler, no slots to redirect)"}
	}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "malloc" && s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return &InjectError{Pid: pid, Reason: "its executable defines malloc itself (a statically linked allocator: its calls go through no slot)"}
		}
	}
	return nil
}

// loaderFuncs are the addresses in the process of the functions the
// injection calls.
type loaderFuncs struct{ dlopen, dlerror uint64 }

// loaderSymbols finds dlopen and dlerror in the process's C library
// (glibc 2.34 and later; before, in libdl, or glibc's own
// __libc_dlopen_mode).
func loaderSymbols(pid int) (loaderFuncs, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return loaderFuncs{}, &InjectError{Pid: pid, Reason: "reading its maps", Err: err}
	}
	var out loaderFuncs
	for _, lib := range []string{"libc.so.6", "libdl.so.2"} {
		bias, file, ok := moduleBias(pid, maps, lib)
		if !ok {
			continue
		}
		syms, err := dynSyms(file)
		if err != nil {
			continue
		}
		for _, name := range []string{"dlopen", "__libc_dlopen_mode"} {
			if v, ok := syms[name]; ok && out.dlopen == 0 {
				out.dlopen = bias + v
			}
		}
		if v, ok := syms["dlerror"]; ok && out.dlerror == 0 {
			out.dlerror = bias + v
		}
	}
	if out.dlopen == 0 {
		return out, &InjectError{Pid: pid, Reason: "no dlopen found in its C library (not glibc?)"}
	}
	return out, nil
}

func readMaps(pid int) ([]procfs.Mapping, error) {
	b, err := procfs.ReadInto(procfs.Dir(pid)+"/maps", nil, 64<<20)
	if err != nil {
		return nil, err
	}
	return procfs.ParseMaps(b)
}

// moduleBias returns the load bias and the file (through /proc/PID/root)
// of the module named name (its file name) in maps.
func moduleBias(pid int, maps []procfs.Mapping, name string) (uint64, string, bool) {
	for _, m := range maps {
		if m.Offset != 0 || path.Base(m.Path) != name {
			continue
		}
		file := procfs.Dir(pid) + "/root" + m.Path
		f, err := elf.Open(file)
		if err != nil {
			return 0, "", false
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Off == 0 {
				return m.Start - (p.Vaddr &^ (p.Align - 1)), file, true
			}
		}
		return m.Start, file, true
	}
	return 0, "", false
}

// dynSyms returns the defined functions of an ELF file's dynamic symbol
// table, by name.
func dynSyms(file string) (map[string]uint64, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(syms))
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out[s.Name] = s.Value
		}
	}
	return out, nil
}

// objectSymbol returns the offset of a function of Object.
func objectSymbol(name string) (uint64, error) {
	f, err := elf.NewFile(bytes.NewReader(Object))
	if err != nil {
		return 0, err
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return 0, err
	}
	for _, s := range syms {
		if s.Name == name && s.Section != elf.SHN_UNDEF {
			return s.Value, nil
		}
	}
	return 0, fmt.Errorf("the allocation sampler has no %s", name)
}

// loadedAt returns where the sampler's file (as the process names it) is
// loaded in process pid.
func loadedAt(pid int, target string) (uint64, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return 0, &InjectError{Pid: pid, Reason: "reading its maps", Err: err}
	}
	for _, m := range maps {
		if m.Path == target && m.Offset == 0 {
			return m.Start, nil
		}
	}
	return 0, &InjectError{Pid: pid, Reason: target + " is not mapped in the process"}
}

// stopped is a thread of the target held by ptrace, with the state to
// put back.
type stopped struct {
	pid, tid int
	mem      *os.File
	regs     userRegs
	xstate   []byte // the extended register state (x87, SSE, AVX, ...)
	nx       int
}

// stopSafeThread stops a thread of pid that is outside the allocator and
// the dynamic linker, trying each thread in turn and again every
// millisecond until within. The caller has locked its OS thread.
func stopSafeThread(pid int, within time.Duration) (*stopped, error) {
	mem, err := os.OpenFile(procfs.Dir(pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		return nil, &InjectError{Pid: pid, Reason: "opening its memory", Err: err}
	}
	deadline := time.Now().Add(within)
	var last string
	for round := 0; ; round++ {
		maps, err := readMaps(pid)
		if err != nil {
			mem.Close()
			return nil, &InjectError{Pid: pid, Reason: "reading its maps", Err: err}
		}
		tids, err := procfs.Tasks(pid)
		if err != nil {
			mem.Close()
			return nil, &InjectError{Pid: pid, Reason: "listing its threads", Err: err}
		}
		for _, tid := range tids {
			t, why, err := stopThread(pid, tid, maps)
			if err != nil {
				mem.Close()
				return nil, err
			}
			if t != nil {
				t.mem = mem
				return t, nil
			}
			if why != "" {
				last = why
			}
		}
		if time.Now().After(deadline) {
			mem.Close()
			return nil, &InjectError{Pid: pid, Reason: fmt.Sprintf("no thread stopped outside the allocator and the dynamic linker in %v (%d rounds; last: %s)", within, round+1, last)}
		}
		time.Sleep(time.Millisecond)
	}
}

// allocatorLibs are the files of the allocator and the dynamic linker: a
// thread stopped in their code may hold a lock that dlopen takes.
var unsafeLibs = []string{"libc.so", "libc-", "ld-linux", "ld-musl", "libjemalloc", "libtcmalloc", "libstdc++", "libpthread", "libdl", "librawstack-alloc"}

// stopThread seizes and stops thread tid and keeps it when it is at a
// safe point; otherwise it lets it go and says why (why "" when it had
// exited).
func stopThread(pid, tid int, maps []procfs.Mapping) (*stopped, string, error) {
	if err := sys.PtraceSeize(tid); err != nil {
		if err == syscall.ESRCH {
			return nil, "", nil
		}
		reason := "ptrace refused"
		if err == syscall.EPERM {
			reason = fmt.Sprintf("ptrace refused (another tracer, kernel.yama.ptrace_scope=%d, or no CAP_SYS_PTRACE)", procfs.SysctlInt("kernel.yama.ptrace_scope", 0))
		}
		return nil, "", &InjectError{Pid: pid, Reason: reason, Err: err}
	}
	if err := sys.PtraceInterrupt(tid); err != nil {
		sys.PtraceDetachSignal(tid, 0)
		return nil, "", nil
	}
	sig := 0
	for {
		st, err := sys.WaitTid(tid)
		if err != nil || st.Exited {
			return nil, "", nil
		}
		if st.Event == sys.PtraceEventStop {
			break
		}
		// A signal on its way to the thread: it is delivered when the
		// thread goes (after the interrupt's stop).
		sig = st.Sig
		sys.PtraceCont(tid, 0)
	}
	t := &stopped{pid: pid, tid: tid}
	if err := t.getRegs(); err != nil {
		sys.PtraceDetachSignal(tid, sig)
		return nil, "", nil
	}
	why := ""
	pc := t.regs.pc()
	if nr, in := t.regs.syscall(); in {
		if allocatorSyscall(nr) {
			why = fmt.Sprintf("thread %d in system call %d, which the allocator makes", tid, nr)
		} else if lib := libAt(maps, pc); isUnsafeLib(lib) && strings.Contains(lib, "ld-") {
			why = fmt.Sprintf("thread %d in a system call of the dynamic linker", tid)
		}
	} else if lib := libAt(maps, pc); isUnsafeLib(lib) {
		why = fmt.Sprintf("thread %d running in %s", tid, path.Base(lib))
	}
	if why != "" || sig != 0 {
		if why == "" {
			why = fmt.Sprintf("thread %d has signal %d pending", tid, sig)
		}
		sys.PtraceDetachSignal(tid, sig)
		return nil, why, nil
	}
	buf := make([]byte, 64<<10)
	n, err := sys.PtraceRegSet(tid, sys.NTX86Xstate, buf, false)
	if err != nil {
		sys.PtraceDetachSignal(tid, 0)
		return nil, "", &InjectError{Pid: pid, Reason: fmt.Sprintf("reading thread %d's extended registers", tid), Err: err}
	}
	t.xstate, t.nx = buf[:n], n
	return t, "", nil
}

func libAt(maps []procfs.Mapping, pc uint64) string {
	for _, m := range maps {
		if pc >= m.Start && pc < m.End {
			return m.Path
		}
	}
	return ""
}

func isUnsafeLib(p string) bool {
	b := path.Base(p)
	for _, l := range unsafeLibs {
		if strings.HasPrefix(b, l) {
			return true
		}
	}
	return false
}

func (t *stopped) getRegs() error {
	b := make([]byte, 8*len(t.regs))
	n, err := sys.PtraceRegSet(t.tid, sys.NTPrstatus, b, false)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("thread %d: %d bytes of registers, want %d", t.tid, n, len(b))
	}
	for i := range t.regs {
		t.regs[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return nil
}

func setRegs(tid int, r *userRegs) error {
	b := make([]byte, 8*len(r))
	for i, v := range r {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	_, err := sys.PtraceRegSet(tid, sys.NTPrstatus, b, true)
	return err
}

// release puts the thread's registers back and lets it go.
func (t *stopped) release() {
	setRegs(t.tid, &t.regs)
	if t.nx > 0 {
		sys.PtraceRegSet(t.tid, sys.NTX86Xstate, t.xstate, true)
	}
	sys.PtraceDetachSignal(t.tid, 0)
	t.mem.Close()
}

// scratchBytes is the room below the thread's stack pointer (past the
// red zone) that the injection writes its strings and arguments into.
const scratchBytes = 8 << 10

func (t *stopped) scratch() uint64 {
	return (t.regs.sp() - 128 - scratchBytes) &^ 15
}

func (t *stopped) write(at uint64, b []byte) error {
	_, err := t.mem.WriteAt(b, int64(at))
	return err
}

func (t *stopped) read(at uint64, b []byte) error {
	_, err := t.mem.ReadAt(b, int64(at))
	return err
}

func (t *stopped) cstring(at uint64, max int) (string, error) {
	b := make([]byte, max)
	n, _ := t.mem.ReadAt(b, int64(at))
	if i := bytes.IndexByte(b[:n], 0); i >= 0 {
		return string(b[:i]), nil
	}
	return "", fmt.Errorf("no string at %#x", at)
}

// callTimeout bounds a remote call: dlopen of a small object takes
// milliseconds.
const callTimeout = 10 * time.Second

// call makes the stopped thread call fn(args...) and returns what it
// returned. The call returns to address 0; the fault there stops the
// thread. Signals that arrive meanwhile are delivered (their handlers
// run on top of the call); a fault elsewhere ends the injection.
func (t *stopped) call(fn uint64, args ...uint64) (uint64, error) {
	r := t.regs
	sp := t.scratch() - 8 // the return address; sp+8 is 16-aligned at the entry
	if err := t.write(sp, make([]byte, 8)); err != nil {
		return 0, &InjectError{Pid: t.pid, Reason: "writing into the process", Err: err}
	}
	r.setCall(fn, sp, args)
	if err := setRegs(t.tid, &r); err != nil {
		return 0, &InjectError{Pid: t.pid, Reason: "setting registers", Err: err}
	}
	sig := 0
	deadline := time.Now().Add(callTimeout)
	for {
		if err := sys.PtraceCont(t.tid, sig); err != nil {
			return 0, &InjectError{Pid: t.pid, Reason: "resuming the call", Err: err}
		}
		sig = 0
		var st sys.TidStop
		for {
			var done bool
			var err error
			st, done, err = sys.WaitTidNohang(t.tid)
			if err != nil {
				return 0, &InjectError{Pid: t.pid, Reason: "waiting for the call", Err: err}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				// Stuck (a lock never released): stop it, put it back.
				sys.PtraceInterrupt(t.tid)
				sys.WaitTid(t.tid)
				return 0, &InjectError{Pid: t.pid, Reason: fmt.Sprintf("the call in thread %d did not return in %v", t.tid, callTimeout)}
			}
			time.Sleep(200 * time.Microsecond)
		}
		if st.Exited {
			return 0, &InjectError{Pid: t.pid, Reason: fmt.Sprintf("thread %d exited during the call", t.tid)}
		}
		if st.Event != 0 {
			continue // a group stop or interrupt: go on
		}
		switch st.Sig {
		case sys.SIGSEGV, sys.SIGBUS, sys.SIGILL, sys.SIGFPE, sys.SIGABRT:
			var now stopped
			now.tid = t.tid
			if err := now.getRegs(); err != nil {
				return 0, &InjectError{Pid: t.pid, Reason: "reading registers", Err: err}
			}
			if st.Sig == sys.SIGSEGV && now.regs.pc() == 0 {
				return now.regs.result(), nil
			}
			return 0, &InjectError{Pid: t.pid, Reason: fmt.Sprintf("the call faulted in thread %d (signal %d at %#x)", t.tid, st.Sig, now.regs.pc())}
		default:
			sig = st.Sig // deliver it
		}
	}
}

// allocatorSyscall says whether system call nr is one an allocator
// makes while it holds its lock (mmap, munmap, mremap, brk, mprotect,
// madvise).
func allocatorSyscall(nr int) bool {
	for _, n := range allocSyscalls {
		if n == nr {
			return true
		}
	}
	return false
}
