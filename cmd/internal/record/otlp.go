package record

import (
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/cmd/internal/companion"
)

// OTLPHelper does rawstack's OTLP work: it links the Collector's pdata
// and grpc, whose package initialization would slow the start of every
// rawstack command, so it is a companion: record streams what it writes to
// the companion's standard input.
const OTLPHelper = "rawstack-otlp"

// InProcessOTLP, when a program sets it, runs the OTLP side in this
// process instead of the rawstack-otlp companion: it takes the
// companion's stream arguments and returns what the recording writes its
// stream to, whose Close sends the last batch and prints the summary.
// rawstack-ebpf sets it (package cmd/internal/otlpstream), so the agent
// is one process: one Go runtime, heap and set of module tables, where
// the companion had its own. The rawstack CLI leaves it nil: linking the
// exporter would slow every command's start.
var InProcessOTLP func(args []string, stderr io.Writer) (io.WriteCloser, error)

// otlpFlags are record's options for streaming to an OTLP endpoint.
type otlpFlags struct {
	endpoint string
	raw      bool
	interval time.Duration
	queue    int
	tls      bool
	caFile   string
	headers  multiFlag
	service  string
	compress string
	// every, if set, makes the companion print its totals this often
	// (agent --verbose)
	every time.Duration
	// noWarn keeps the companion from printing export failures (agent
	// without --verbose: silent but for its summary)
	noWarn bool
	// maxStacks is the tracer's stack table cap, which the companion
	// mirrors to forget stacks no longer referenced (agent)
	maxStacks int
	// env holds runtime variables (GOGC, GOMAXPROCS) for the companion
	// that apply where the environment sets none (agent: agentEnv).
	env map[string]string
}

func (o *otlpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.endpoint, "otlp-endpoint", "", "HOST:PORT: stream the profile over OTLP/gRPC to this endpoint (an OpenTelemetry Collector)")
	fs.BoolVar(&o.raw, "otlp-raw", false, "send raw locations (addresses, mappings, build ids) for the collector to symbolize")
	fs.DurationVar(&o.interval, "otlp-interval", 5*time.Second, "send a batch this often")
	fs.IntVar(&o.queue, "otlp-queue", 32, "batches kept while the endpoint is down; older ones are dropped and counted as lost")
	fs.BoolVar(&o.tls, "otlp-tls", false, "connect with TLS")
	fs.StringVar(&o.caFile, "otlp-ca", "", "PEM file of the CA that signs the endpoint's certificate (implies --otlp-tls)")
	fs.Var(&o.headers, "otlp-header", "KEY=VALUE sent with every export, e.g. authorization (repeatable)")
	fs.StringVar(&o.service, "otlp-service", "", "service.name resource attribute")
	fs.StringVar(&o.compress, "otlp-compression", "gzip", "gzip or none")
}

// otlpStream is where record's OTLP stream goes: the rawstack-otlp
// child's standard input, or the exporter in this process
// (InProcessOTLP).
type otlpStream struct {
	stdin io.WriteCloser
	// exited is closed when the child has exited (err is its status);
	// nil in process, where the exporter cannot end on its own.
	exited chan struct{}
	err    error
}

func (s *otlpStream) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// finish ends the stream and waits for the exporter to send the last
// batch and print its summary.
func (s *otlpStream) finish() error {
	err := s.stdin.Close()
	if s.exited == nil {
		return err
	}
	<-s.exited
	err = s.err
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return errors.New(OTLPHelper + " failed (see above)")
	}
	return err
}

// start starts rawstack-otlp stream, whose lines begin with label; it returns nil
// without --otlp-endpoint.
func (o *otlpFlags) start(stderr io.Writer, hz int, label string) (*otlpStream, error) {
	if o.endpoint == "" {
		return nil, nil
	}
	args := []string{"--endpoint", o.endpoint, "--interval", o.interval.String(), "--queue", strconv.Itoa(o.queue),
		"--compression", o.compress, "--hz", strconv.Itoa(hz), "--label", label}
	if o.every > 0 {
		args = append(args, "--every", o.every.String())
	}
	if o.noWarn {
		args = append(args, "--no-warn")
	}
	if o.maxStacks > 0 {
		args = append(args, "--max-stacks", strconv.Itoa(o.maxStacks))
	}
	for _, h := range o.headers {
		args = append(args, "--header", h)
	}
	if o.raw {
		args = append(args, "--raw")
	}
	if o.tls {
		args = append(args, "--tls")
	}
	if o.caFile != "" {
		args = append(args, "--ca", o.caFile)
	}
	if o.service != "" {
		args = append(args, "--service", o.service)
	}
	if InProcessOTLP != nil {
		// The variables the companion would get (the build-id cache the
		// symbolizer reads) where the environment sets none; the
		// runtime's (GOGC, GOMAXPROCS) the agent has applied already, and
		// set here they would reach the programs this one runs.
		for k, v := range o.env {
			if k != "GOGC" && k != "GOMAXPROCS" && os.Getenv(k) == "" {
				os.Setenv(k, v)
			}
		}
		w, err := InProcessOTLP(args, stderr)
		if err != nil {
			return nil, err
		}
		return &otlpStream{stdin: w}, nil
	}
	path, err := companion.Find(OTLPHelper, "--otlp-endpoint")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, append([]string{"stream"}, args...)...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	for k, v := range o.env {
		if os.Getenv(k) == "" {
			if cmd.Env == nil {
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &otlpStream{stdin: in, exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	return s, nil
}

// check validates the OTLP flags; they matter only with --otlp-endpoint.
func (o *otlpFlags) check() error {
	if o.endpoint == "" {
		return nil
	}
	if o.interval <= 0 || o.queue <= 0 {
		return &UsageError{"--otlp-interval and --otlp-queue must be positive"}
	}
	if o.compress != "gzip" && o.compress != "none" {
		return &UsageError{"--otlp-compression must be gzip or none"}
	}
	for _, h := range o.headers {
		if k, _, ok := strings.Cut(h, "="); !ok || k == "" {
			return &UsageError{"--otlp-header wants KEY=VALUE"}
		}
	}
	return nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
