package main

import (
	"errors"
	"io"

	"github.com/rawstack/rawstack/cmd/internal/record"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

func init() {
	register(&command{
		name:  "record",
		usage: record.Usage,
		short: "sample a command or a running process and write a raw trace",
		run:   runRecord,
	})
}

// runRecord is record (package cmd/internal/record); the eBPF back end,
// which rawstack does not link, is recorded by the rawstack-ebpf
// companion with the same arguments.
func runRecord(args []string, stdout, stderr io.Writer) error {
	linked := func(be platform.Backend) bool { return be != platform.BackendEBPF || linux.BPFLinked() }
	err := record.Main(args, stdout, stderr, linked, func(args []string) error {
		return runEBPFRecord(args, stdout, stderr)
	})
	var ue *record.UsageError
	if errors.As(err, &ue) {
		return &usageError{ue.Msg}
	}
	return err
}
