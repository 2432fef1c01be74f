package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/rawstack/rawstack/cmd/internal/companion"
	"github.com/rawstack/rawstack/platform"
)

// ebpfHelper records with the eBPF back end. Its loader links
// github.com/cilium/ebpf, whose package initialisation would slow the
// start of every rawstack command, so `rawstack record --backend ebpf`
// runs it instead: looked for next to rawstack, then on PATH.
const ebpfHelper = "rawstack-ebpf"

// runEBPF runs rawstack-ebpf sub (record or agent) with the command's
// arguments; its output and exit status become the command's. The agent
// execs it in this process's place: a daemon is one process (its pid
// the one a service manager or a user signals), and rawstack-ebpf
// streams OTLP itself.
func runEBPF(sub string, args []string, stdout, stderr io.Writer) error {
	path, err := companion.Find(ebpfHelper, "--backend ebpf")
	if err != nil {
		return err
	}
	if sub == "agent" && stdout == os.Stdout && stderr == os.Stderr {
		err := execInPlace(path, append([]string{path, sub}, args...))
		if !errors.Is(err, platform.ErrNotSupported) {
			return err
		}
	}
	cmd := exec.Command(path, append([]string{sub}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Interrupts stop the recording, which the helper does: pass them on
	// instead of dying and leaving it to record alone.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-sigs:
				cmd.Process.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		os.Exit(ee.ExitCode()) // it has said why
	}
	return err
}
