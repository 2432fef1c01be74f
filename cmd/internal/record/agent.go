package record

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/rawstack/rawstack/platform"
)

// AgentUsage is agent's usage line (after "rawstack agent").
const AgentUsage = "--otlp-endpoint HOST:PORT [--otlp-raw=false] [--otlp-interval D] [--otlp-queue N] [--otlp-tls] [--otlp-ca FILE] [--otlp-header K=V]... [-F HZ] [--off-cpu] [--no-kernel] [--unwind fp|dwarf] [--no-jit] [--buildid-cache DIR | --no-buildid-cache] [--duration D] [--verbose]"

// Agent defaults: what the daemons of the field use (the OpenTelemetry
// eBPF profiler samples at 20 Hz; 19 keeps clear of lock-step with
// timers that fire at round rates), raw locations for the Collector to
// symbolize, and a bounded queue: 64 batches of 10 s are ten minutes of
// a Collector outage, after which the oldest are dropped and counted.
const (
	agentHz       = 19
	agentInterval = 10 * time.Second
	agentQueue    = 64
	// agentMaxStacks caps the stacks the agent and its OTLP exporter hold
	// (tracer.Options.MaxStacks): whole-host stacks of short-lived
	// processes rarely repeat (each process has its own addresses), so a
	// default-sized table would grow to ~24 MiB before its first reset.
	// At 16 Ki the agent's RSS still grew by 23 MiB over the first ten
	// minutes of the agent benchmark's load (about 6 new stacks a
	// second at 20 Hz, two copies of each: the tracer's table and the
	// exporter's), and at 2 Ki by 3 MiB, filling for six minutes (1.7 MB
	// of the exporter's heap were its stacks). 512 is a minute or two of
	// that load, and a reset costs one more definition of each stack
	// still in use.
	agentMaxStacks = 512
	// agentGCPercent is the GOGC of the agent and its companion unless
	// the environment sets one: the Go default (100) lets a heap grow to
	// twice what is live before collecting, which for a daemon whose
	// budget is 64 MiB for both processes is most of it.
	agentGCPercent = 50
	// agentFlush is how long the agent's events wait before they go to
	// its OTLP companion (tracer.Options.FlushInterval; record's is 200
	// ms): every write wakes both processes (about 100 µs of CPU time
	// each on a small VM), and a batch leaves every 10 s anyway.
	agentFlush = 5 * time.Second
)

// agentFlag says whether record's flag name is one agent takes too; the
// others (a file, a target, a back end, raw stacks) do not fit a daemon
// that streams the whole host. A switch, where a map literal was built by
// an init function in every command's start.
func agentFlag(name string) bool {
	switch name {
	case "F", "duration", "no-kernel", "unwind", "stack-size",
		"no-jit", "off-cpu", "goroutines", "buildid-cache", "buildid-cache-size", "no-buildid-cache",
		"otlp-endpoint", "otlp-raw", "otlp-interval", "otlp-queue", "otlp-tls",
		"otlp-ca", "otlp-header", "otlp-service", "otlp-compression":
		return true
	}
	return false
}

// agentEnv is the runtime settings of the agent and its companion where
// the environment sets none: GOGC (agentGCPercent), and one P: each
// does one thing at a time, and a second P only spun looking for work
// after every wakeup (a seventh of the agent's CPU). A function, so that
// no command's start builds the map.
func agentEnv() map[string]string {
	return map[string]string{"GOGC": strconv.Itoa(agentGCPercent), "GOMAXPROCS": "1"}
}

// registerAgent is Register with agent's defaults: the whole host through
// the eBPF back end, raw OTLP, no progress line.
func registerAgent(fs *flag.FlagSet) (*Flags, *bool) {
	f := Register(fs)
	f.agent, f.System, f.Backend, f.Quiet = true, true, "ebpf", true
	f.Hz, f.otlp.raw, f.otlp.interval, f.otlp.queue = agentHz, true, agentInterval, agentQueue
	f.otlp.maxStacks = agentMaxStacks
	f.otlp.env = agentEnv()
	for name, def := range map[string]string{"F": strconv.Itoa(agentHz), "otlp-raw": "true",
		"otlp-interval": agentInterval.String(), "otlp-queue": strconv.Itoa(agentQueue)} {
		fs.Lookup(name).DefValue = def
	}
	verbose := fs.Bool("verbose", false, "log the totals (samples taken, sent, lost, queued) once a minute")
	return f, verbose
}

// AgentMain is `rawstack agent`: record's run ([Main]) with the agent's
// defaults — every process of the host through the eBPF back end, into
// an OTLP endpoint only, until SIGTERM, an interrupt or --duration. It
// prints nothing but one summary line at the end (and, with --verbose,
// the totals once a minute). A Collector that is down never stops the
// sampling: batches queue, the oldest are dropped when the queue is full,
// and the summary counts them with their reason. linked and delegate are
// Main's.
func AgentMain(args []string, stdout, stderr io.Writer, linked Linked, delegate func(args []string) error) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	af, verbose := registerAgent(fs)
	if err := fs.Parse(args); err != nil {
		return &UsageError{err.Error()}
	}
	var bad string
	fs.Visit(func(fl *flag.Flag) {
		if !agentFlag(fl.Name) && fl.Name != "verbose" && bad == "" {
			bad = fl.Name
		}
	})
	switch {
	case bad != "":
		return &UsageError{fmt.Sprintf("agent takes no -%s: it streams every process of the host to --otlp-endpoint", bad)}
	case len(fs.Args()) > 0:
		return &UsageError{"agent takes no command: it samples every process of the host"}
	case af.otlp.endpoint == "":
		return &UsageError{"agent needs --otlp-endpoint HOST:PORT"}
	}
	be, mode, err := af.Check(nil)
	if err != nil {
		return err
	}
	if mode == platform.UnwindAuto {
		return &UsageError{"agent: --unwind is fp or dwarf"}
	}
	if err := af.otlp.check(); err != nil {
		return err
	}
	if *verbose {
		af.otlp.every = time.Minute
	} else {
		af.otlp.noWarn = true
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(agentGCPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if !linked(be) {
		if delegate == nil {
			return &UsageError{fmt.Sprintf("--backend %v: this program does not link that back end", be)}
		}
		return delegate(args)
	}
	return af.run(be, mode, nil, stdout, stderr)
}
