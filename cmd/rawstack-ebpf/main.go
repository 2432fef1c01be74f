// Command rawstack-ebpf records with rawstack's eBPF back end; `rawstack
// record --backend ebpf` runs it with its arguments:
//
//	rawstack-ebpf record [-o FILE] [-F HZ] [--off-cpu] [--unwind fp|dwarf|auto] [--stack-size N] [--no-kernel] [-q] (-a [--duration D] | -p PID [--duration D] | -- CMD ARGS...)
//
// It is a command of its own because the back end's loader links
// github.com/cilium/ebpf, whose package initialisation would otherwise run
// at the start of every rawstack command.
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
	"syscall"
	"time"

	"github.com/rawstack/rawstack/platform"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // the back end's BPF programs
	"github.com/rawstack/rawstack/tracer"
)

const usage = "usage: rawstack record --backend ebpf [-o FILE] [-F HZ] [--off-cpu] [--unwind fp|dwarf|auto] [--stack-size N] [--no-kernel] [-q] (-a | -p PID [--duration D] | -- CMD ARGS...)"

type usageError string

func (e usageError) Error() string { return string(e) }

func main() {
	if len(os.Args) < 2 || os.Args[1] != "record" {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := record(os.Args[2:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "rawstack record: %v\n", err)
		if _, ok := err.(usageError); ok {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func record(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("o", "trace.rawstack", "output file")
	hz := fs.Int("F", 999, "sampling frequency per CPU, Hz")
	pid := fs.Int("p", 0, "sample this running process (and its children)")
	dur := fs.Duration("duration", 0, "with -p or -a: stop after this long")
	noKernel := fs.Bool("no-kernel", false, "leave out kernel frames")
	quiet := fs.Bool("q", false, "no progress line")
	unwind := fs.String("unwind", "dwarf", "user stacks: dwarf (registers + stack window, unwound with CFI), fp (frame pointers) or auto")
	stackSize := fs.Int("stack-size", 0, "bytes of user stack copied per sample (default 8192, at most 16384)")
	backend := fs.String("backend", "ebpf", "must be ebpf")
	system := fs.Bool("a", false, "sample every process of the host")
	offCPU := fs.Bool("off-cpu", false, "also record where threads wait, weighted by the time off CPU")
	fs.Bool("no-jit", false, "accepted for rawstack record's flags")
	fs.Bool("jit-code", false, "accepted for rawstack record's flags")
	keepRaw := fs.Bool("keep-raw", false, "not supported by the eBPF back end")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	rest := fs.Args()
	mode, err := platform.ParseUnwindMode(*unwind)
	switch {
	case err != nil:
		return usageError(err.Error())
	case *backend != "ebpf":
		return usageError("rawstack-ebpf records with --backend ebpf only")
	case *keepRaw:
		return usageError("--keep-raw is not supported with --backend ebpf (it unwinds on the host)")
	case *system && (*pid != 0 || len(rest) > 0):
		return usageError("-a samples every process: give no -p and no command")
	case *pid != 0 && len(rest) > 0:
		return usageError("give -p PID or a command, not both")
	case *pid == 0 && len(rest) == 0 && !*system:
		return usageError("nothing to record: give -a, -p PID or -- CMD ARGS...")
	case *pid < 0 || *hz <= 0 || *stackSize < 0 || *stackSize > 16384:
		return usageError("bad -p, -F or --stack-size")
	case *dur != 0 && *pid == 0 && !*system:
		return usageError("--duration works with -p or -a")
	}
	if mode != platform.UnwindFP {
		// Whole-system unwinding builds CFI tables for every module
		// samples pass through, most of it garbage once built: keep the
		// heap near what is live.
		debug.SetMemoryLimit(40 << 20)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if *dur > 0 {
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	opts := tracer.Options{Frequency: *hz, Pid: *pid, Streams: []io.Writer{f}, NoKernel: *noKernel,
		Unwind: mode, StackSize: *stackSize, Backend: tracer.BackendEBPF, System: *system, OffCPU: *offCPU}
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
		os.Remove(*out)
		return err
	}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-t.Done():
			break loop
		case <-tick.C:
			if !*quiet {
				st := t.Stats()
				fmt.Fprintf(stderr, "recording: %3.0fs, %d samples, %d lost, %d processes\n", time.Since(start).Seconds(), st.Samples, st.Lost+st.Dropped, st.Processes)
			}
		case <-sigs:
			if cmd == nil {
				cancel() // the command gets the terminal's signal itself
			}
		}
	}
	exitErr := t.Wait()
	if err := f.Close(); err != nil {
		return err
	}
	st := t.Stats()
	var size int64
	if fi, err := os.Stat(*out); err == nil {
		size = fi.Size()
	}
	fmt.Fprintf(stderr, "rawstack record: %s: %d samples, %d lost, %d threads, %d modules, %d bytes (%s, eBPF, %d Hz, %.1fs)\n",
		*out, st.Samples, st.Lost+st.Dropped, st.Threads, st.Modules, size, st.Event, *hz, time.Since(start).Seconds())
	var ee *exec.ExitError
	if errors.As(exitErr, &ee) {
		fmt.Fprintf(stderr, "rawstack record: command %s: %v\n", cmd.Path, ee)
		return nil
	}
	return exitErr
}
