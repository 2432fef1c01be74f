// Command rawstack-ebpf records with rawstack's eBPF back end; `rawstack
// record --backend ebpf` runs it with its arguments, which both hand to
// package cmd/internal/record:
//
//	rawstack-ebpf record [record's flags]
//
// It is a command of its own because the back end's loader links
// github.com/cilium/ebpf, whose package initialisation would otherwise run
// at the start of every rawstack command.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/rawstack/rawstack/cmd/internal/record"
	"github.com/rawstack/rawstack/platform"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // the back end's BPF programs
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "record" {
		fmt.Fprintln(os.Stderr, "usage: rawstack-ebpf record --backend ebpf "+record.Usage)
		os.Exit(2)
	}
	ebpfOnly := func(be platform.Backend) bool { return be == platform.BackendEBPF }
	if err := record.Main(os.Args[2:], os.Stdout, os.Stderr, ebpfOnly, nil); err != nil {
		fmt.Fprintf(os.Stderr, "rawstack record: %v\n", err)
		if errors.As(err, new(*record.UsageError)) {
			fmt.Fprintln(os.Stderr, "usage: rawstack record "+record.Usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}
