package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// otlpHelper does rawstack's OTLP work: it links the Collector's pdata,
// whose package initialization (feature gates, a JSON codec) would slow
// the start of every rawstack command, so it is a binary of its own,
// looked for next to rawstack and then on PATH.
const otlpHelper = "rawstack-otlp"

func otlpHelperPath() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), otlpHelper)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(otlpHelper)
	if err != nil {
		return "", fmt.Errorf("OTLP needs the %s command next to rawstack or on PATH "+
			"(go install github.com/rawstack/rawstack/cmd/%s@latest)", otlpHelper, otlpHelper)
	}
	return p, nil
}

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

// otlpStream is the rawstack-otlp child that streams what record writes
// to its standard input.
type otlpStream struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (s *otlpStream) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// finish ends the stream and waits for the child to send the last batch
// and print its summary.
func (s *otlpStream) finish() error {
	s.stdin.Close()
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return errors.New(otlpHelper + " failed (see above)")
	}
	return err
}

// start checks the flags and starts rawstack-otlp stream; it returns nil
// without --otlp-endpoint.
func (o *otlpFlags) start(stderr io.Writer, hz int) (*otlpStream, error) {
	if o.endpoint == "" {
		return nil, nil
	}
	if o.interval <= 0 || o.queue <= 0 {
		return nil, &usageError{"--otlp-interval and --otlp-queue must be positive"}
	}
	if o.compress != "gzip" && o.compress != "none" {
		return nil, &usageError{"--otlp-compression must be gzip or none"}
	}
	args := []string{"stream", "--endpoint", o.endpoint, "--interval", o.interval.String(), "--queue", strconv.Itoa(o.queue),
		"--compression", o.compress, "--hz", strconv.Itoa(hz)}
	for _, h := range o.headers {
		if k, _, ok := strings.Cut(h, "="); !ok || k == "" {
			return nil, &usageError{"--otlp-header wants KEY=VALUE"}
		}
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
	path, err := otlpHelperPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &otlpStream{cmd: cmd, stdin: in}, nil
}

// runOTLPConvert is convert --to otlp: rawstack-otlp convert writes the
// request.
func runOTLPConvert(file string, raw bool, out string, sf *symFlags, stdout, stderr io.Writer) error {
	args := []string{"convert", file}
	if raw {
		args = append(args, "--raw")
	}
	if out != "" {
		args = append(args, "-o", out)
	}
	args = append(args, sf.Args()...)
	path, err := otlpHelperPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return errors.New(otlpHelper + " failed (see above)")
	}
	return err
}
