// Command rawstack-ebpf records with rawstack's eBPF back end; `rawstack
// record --backend ebpf` runs it with its arguments, which both parse
// with package internal/recordflags:
//
//	rawstack-ebpf record [-o FILE] [-F HZ] [--off-cpu] [--unwind fp|dwarf|auto] [--stack-size N] [--no-kernel] [--no-jit] [--jit-code] [-q] (-a [--duration D] | -p PID [--duration D] | -- CMD ARGS...)
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

	"github.com/rawstack/rawstack/internal/recordflags"
	"github.com/rawstack/rawstack/platform"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // the back end's BPF programs
	"github.com/rawstack/rawstack/tracer"
)

const usage = "usage: rawstack record --backend ebpf [-o FILE] [-F HZ] [--off-cpu] [--unwind fp|dwarf|auto] [--stack-size N] [--no-kernel] [--no-jit] [--jit-code] [-q] (-a | -p PID [--duration D] | -- CMD ARGS...)"

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
	rf := recordflags.Register(fs) // rawstack record's flags, shared
	rf.Backend = "ebpf"            // the only one here; rawstack passes --backend ebpf anyway
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	rest := fs.Args()
	be, mode, err := rf.Check(rest)
	if err != nil {
		return usageError(err.Error())
	}
	if be != platform.BackendEBPF {
		return usageError("rawstack-ebpf records with --backend ebpf only")
	}
	out, hz, quiet := &rf.Out, &rf.Hz, &rf.Quiet
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
	if rf.Duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, rf.Duration)
		defer cancel()
	}
	opts := rf.Options(be, mode)
	opts.Streams = []io.Writer{f}
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
