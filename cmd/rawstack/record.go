package main

import (
	"errors"
	"io"

	"github.com/rawstack/rawstack/cmd/internal/record"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

var recordCmd = command{
	name:  "record",
	usage: record.Usage,
	short: "sample a command or a running process and write a raw trace",
	run:   runRecord,
}

var agentCmd = command{
	name:  "agent",
	usage: record.AgentUsage,
	short: "profile the whole host continuously into an OpenTelemetry Collector (eBPF)",
	run:   runAgent,
}

// runRecord is record (package cmd/internal/record); the eBPF back end,
// which rawstack does not link, is recorded by the rawstack-ebpf
// companion with the same arguments.
func runRecord(args []string, stdout, stderr io.Writer) error {
	return recordRun(record.Main, "record", args, stdout, stderr)
}

// runAgent is record's run with the agent's defaults (package
// cmd/internal/record), which the rawstack-ebpf companion runs.
func runAgent(args []string, stdout, stderr io.Writer) error {
	return recordRun(record.AgentMain, "agent", args, stdout, stderr)
}

func recordRun(main func([]string, io.Writer, io.Writer, record.Linked, func([]string) error) error, sub string, args []string, stdout, stderr io.Writer) error {
	linked := func(be platform.Backend) bool { return be != platform.BackendEBPF || linux.BPFLinked() }
	err := main(args, stdout, stderr, linked, func(args []string) error {
		return runEBPF(sub, args, stdout, stderr)
	})
	var ue *record.UsageError
	if errors.As(err, &ue) {
		return &usageError{ue.Msg}
	}
	return err
}
