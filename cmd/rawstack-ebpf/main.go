// Command rawstack-ebpf records with rawstack's eBPF back end; `rawstack
// record --backend ebpf` and `rawstack agent` run it with their
// arguments, which it hands to package cmd/internal/record:
//
//	rawstack-ebpf record [record's flags]
//	rawstack-ebpf agent [agent's flags]
//
// It is a command of its own because the back end's loader links
// github.com/cilium/ebpf, whose package initialisation would otherwise run
// at the start of every rawstack command. It links the OTLP exporter too
// (package cmd/internal/otlpstream, record.InProcessOTLP), for the same
// reason kept out of rawstack: the agent, and record --backend ebpf
// --otlp-endpoint, stream OTLP from this one process, with no
// rawstack-otlp companion. Its own start is the BPF verifier's (about
// 180 ms), beside which the exporter's package initialisation is small:
// GODEBUG=inittrace=1 sums 1.4–3.1 ms over 176 packages, 0.4–0.7 ms over
// 58 without it. A service unit runs it directly
// (deploy/rawstack-agent.service); `rawstack agent` execs it in its
// place.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rawstack/rawstack/cmd/internal/otlpstream"
	"github.com/rawstack/rawstack/cmd/internal/record"
	"github.com/rawstack/rawstack/internal/selfprof"
	"github.com/rawstack/rawstack/platform"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // the back end's BPF programs
)

func main() {
	runs := map[string]struct {
		main  func([]string, io.Writer, io.Writer, record.Linked, func([]string) error) error
		usage string
	}{
		"record": {record.Main, "--backend ebpf " + record.Usage},
		"agent":  {record.AgentMain, record.AgentUsage},
	}
	if len(os.Args) < 2 || runs[os.Args[1]].main == nil {
		fmt.Fprintln(os.Stderr, "usage: rawstack-ebpf record --backend ebpf "+record.Usage)
		fmt.Fprintln(os.Stderr, "       rawstack-ebpf agent "+record.AgentUsage)
		os.Exit(2)
	}
	record.InProcessOTLP = func(args []string, stderr io.Writer) (io.WriteCloser, error) {
		return otlpstream.Start(args, stderr)
	}
	sub := os.Args[1]
	ebpfOnly := func(be platform.Backend) bool { return be == platform.BackendEBPF }
	stop := selfprof.Start("rawstack-ebpf")
	err := runs[sub].main(os.Args[2:], os.Stdout, os.Stderr, ebpfOnly, nil)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawstack %s: %v\n", sub, err)
		if errors.As(err, new(*record.UsageError)) {
			fmt.Fprintf(os.Stderr, "usage: rawstack %s %s\n", sub, runs[sub].usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}
