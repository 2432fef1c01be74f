// Package record is `rawstack record`, once: its flags and their checks
// ([Register], [Flags.Check]), the sinks a recording writes to (a trace
// file, an OTLP endpoint through the rawstack-otlp companion, or both),
// the run (start, signals, progress) and the summary ([Main]).
//
// Two programs call it: rawstack, and rawstack-ebpf, which `rawstack
// record --backend ebpf` runs with the same arguments because the eBPF
// loader links github.com/cilium/ebpf, whose initialisation would slow the
// start of every rawstack command. A flag, a sink or a line of the summary
// added here is one of both. `rawstack agent` ([AgentMain]) is the same run
// with a daemon's defaults and no file sink.
package record

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/tracer"
)

// Usage is record's usage line (after "rawstack record").
const Usage = "[-o FILE] [--otlp-endpoint HOST:PORT [--otlp-raw] [--otlp-interval D] [--otlp-tls] [--otlp-header K=V]...] [-F HZ] [--backend perf|ebpf [--off-cpu]] [--unwind fp|dwarf|auto [--stack-size N] [--keep-raw]] [--no-jit] [--jit-code] [--goroutines] [--alloc [--alloc-rate BYTES]] [--no-python] [--buildid-cache DIR [--buildid-cache-size BYTES] | --no-buildid-cache] [-q] (-a | -p PID [--duration D] | -- CMD ARGS...)"

// Linked reports whether the back end be is linked into the running
// program; [Main] hands a recording whose back end is not to delegate.
type Linked func(be platform.Backend) bool

// Main parses record's arguments and records until the command exits,
// the duration ends or an interrupt arrives, then prints the summary to
// stderr. When the back end the flags name is not linked into this
// program (linked says), Main calls delegate with the same arguments
// instead, which runs the companion that has it. A bad combination of
// flags is a *UsageError.
func Main(args []string, stdout, stderr io.Writer, linked Linked, delegate func(args []string) error) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rf := Register(fs)
	if err := fs.Parse(args); err != nil {
		return &UsageError{err.Error()}
	}
	rest := fs.Args()
	be, mode, err := rf.Check(rest)
	if err != nil {
		return err
	}
	if err := rf.otlp.check(); err != nil {
		return err
	}
	if rf.KeepRaw && rf.otlp.endpoint != "" {
		return &UsageError{"--keep-raw cannot be streamed over OTLP"}
	}
	if !linked(be) {
		if delegate == nil {
			return &UsageError{fmt.Sprintf("--backend %v: this program does not link that back end (rawstack records with it)", be)}
		}
		return delegate(args)
	}
	return rf.run(be, mode, rest, stdout, stderr)
}

// run records with the checked flags: the one record loop of record and
// agent (which is this run with other defaults and no file sink).
func (rf *Flags) run(be platform.Backend, mode platform.UnwindMode, rest []string, stdout, stderr io.Writer) error {
	fs := rf.fs
	s, err := openSinks(rf, fs, stderr)
	if err != nil {
		return err
	}
	defer s.abort()
	if be == platform.BackendEBPF && mode != platform.UnwindFP {
		// Whole-system unwinding builds CFI tables for every module
		// samples pass through; most of that is garbage once built. A soft
		// limit keeps the heap (and RSS) near what is live instead of
		// letting it double before each collection.
		debug.SetMemoryLimit(40 << 20)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := rf.Options(be, mode)
	opts.Streams = s.streams
	opts.MaxStacks = rf.otlp.maxStacks // the agent's; the companion mirrors it
	var cmd *exec.Cmd
	if len(rest) > 0 {
		cmd = exec.Command(rest[0], rest[1:]...)
		if errors.Is(cmd.Err, exec.ErrDot) {
			// Go does not run a command found in the current directory
			// by a bare name (Windows looks there first, and a PATH of
			// "." does): it has to be asked for by a path.
			return &UsageError{fmt.Sprintf("%s is in the current directory, which is not searched for commands: write .%c%s", rest[0], filepath.Separator, rest[0])}
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
		opts.Command = cmd
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	start := time.Now()
	t, err := tracer.Start(ctx, opts)
	var oe *platform.OptionError
	if errors.As(err, &oe) {
		return &UsageError{fmt.Sprintf("%s: %v", flagOf(oe.Option), err)}
	}
	if err != nil {
		return err
	}
	if rf.Duration > 0 {
		// The duration is of sampling, as perf's "-a sleep 5" is: it
		// starts once the sampler runs, not before its start (the BPF
		// verifier alone takes seconds of a slow or emulated CPU).
		stop := time.AfterFunc(rf.Duration, cancel)
		defer stop.Stop()
	}
	// The OTLP companion dying, when it is the only sink, ends the
	// recording: nothing else would notice until the end (the agent would
	// sample for nothing until SIGTERM; a service manager restarts it).
	var sinkGone <-chan struct{}
	if s.otlp != nil && s.file == nil {
		sinkGone = s.otlp.exited
	}
	wait(t, cmd, sigs, sinkGone, cancel, newProgress(stderr, rf.Quiet), start)
	exitErr := t.Wait()
	st := t.Stats()
	if err := s.finish(); err != nil {
		return err
	}
	if s.file != nil {
		event := st.Event
		if be == platform.BackendEBPF {
			event += ", eBPF"
		}
		gos := ""
		if rf.Goroutines {
			// What --goroutines read, and, never silently, what not.
			gos = fmt.Sprintf(", %d with their goroutine", st.GoSamples)
			if st.GoWarning != "" {
				gos += fmt.Sprintf("; goroutines and labels not read, stacks and symbols are: %s", st.GoWarning)
			}
		}
		fmt.Fprintf(stderr, "rawstack record: %s: %d samples%s, %d lost, %d threads, %d modules, %d bytes (%s, %d Hz, %.1fs)\n",
			rf.Out, st.Samples, gos, st.Lost+st.Dropped, st.Threads, st.Modules, s.size, event, rf.Hz, time.Since(start).Seconds())
	}
	if st.BuildIDCache != "" && !rf.agent {
		fmt.Fprintf(stderr, "rawstack record: %s\n", st.BuildIDCache)
	}
	if st.AllocMode != "" {
		why := ""
		if st.AllocFallback != "" {
			why = " (" + st.AllocFallback + ")"
		}
		fmt.Fprintf(stderr, "rawstack record: allocations sampled by %s%s, one per %d bytes on average\n", st.AllocMode, why, allocRate(rf.AllocRate))
	}
	// The agent prints its summary line and nothing else (with
	// --verbose, the minute lines too): the Python processes of a host are
	// no news to a daemon's log.
	quietAgent := rf.agent && rf.otlp.every == 0
	if (st.PythonSamples > 0 || st.PythonCut > 0) && !quietAgent {
		atSample := ""
		if st.PythonAtSample > 0 {
			atSample = fmt.Sprintf(", %d of them read in BPF at the sample", st.PythonAtSample)
		}
		fmt.Fprintf(stderr, "rawstack record: %d samples with Python frames%s (%d Python chains cut short by a check)\n", st.PythonSamples, atSample, st.PythonCut)
	}
	if st.PythonWarning != "" && !quietAgent {
		fmt.Fprintf(stderr, "rawstack record: warning: Python frames not recorded: %s\n", st.PythonWarning)
	}
	if (st.JITSamples > 0 || st.JITCut > 0) && !quietAgent {
		fmt.Fprintf(stderr, "rawstack record: %d samples with JIT frames named from the runtime's own metadata (V8, HotSpot; %d frames left anonymous by a check)\n", st.JITSamples, st.JITCut)
	}
	if st.JITWarning != "" && !quietAgent {
		fmt.Fprintf(stderr, "rawstack record: warning: JIT frames left anonymous: %s\n", st.JITWarning)
	}
	if st.Suspensions > 0 {
		fmt.Fprintf(stderr, "rawstack record: threads suspended %d times for p50 %v, p99 %v, max %v (%v in all); %d idle thread-ticks skipped\n",
			st.Suspensions, st.SuspendP50, st.SuspendP99, st.SuspendMax, st.SuspendTotal, st.IdleSkips)
	}
	if st.TickHz > 0 {
		fmt.Fprintf(stderr, "rawstack record: achieved %.0f samples per CPU-second of %d Hz asked (%.0f rounds/s)\n",
			st.AchievedHz, st.AskedHz, st.TickHz)
	}
	if exitErr != nil {
		var ee *exec.ExitError
		if errors.As(exitErr, &ee) {
			fmt.Fprintf(stderr, "rawstack record: command %s: %v\n", cmd.Path, ee)
			return nil
		}
		return exitErr
	}
	return nil
}

// wait runs until the recording ends: the tracer is done (the command
// exited, the duration ended), or interrupts stopped it.
func wait(t *tracer.Tracer, cmd *exec.Cmd, sigs <-chan os.Signal, sinkGone <-chan struct{}, cancel func(), p *progress, start time.Time) {
	// The progress line's ticker, when there is a line: a daemon's
	// (the agent's) every wakeup costs CPU time.
	var tickC <-chan time.Time
	if !p.off {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		tickC = tick.C
	}
	defer p.clear()
	interrupted := 0
	var killTimer <-chan time.Time
	for {
		select {
		case <-t.Done():
			return
		case <-sinkGone:
			sinkGone = nil
			cancel()
		case <-tickC:
			p.update(t, time.Since(start))
		case <-sigs:
			interrupted++
			if cmd == nil || interrupted > 1 {
				cancel()
				continue
			}
			// The command normally got the signal from the terminal too;
			// give it a moment to exit on its own, then pass it on.
			killTimer = time.After(2 * time.Second)
		case <-killTimer:
			if cmd.Process != nil {
				cmd.Process.Signal(os.Interrupt)
			}
			killTimer = time.After(3 * time.Second)
			interrupted++
			if interrupted > 2 {
				cancel()
			}
		}
	}
}

// sinks are where a recording goes: the trace file (-o, the default
// unless --otlp-endpoint is given alone) and the OTLP stream.
type sinks struct {
	streams []io.Writer
	file    *os.File
	path    string
	size    int64
	otlp    *otlpStream
	done    bool
}

func openSinks(rf *Flags, fs *flag.FlagSet, stderr io.Writer) (*sinks, error) {
	s := &sinks{path: rf.Out}
	if rf.IDCache != "" {
		// The OTLP companion names frames on the host (without
		// --otlp-raw) from the cache the recorder fills.
		if rf.otlp.env == nil {
			rf.otlp.env = map[string]string{}
		}
		rf.otlp.env[idcache.Env] = rf.IDCache
	}
	exp, err := rf.otlp.start(stderr, rf.Hz, rf.summaryLabel())
	if err != nil {
		return nil, err
	}
	if exp != nil {
		s.otlp = exp
		s.streams = append(s.streams, exp)
	}
	// With --otlp-endpoint a file is written only when -o is given; the
	// agent writes none.
	file := exp == nil
	fs.Visit(func(fl *flag.Flag) { file = file || fl.Name == "o" })
	file = file && !rf.agent
	if file {
		f, err := os.Create(rf.Out)
		if err != nil {
			s.abort()
			return nil, err
		}
		s.file = f
		s.streams = append(s.streams, f)
	}
	return s, nil
}

// finish closes the sinks after a recording: the OTLP stream sends its
// last batch and its summary first, then the file is closed.
func (s *sinks) finish() error {
	s.done = true
	if s.otlp != nil {
		if err := s.otlp.finish(); err != nil {
			if s.file != nil {
				s.file.Close()
			}
			return err
		}
	}
	if s.file != nil {
		if err := s.file.Close(); err != nil {
			return err
		}
		if fi, err := os.Stat(s.path); err == nil {
			s.size = fi.Size()
		}
	}
	return nil
}

// abort undoes the sinks of a recording that did not start (or whose
// finish ran): the file is removed, the OTLP child ended.
func (s *sinks) abort() {
	if s.done {
		return
	}
	s.done = true
	if s.otlp != nil {
		s.otlp.finish()
	}
	if s.file != nil {
		s.file.Close()
		os.Remove(s.path)
	}
}

// progress prints a one-line status while recording, rewritten in place on
// a terminal and every ten seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	off   bool
	shown bool
	last  time.Duration
}

func newProgress(w io.Writer, quiet bool) *progress {
	p := &progress{w: w, off: quiet}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(t *tracer.Tracer, d time.Duration) {
	if p.off || d < time.Second {
		return
	}
	if !p.tty && d-p.last < 10*time.Second {
		return
	}
	p.last = d
	st := t.Stats()
	what := "pid " + strconv.Itoa(st.Pid)
	if st.Pid == 0 {
		what = fmt.Sprintf("all processes (%d seen)", st.Processes)
	}
	line := fmt.Sprintf("recording %s: %3.0fs, %d samples, %d lost, %d threads, %d modules",
		what, d.Seconds(), st.Samples, st.Lost+st.Dropped, st.Threads, st.Modules)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.shown = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// allocRate is --alloc-rate, or its default.
func allocRate(r int) int {
	if r <= 0 {
		return platform.DefaultAllocRate
	}
	return r
}
