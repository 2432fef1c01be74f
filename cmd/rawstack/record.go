package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/internal/recordflags"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/tracer"
)

func init() {
	register(&command{
		name:  "record",
		usage: "[-o FILE] [--otlp-endpoint HOST:PORT [--otlp-raw] [--otlp-interval D] [--otlp-tls] [--otlp-header K=V]...] [-F HZ] [--backend perf|ebpf [--off-cpu]] [--unwind fp|dwarf|auto [--stack-size N] [--keep-raw]] [--no-jit] [--jit-code] [--goroutines] (-a | -p PID [--duration D] | -- CMD ARGS...)",
		short: "sample a command or a running process and write a raw trace",
		run:   runRecord,
	})
}

func runRecord(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rf := recordflags.Register(fs) // shared with rawstack-ebpf
	var of otlpFlags
	of.register(fs)
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	rest := fs.Args()
	be, mode, err := rf.Check(rest)
	if err != nil {
		return &usageError{err.Error()}
	}
	if be == platform.BackendEBPF && !linux.BPFLinked() {
		if of.endpoint != "" {
			return &usageError{"--otlp-endpoint is not supported with --backend ebpf yet"}
		}
		return runEBPFRecord(args, stdout, stderr)
	}
	out, hz, quiet := &rf.Out, &rf.Hz, &rf.Quiet
	dur, keepRaw := &rf.Duration, &rf.KeepRaw

	if *keepRaw && of.endpoint != "" {
		return &usageError{"--keep-raw cannot be streamed over OTLP"}
	}
	exp, err := of.start(stderr, *hz)
	if err != nil {
		return err
	}
	var streams []io.Writer
	if exp != nil {
		streams = append(streams, exp)
	}
	// With --otlp-endpoint a file is written only when -o is given.
	file := exp == nil
	fs.Visit(func(fl *flag.Flag) { file = file || fl.Name == "o" })
	var f *os.File
	if file {
		if f, err = os.Create(*out); err != nil {
			if exp != nil {
				exp.finish()
			}
			return err
		}
		defer f.Close()
		streams = append(streams, f)
	}
	if be == platform.BackendEBPF && mode != platform.UnwindFP {
		// Whole-system unwinding builds CFI tables for every module
		// samples pass through; most of that is garbage once built. A soft
		// limit keeps the heap (and RSS) near what is live instead of
		// letting it double before each collection.
		debug.SetMemoryLimit(40 << 20)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if *dur > 0 {
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	opts := rf.Options(be, mode)
	opts.Streams = streams
	var cmd *exec.Cmd
	if len(rest) > 0 {
		cmd = exec.Command(rest[0], rest[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
		opts.Command = cmd
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	start := time.Now()
	t, err := tracer.Start(ctx, opts)
	if err != nil {
		if f != nil {
			os.Remove(*out)
		}
		if exp != nil {
			exp.finish()
		}
		return err
	}
	progress := newProgress(stderr, *quiet)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	interrupted := 0
	var killTimer <-chan time.Time
loop:
	for {
		select {
		case <-t.Done():
			break loop
		case <-tick.C:
			progress.update(t, time.Since(start))
		case sig := <-sigs:
			interrupted++
			if cmd == nil || interrupted > 1 {
				cancel()
				continue
			}
			// The command normally got the signal from the terminal too;
			// give it a moment to exit on its own, then pass it on.
			killTimer = time.After(2 * time.Second)
			_ = sig
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
	progress.clear()
	exitErr := t.Wait()
	st := t.Stats()
	event := st.Event
	if be == platform.BackendEBPF {
		event += ", eBPF"
	}
	if exp != nil {
		// Before the file's summary: the last batch goes out and
		// rawstack-otlp prints what it sent and lost.
		if err := exp.finish(); err != nil {
			return err
		}
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
		var size int64
		if fi, err := os.Stat(*out); err == nil {
			size = fi.Size()
		}
		fmt.Fprintf(stderr, "rawstack record: %s: %d samples, %d lost, %d threads, %d modules, %d bytes (%s, %d Hz, %.1fs)\n",
			*out, st.Samples, st.Lost+st.Dropped, st.Threads, st.Modules, size, event, *hz, time.Since(start).Seconds())
	}
	if st.Suspensions > 0 {
		fmt.Fprintf(stderr, "rawstack record: threads suspended %d times for p50 %v, p99 %v, max %v\n",
			st.Suspensions, st.SuspendP50, st.SuspendP99, st.SuspendMax)
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
		what = "all processes"
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
