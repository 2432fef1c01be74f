//go:build windows

package win

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Handle is a Windows handle.
type Handle = windows.Handle

var (
	kernel32 = windows.NewLazySystemDLL("kernel32.dll")
	ntdll    = windows.NewLazySystemDLL("ntdll.dll")

	procSuspendThread       = kernel32.NewProc("SuspendThread")
	procResumeThread        = kernel32.NewProc("ResumeThread")
	procGetThreadContext    = kernel32.NewProc("GetThreadContext")
	procReadProcessMemory   = kernel32.NewProc("ReadProcessMemory")
	procQPC                 = kernel32.NewProc("QueryPerformanceCounter")
	procQPF                 = kernel32.NewProc("QueryPerformanceFrequency")
	procWaitForSingleObject = kernel32.NewProc("WaitForSingleObject")
	procSetEvent            = kernel32.NewProc("SetEvent")
	procCreateThread        = kernel32.NewProc("CreateThread")
	procGetThreadId         = kernel32.NewProc("GetThreadId")
	procGetThreadDesc       = kernel32.NewProc("GetThreadDescription")
	procGetThreadTimes      = kernel32.NewProc("GetThreadTimes")
	procLdrRegister         = ntdll.NewProc("LdrRegisterDllNotification")
	procLdrUnregister       = ntdll.NewProc("LdrUnregisterDllNotification")
)

// Procs are the addresses of the functions the sampler's native thread
// calls, in the order its assembly expects them.
type Procs struct {
	SuspendThread, GetThreadContext, ReadProcessMemory, ResumeThread,
	QueryPerformanceCounter, WaitForSingleObject, SetEvent uintptr
}

// LoadProcs resolves Procs.
func LoadProcs() (Procs, error) {
	var p Procs
	for _, x := range []struct {
		dst  *uintptr
		proc *windows.LazyProc
	}{
		{&p.SuspendThread, procSuspendThread}, {&p.GetThreadContext, procGetThreadContext},
		{&p.ReadProcessMemory, procReadProcessMemory}, {&p.ResumeThread, procResumeThread},
		{&p.QueryPerformanceCounter, procQPC}, {&p.WaitForSingleObject, procWaitForSingleObject},
		{&p.SetEvent, procSetEvent},
	} {
		if err := x.proc.Find(); err != nil {
			return p, err
		}
		*x.dst = x.proc.Addr()
	}
	return p, nil
}

// Thread is one thread of a process.
type Thread struct {
	Tid uint32
	Pid uint32
}

// Threads appends the threads of process pid to ts (Toolhelp32 snapshot).
func Threads(pid uint32, ts []Thread) ([]Thread, error) {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return ts, fmt.Errorf("thread snapshot of pid %d: %w", pid, err)
	}
	defer windows.CloseHandle(snap)
	var e windows.ThreadEntry32
	e.Size = uint32(unsafe.Sizeof(e))
	for err = windows.Thread32First(snap, &e); err == nil; err = windows.Thread32Next(snap, &e) {
		if e.OwnerProcessID == pid {
			ts = append(ts, Thread{Tid: e.ThreadID, Pid: pid})
		}
		e.Size = uint32(unsafe.Sizeof(e))
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return ts, fmt.Errorf("thread snapshot of pid %d: %w", pid, err)
	}
	return ts, nil
}

// Module is one loaded image as Toolhelp32 lists it.
type Module struct {
	Base uint64
	Size uint64
	Path string
}

// Modules lists the images loaded in process pid.
func Modules(pid uint32) ([]Module, error) {
	var snap Handle
	var err error
	// ERROR_BAD_LENGTH: the loader list changed during the snapshot.
	for try := 0; try < 8; try++ {
		snap, err = windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPMODULE, pid)
		if !errors.Is(err, windows.ERROR_BAD_LENGTH) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("module snapshot of pid %d: %w", pid, err)
	}
	defer windows.CloseHandle(snap)
	var ms []Module
	var e windows.ModuleEntry32
	e.Size = uint32(unsafe.Sizeof(e))
	for err = windows.Module32First(snap, &e); err == nil; err = windows.Module32Next(snap, &e) {
		ms = append(ms, Module{Base: uint64(e.ModBaseAddr), Size: uint64(e.ModBaseSize), Path: windows.UTF16ToString(e.ExePath[:])})
		e.Size = uint32(unsafe.Sizeof(e))
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return ms, fmt.Errorf("module snapshot of pid %d: %w", pid, err)
	}
	return ms, nil
}

// Access rights the sampler asks for.
const (
	ThreadSample  = windows.THREAD_SUSPEND_RESUME | windows.THREAD_GET_CONTEXT | windows.THREAD_QUERY_INFORMATION | windows.SYNCHRONIZE
	ProcessSample = windows.PROCESS_VM_READ | windows.PROCESS_QUERY_LIMITED_INFORMATION | windows.SYNCHRONIZE
)

// OpenThread opens thread tid for sampling.
func OpenThread(tid uint32) (Handle, error) {
	h, err := windows.OpenThread(ThreadSample, false, tid)
	if err != nil {
		return 0, fmt.Errorf("open thread %d: %w", tid, err)
	}
	return h, nil
}

// OpenProcess opens process pid for reading its memory.
func OpenProcess(pid uint32) (Handle, error) {
	h, err := windows.OpenProcess(ProcessSample, false, pid)
	if err != nil {
		if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
			return 0, fmt.Errorf("open process %d: %w", pid, err)
		}
		return 0, fmt.Errorf("open process %d: %w", pid, err)
	}
	return h, nil
}

// CurrentProcess is the pseudo handle of the calling process.
func CurrentProcess() Handle { return windows.CurrentProcess() }

// CloseHandle closes h.
func CloseHandle(h Handle) error { return windows.CloseHandle(h) }

// Exited reports whether the thread or process h has ended.
func Exited(h Handle) bool {
	ev, err := windows.WaitForSingleObject(h, 0)
	return err == nil && ev == windows.WAIT_OBJECT_0
}

// Wait waits up to ms milliseconds for h to be signalled and reports
// whether it was.
func Wait(h Handle, ms uint32) bool {
	ev, err := windows.WaitForSingleObject(h, ms)
	return err == nil && ev == windows.WAIT_OBJECT_0
}

// ExitCode returns a process's exit code.
func ExitCode(h Handle) (uint32, error) {
	var c uint32
	err := windows.GetExitCodeProcess(h, &c)
	return c, err
}

// ReadMemory fills p from addr in process h; it fails unless every byte
// was read.
func ReadMemory(h Handle, addr uint64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	var n uintptr
	err := windows.ReadProcessMemory(h, uintptr(addr), &p[0], uintptr(len(p)), &n)
	if err != nil {
		return err
	}
	if int(n) != len(p) {
		return fmt.Errorf("read %d of %d bytes at %#x", n, len(p), addr)
	}
	return nil
}

// QPC reads QueryPerformanceCounter.
func QPC() int64 {
	var t int64
	syscall.SyscallN(procQPC.Addr(), uintptr(unsafe.Pointer(&t)))
	return t
}

// QPCFrequency returns the counter's ticks per second.
func QPCFrequency() int64 {
	var f int64
	syscall.SyscallN(procQPF.Addr(), uintptr(unsafe.Pointer(&f)))
	return f
}

// CurrentThreadID returns the calling thread's id.
func CurrentThreadID() uint32 { return windows.GetCurrentThreadId() }

// CurrentProcessID returns the calling process's id.
func CurrentProcessID() uint32 { return windows.GetCurrentProcessId() }

// NewEvent creates an auto-reset event.
func NewEvent() (Handle, error) { return windows.CreateEvent(nil, 0, 0, nil) }

// SetEvent signals an event.
func SetEvent(h Handle) error { return windows.SetEvent(h) }

// CreateThread starts a native thread at the machine-code address start
// with the argument arg, and returns its handle and id.
func CreateThread(start, arg uintptr) (Handle, uint32, error) {
	var tid uint32
	h, _, err := syscall.SyscallN(procCreateThread.Addr(), 0, 256<<10, start, arg, 0, uintptr(unsafe.Pointer(&tid)))
	if h == 0 {
		return 0, 0, fmt.Errorf("CreateThread: %w", err)
	}
	return Handle(h), tid, nil
}

// VirtualAlloc commits size bytes of read-write memory outside the Go heap.
func VirtualAlloc(size uintptr) (uintptr, error) {
	return windows.VirtualAlloc(0, size, windows.MEM_COMMIT|windows.MEM_RESERVE, windows.PAGE_READWRITE)
}

// VirtualFree releases memory VirtualAlloc returned.
func VirtualFree(addr uintptr) error { return windows.VirtualFree(addr, 0, windows.MEM_RELEASE) }

// ThreadCPUTime returns the CPU time thread h has used, kernel and user
// mode together, in ns (GetThreadTimes; 100 ns units, advancing by the
// accounting quantum: the clock interrupt on Windows, the Linux clock
// tick under Wine, which reads /proc/PID/task/TID/stat). ok is false when
// the thread cannot be queried (it has ended). It does not allocate.
func ThreadCPUTime(h Handle) (ns int64, ok bool) {
	var t [4]windows.Filetime // creation, exit, kernel, user
	r, _, _ := syscall.SyscallN(procGetThreadTimes.Addr(), uintptr(h), uintptr(unsafe.Pointer(&t[0])),
		uintptr(unsafe.Pointer(&t[1])), uintptr(unsafe.Pointer(&t[2])), uintptr(unsafe.Pointer(&t[3])))
	if r == 0 {
		return 0, false
	}
	k := int64(t[2].HighDateTime)<<32 | int64(t[2].LowDateTime)
	u := int64(t[3].HighDateTime)<<32 | int64(t[3].LowDateTime)
	return (k + u) * 100, true
}

// HasThreadNames reports whether the OS has GetThreadDescription
// (Windows 10 1607 and later; Wine 8 has it). The answer is cached.
func HasThreadNames() bool { return hasThreadNames() }

var hasThreadNames = sync.OnceValue(func() bool { return procGetThreadDesc.Find() == nil })

// ThreadName returns a thread's description (Windows 10 1607+), or "".
func ThreadName(h Handle) string {
	if !HasThreadNames() {
		return ""
	}
	var p *uint16
	r, _, _ := syscall.SyscallN(procGetThreadDesc.Addr(), uintptr(h), uintptr(unsafe.Pointer(&p)))
	if int32(r) < 0 || p == nil {
		return ""
	}
	defer windows.LocalFree(Handle(unsafe.Pointer(p)))
	return windows.UTF16PtrToString(p)
}

// DLL notification reasons.
const (
	DLLLoaded   = 1
	DLLUnloaded = 2
)

// ldrNotification is LDR_DLL_NOTIFICATION_DATA (loaded and unloaded share
// the layout).
type ldrNotification struct {
	Flags       uint32
	FullDllName *windows.NTUnicodeString
	BaseDllName *windows.NTUnicodeString
	DllBase     uintptr
	SizeOfImage uint32
}

// DLLEvent is one load or unload the loader reported.
type DLLEvent struct {
	Reason uint32
	Base   uint64
	Size   uint64
	Path   string
}

var dllCallback uintptr

// RegisterDLLNotification asks the loader to call fn for every DLL loaded
// or unloaded in this process from now on, on the loading thread while it
// holds the loader lock (fn must be quick and must not load libraries). It
// returns a cookie for UnregisterDLLNotification.
func RegisterDLLNotification(fn func(DLLEvent)) (uintptr, error) {
	if err := procLdrRegister.Find(); err != nil {
		return 0, err
	}
	if dllCallback == 0 {
		dllCallback = syscall.NewCallback(func(reason uintptr, data *ldrNotification, ctx uintptr) uintptr {
			e := DLLEvent{Reason: uint32(reason), Base: uint64(data.DllBase), Size: uint64(data.SizeOfImage)}
			if data.FullDllName != nil {
				e.Path = data.FullDllName.String()
			}
			dllHandler(e)
			return 0
		})
	}
	dllHandler = fn
	var cookie uintptr
	r, _, _ := syscall.SyscallN(procLdrRegister.Addr(), 0, dllCallback, 0, uintptr(unsafe.Pointer(&cookie)))
	if r != 0 {
		return 0, fmt.Errorf("LdrRegisterDllNotification: ntstatus %#x", uint32(r))
	}
	return cookie, nil
}

var dllHandler func(DLLEvent)

// UnregisterDLLNotification undoes RegisterDLLNotification.
func UnregisterDLLNotification(cookie uintptr) {
	syscall.SyscallN(procLdrUnregister.Addr(), cookie)
}

// ResumeThreadID resumes thread tid once (a process created suspended).
func ResumeThreadID(tid uint32) error {
	h, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, tid)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(h)
	_, err = windows.ResumeThread(h)
	return err
}

// CreateSuspended is the process creation flag that starts a process with
// its first thread suspended.
const CreateSuspended = windows.CREATE_SUSPENDED

// Ptr turns the address of memory outside the Go heap (VirtualAlloc's, or
// another module's) into a pointer.
func Ptr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// SuspendThread suspends thread h.
func SuspendThread(h Handle) error {
	r, _, err := syscall.SyscallN(procSuspendThread.Addr(), uintptr(h))
	if uint32(r) == 0xFFFFFFFF {
		return fmt.Errorf("SuspendThread: %w", err)
	}
	return nil
}

// ResumeThread resumes thread h once.
func ResumeThread(h Handle) error {
	_, err := windows.ResumeThread(h)
	return err
}

// GetThreadContext fills ctx (an x64 CONTEXT of 1232 bytes or more, whose
// ContextFlags the caller set) for the suspended thread h. ctx need not be
// aligned: it is copied through an aligned buffer.
func GetThreadContext(h Handle, ctx []byte) error {
	var buf [0x4d0 + 16]byte
	off := (16 - uintptr(unsafe.Pointer(&buf[0]))%16) % 16
	a := buf[off : off+0x4d0]
	copy(a, ctx)
	r, _, err := syscall.SyscallN(procGetThreadContext.Addr(), uintptr(h), uintptr(unsafe.Pointer(&a[0])))
	if r == 0 {
		return fmt.Errorf("GetThreadContext: %w", err)
	}
	copy(ctx, a)
	return nil
}

var procNtQueryInformationThread = ntdll.NewProc("NtQueryInformationThread")

// ThreadTEB returns the address of thread h's TEB (its NT_TIB: the stack
// base at +8, the stack limit at +16).
func ThreadTEB(h Handle) (uint64, error) {
	// THREAD_BASIC_INFORMATION: ExitStatus, TebBaseAddress, ClientId,
	// AffinityMask, Priority, BasePriority.
	var tbi [48]byte
	var n uint32
	r, _, _ := syscall.SyscallN(procNtQueryInformationThread.Addr(), uintptr(h), 0, uintptr(unsafe.Pointer(&tbi[0])), uintptr(len(tbi)), uintptr(unsafe.Pointer(&n)))
	if r != 0 {
		return 0, fmt.Errorf("NtQueryInformationThread: ntstatus %#x", uint32(r))
	}
	return *(*uint64)(unsafe.Pointer(&tbi[8])), nil
}
