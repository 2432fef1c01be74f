package tracer_test

import (
	"context"
	"io"
	"log"
	"os"
	"os/exec"

	"github.com/rawstack/rawstack/tracer"
)

// Profile the calling process into a file.
func ExampleStart() {
	f, err := os.Create("self.rawstack")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: 499, Streams: []io.Writer{f}})
	if err != nil {
		log.Fatal(err) // errors.Is(err, platform.ErrNotSupported) where perf_event_open is unavailable
	}
	defer t.Stop()
	// ... the work to profile ...
	t.Capture("checkpoint")
}

// Record a command from its first instruction until it exits.
func ExampleStart_command() {
	f, err := os.Create("cmd.rawstack")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	t, err := tracer.Start(context.Background(), tracer.Options{
		Frequency: 999,
		Command:   exec.Command("make", "-j2"),
		Streams:   []io.Writer{f},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := t.Wait(); err != nil {
		log.Print(err) // the command's exit status
	}
}

// Join a live trace: the new stream starts with a snapshot of the current
// state, so it is readable on its own.
func ExampleTracer_AddStream() {
	t, err := tracer.Start(context.Background(), tracer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Stop()
	late, err := os.Create("late.rawstack")
	if err != nil {
		log.Fatal(err)
	}
	defer late.Close()
	if err := t.AddStream(late); err != nil {
		log.Fatal(err)
	}
}
