package record

import (
	"flag"
	"fmt"
	"time"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/tracer"
)

// Flags are record's flags, as registered by [Register].
type Flags struct {
	Out        string
	Hz         int
	Pid        int
	Duration   time.Duration
	NoKernel   bool
	Quiet      bool
	Unwind     string
	StackSize  int
	NoJIT      bool
	NoPython   bool
	JITCode    bool
	KeepRaw    bool
	Backend    string
	System     bool
	OffCPU     bool
	Goroutines bool
	Alloc      bool
	AllocRate  int
	IDCache    string
	IDCacheMax int64
	NoIDCache  bool

	otlp otlpFlags
	fs   *flag.FlagSet
	// agent: the run is `rawstack agent` (no file sink, its summary label)
	agent bool
}

// summaryLabel prefixes the lines the run prints.
func (f *Flags) summaryLabel() string {
	if f.agent {
		return "rawstack agent"
	}
	return "rawstack record"
}

// Register defines record's flags on fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.Out, "o", "trace.rawstack", "output file")
	fs.IntVar(&f.Hz, "F", 999, "sampling frequency per thread (per CPU with -a), Hz")
	fs.IntVar(&f.Pid, "p", 0, "attach to this running process")
	fs.DurationVar(&f.Duration, "duration", 0, "with -p or -a: stop after sampling this long, counted from when the sampler runs (default: until the process exits or Ctrl-C)")
	fs.BoolVar(&f.NoKernel, "no-kernel", false, "leave out kernel frames")
	fs.BoolVar(&f.Quiet, "q", false, "no progress line")
	fs.StringVar(&f.Unwind, "unwind", "auto", "user stacks: fp (frame pointers), dwarf (registers + stack copy, unwound with CFI) or auto (a frame-pointer program: fp with the leaf repaired from CFI; any other: dwarf); with --backend ebpf the default is dwarf")
	fs.IntVar(&f.StackSize, "stack-size", 0, "with --unwind dwarf/auto: bytes of user stack copied per sample (default 8192; auto on a frame-pointer program 512; at most 16384 with --backend ebpf)")
	fs.BoolVar(&f.NoJIT, "no-jit", false, "do not copy JIT runtimes' perf maps and jitdump files (node --perf-basic-prof/--perf-prof, java -XX:+DumpPerfMapAtExit) into the trace")
	fs.BoolVar(&f.JITCode, "jit-code", false, "also copy the machine code of each jitdump code load")
	fs.BoolVar(&f.KeepRaw, "keep-raw", false, "with --unwind dwarf/auto: write registers and stack copies (RawStack) and unwind offline in report")
	fs.StringVar(&f.Backend, "backend", "perf", "sampling mechanism: perf (perf_event ring buffers) or ebpf (BPF programs; whole system, off-CPU)")
	fs.BoolVar(&f.System, "a", false, "with --backend ebpf: sample every process of the host (until --duration or Ctrl-C)")
	fs.BoolVar(&f.OffCPU, "off-cpu", false, "with --backend ebpf (Linux) or on Windows: also record where threads wait, weighted by the time off CPU")
	fs.BoolVar(&f.NoPython, "no-python", false, "do not read CPython threads' Python frames (by default each sample of a CPython 3.8–3.13 thread carries them, read from the interpreter's memory, and reports show them at _PyEval_EvalFrameDefault)")
	fs.BoolVar(&f.Goroutines, "goroutines", false, "Go programs: record each sample's goroutine id and pprof labels (convert --to pprof makes them labels for -tagfocus)")
	fs.BoolVar(&f.Alloc, "alloc", false, "record native heap allocations (a command: a sampler preloaded into it; -p: the sampler injected, uprobes on its malloc/free where it cannot be; -a: uprobes; selects --backend ebpf unless --backend perf, which has no uprobes): convert --value alloc_space|alloc_objects|inuse_space|inuse_objects")
	fs.IntVar(&f.AllocRate, "alloc-rate", 0, "with --alloc: sample one allocation per this many bytes allocated, on average (default 524288)")
	fs.StringVar(&f.IDCache, "buildid-cache", "", "the build-id cache the files of other mount namespaces' modules (containers) are copied into while they live, for every command to name them later (default $RAWSTACK_BUILDID_CACHE, else ~/.cache/rawstack/buildid)")
	fs.Int64Var(&f.IDCacheMax, "buildid-cache-size", 0, "cap of the build-id cache in bytes, least recently used files removed first (default 2 GiB)")
	fs.BoolVar(&f.NoIDCache, "no-buildid-cache", false, "copy no module files into the build-id cache")
	f.otlp.register(fs)
	return f
}

// UsageError is a bad combination of flags; the command prints its usage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Check validates the flags after fs.Parse, given the arguments left
// (the command to run), and returns the back end and unwind mode they
// name. An error is a *UsageError.
func (f *Flags) Check(rest []string) (platform.Backend, platform.UnwindMode, error) {
	usage := func(format string, args ...any) (platform.Backend, platform.UnwindMode, error) {
		return 0, 0, &UsageError{fmt.Sprintf(format, args...)}
	}
	be, err := platform.ParseBackend(f.Backend)
	if err != nil {
		return usage("%v", err)
	}
	unwindSet, backendSet := false, false
	f.fs.Visit(func(fl *flag.Flag) {
		unwindSet = unwindSet || fl.Name == "unwind"
		backendSet = backendSet || fl.Name == "backend"
	})
	if f.Alloc && !backendSet {
		be = platform.BackendEBPF // uprobes serve where the sampler cannot be injected, and for -a
	}
	if be == platform.BackendEBPF && !unwindSet {
		f.Unwind = "dwarf" // the eBPF back end copies stacks: unwind with CFI unless asked otherwise
	}
	switch {
	case f.System && (f.Pid != 0 || len(rest) > 0):
		return usage("-a samples every process: give no -p and no command")
	case f.Pid != 0 && len(rest) > 0:
		return usage("give -p PID or a command, not both")
	case f.Pid == 0 && len(rest) == 0 && !f.System:
		return usage("nothing to record: give -p PID or -- CMD ARGS... (or -a with --backend ebpf)")
	case f.Pid < 0:
		return usage("bad pid %d", f.Pid)
	case f.Duration != 0 && f.Pid == 0 && !f.System:
		return usage("--duration works with -p or -a")
	case f.Hz <= 0:
		return usage("-F must be positive")
	case f.StackSize < 0 || f.StackSize > 65000:
		return usage("--stack-size must be in 1..65000")
	case f.AllocRate < 0 || f.AllocRate > 0 && !f.Alloc:
		return usage("--alloc-rate takes a positive number of bytes, with --alloc")
	}
	mode, err := platform.ParseUnwindMode(f.Unwind)
	if err != nil {
		return usage("%v", err)
	}
	if f.KeepRaw && mode == platform.UnwindFP {
		return usage("--keep-raw needs --unwind dwarf or auto")
	}
	// What a back end cannot do (-a or --off-cpu with perf, --keep-raw
	// with ebpf, any option on another OS) it says itself when it starts:
	// Main turns its *platform.OptionError into a usage error naming the flag.
	return be, mode, nil
}

// flagOf names the flag that sets each platform.Config field, for
// errors a back end returns about an option. A switch, not a map: a map
// literal is built at the start of every command.
func flagOf(field string) string {
	switch field {
	case "Pid":
		return "-p"
	case "Frequency":
		return "-F"
	case "NoKernel":
		return "--no-kernel"
	case "Unwind":
		return "--unwind"
	case "StackSize":
		return "--stack-size"
	case "KeepRaw":
		return "--keep-raw"
	case "Backend":
		return "--backend"
	case "System":
		return "-a"
	case "OffCPU":
		return "--off-cpu"
	case "NoJIT":
		return "--no-jit"
	case "JITCodeBytes":
		return "--jit-code"
	case "Goroutines":
		return "--goroutines"
	case "Alloc":
		return "--alloc"
	case "AllocRate":
		return "--alloc-rate"
	case "NoPython":
		return "--no-python"
	case "BuildIDCache":
		return "--buildid-cache"
	case "BuildIDCacheMax":
		return "--buildid-cache-size"
	case "NoBuildIDCache":
		return "--no-buildid-cache"
	}
	return ""
}

// Options returns the tracer options the flags give (without streams or
// a command).
func (f *Flags) Options(be platform.Backend, mode platform.UnwindMode) tracer.Options {
	o := tracer.Options{Frequency: f.Hz, Pid: f.Pid, NoKernel: f.NoKernel,
		Unwind: mode, StackSize: f.StackSize, KeepRaw: f.KeepRaw, NoJIT: f.NoJIT, JITCodeBytes: f.JITCode,
		Backend: be, System: f.System, OffCPU: f.OffCPU, Goroutines: f.Goroutines,
		Alloc: f.Alloc, AllocRate: f.AllocRate, NoPython: f.NoPython,
		BuildIDCache: f.IDCache, BuildIDCacheMax: f.IDCacheMax, NoBuildIDCache: f.NoIDCache}
	if f.agent {
		o.FlushInterval = agentFlush
		if iv := f.otlp.interval; iv > 0 && iv < agentFlush {
			o.FlushInterval = iv
		}
	}
	return o
}
