// Package arch describes instruction-set architectures as data and unwinds
// stacks. It compiles on every host and calls no OS: a Linux machine can
// unwind a Windows minidump or an arm64 core file.
//
// # Registers
//
// [Regs] holds one thread's integer registers indexed by DWARF register
// number (amd64: rax=0 … rbp=6, rsp=7, r8-r15, rip=16; arm64: x0-x30,
// sp=31, pc=32), the numbering of .eh_frame and of the event format's
// RawStack. [Regs.SetPerf] converts a perf_event REGS_USER block sampled
// with [PerfRegsMask] (perf_regs.h numbering), [Regs.SetUserRegs] a ptrace
// or core-file register block, [Regs.SetMasked] a RawStack event.
//
// # Unwind tables
//
// [OpenTable] / [NewTableELF] / [NewTable] execute a module's .eh_frame
// and .debug_frame call frame instructions once into a [Table]: sorted row
// addresses, each with a small [Rule] (how to find the CFA, the return
// address, the frame pointer and the callee-saved registers). A lookup is
// one binary search. [NewLazyTableELF] returns a table that instead
// parses each FDE the first time an address in it is looked up, found
// through .eh_frame_hdr's search table (or one scan of the FDE headers),
// for a recorder that meets hundreds of modules and runs a few functions
// of each; its lookups equal the full table's.
//
// # Unwinding
//
// [Modules] maps address ranges to tables with their load bias
// ([LoadBias] computes it from a /proc/PID/maps line). An [Unwinder] walks
// a stack through any [Memory] — a live process, a [StackCopy] from a perf
// sample or a RawStack event, a core file — using CFI where a row covers
// the PC and frame pointers where none does, and keeps a small cache of hot
// rules so that, once warm, [Unwinder.Unwind] does not allocate:
//
//	tab, err := arch.OpenTable("/usr/lib/x86_64-linux-gnu/libc.so.6")
//	// ... for each mapping: bias, _ := arch.LoadBias(elfFile, start, offset)
//	mods := &arch.Modules{}
//	mods.Add(arch.Module{Start: start, End: end, Bias: bias, Table: tab})
//	u := arch.NewUnwinder(mods)
//	var regs arch.Regs
//	regs.SetPerf(arch.AMD64, arch.PerfRegsAMD64, sample.UserRegs)
//	pcs = u.Unwind(&regs, &arch.StackCopy{Addr: regs.SP(), Data: sample.StackUser}, pcs[:0])
//
// The walk handles the x86-64 PLT expression, stack-realigning functions
// (CFA = *(rbp-8)), signal trampolines (glibc's __restore_rt: registers in
// the sigcontext, the interrupted pc looked up as is), aarch64 pointer
// authentication (signed return addresses are stripped) and PLT stubs
// that have no CFI (NewTableELF adds rules for them).
//
// # Go
//
// A table of a Go binary (NewTableELF, NewLazyTableELF) also reads the
// binary's pclntab, which release builds (-ldflags=-s -w) keep: it gives
// Go's rows the frame pointer Go's .debug_frame leaves out, marks the
// runtime's stack switches that keep a frame pointer (systemstack,
// asmcgocall, cgocallback, the vDSO callers: [Rule.Switch]) and those that
// keep none (morestack, gogo: [Rule.SwitchStop]), and knows Go's signal
// restorer. The walk steps a switch by its frame pointer, which points at
// its frame on the goroutine's stack while it runs on the thread's g0
// stack, as the runtime's own traceback crosses systemstack; through a
// live process or a core file that is all it needs. A stack copy taken
// on g0 (a perf or BPF sample) does not hold the goroutine's stack: there
// [Unwinder.Chain], the kernel's frame-pointer walk of the same sample,
// continues the walk from the switch's frame record ([StopChain]).
//
// u.Stop then says why the walk ended: [StopOutermost] when the unwind
// info marks the outermost frame, [StopBadMemory] when it ran off the
// stack copy, [StopNoProgress] on a loop, and so on.
package arch
