// Package otlpstream is the OTLP side of a recording: it reads a rawstack
// stream (what record's tracer writes), sends it to an OTLP endpoint in
// batches through the exporter of package symbolizer/export/otlp, and
// prints one summary line at the end. Two programs run it: rawstack-otlp
// stream, the companion through which the rawstack CLI streams (its
// standard input is the stream), and rawstack-ebpf, which runs it in its
// own process (record.InProcessOTLP): the agent is one process.
//
// It links the Collector's pdata and grpc, whose package initialisation
// would slow the start of every rawstack command; the CLI never imports
// it.
package otlpstream

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// Usage is the arguments Start takes (rawstack-otlp stream's).
const Usage = "--endpoint HOST:PORT [--raw [--raw-kernel]] [--interval D] [--queue N] [--tls] [--ca FILE] [--header K=V]... [--service NAME] [--compression gzip|none]"

// Stream is a running export: write the rawstack stream to it, then Close.
type Stream struct {
	exp      *otlp.Exporter
	stderr   io.Writer
	label    string
	endpoint string
	hz       int
	start    time.Time
	stopTick func()
	closed   sync.Once
	err      error
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// Start parses args (Usage) and starts the exporter; its warnings and,
// at Close, its summary line go to stderr.
func Start(args []string, stderr io.Writer) (*Stream, error) {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "HOST:PORT")
	raw := fs.Bool("raw", false, "send raw locations")
	rawKernel := fs.Bool("raw-kernel", false, "with --raw, leave kernel frames unnamed too")
	interval := fs.Duration("interval", 5*time.Second, "batch interval")
	queue := fs.Int("queue", 32, "batches kept while the endpoint is down")
	useTLS := fs.Bool("tls", false, "connect with TLS")
	ca := fs.String("ca", "", "PEM file of the endpoint's CA")
	var headers multiFlag
	fs.Var(&headers, "header", "KEY=VALUE (repeatable)")
	service := fs.String("service", "", "service.name")
	compression := fs.String("compression", "gzip", "gzip or none")
	label := fs.String("label", "rawstack record", "prefix of the summary line")
	hz := fs.Int("hz", 0, "sampling frequency, for the summary line")
	every := fs.Duration("every", 0, "also print the totals this often (0: only at the end)")
	noWarn := fs.Bool("no-warn", false, "do not print export failures (the summary counts what they lost)")
	maxStacks := fs.Int("max-stacks", 0, "the recorder's stack table cap (tracer.Options.MaxStacks): older stacks are forgotten")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c := otlp.Client{Endpoint: *endpoint, Headers: map[string]string{}, Gzip: *compression == "gzip"}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("header %q: want KEY=VALUE", h)
		}
		c.Headers[k] = v
	}
	if *useTLS || *ca != "" {
		c.TLS = &tls.Config{}
		if *ca != "" {
			pem, err := os.ReadFile(*ca)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate", *ca)
			}
			c.TLS.RootCAs = pool
		}
	}
	host, _ := os.Hostname()
	opts := otlp.ExporterOptions{Client: c, Interval: *interval, Queue: *queue,
		Build: otlp.Options{Raw: *raw, RawKernel: *rawKernel, HostName: host, ServiceName: *service, MaxStacks: *maxStacks}}
	if !*raw {
		opts.Build.Resolver = symbolizer.NewResolver(nil, 0, 0)
	}
	var mu sync.Mutex
	last := ""
	opts.Warn = func(err error) {
		if *noWarn {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if s := err.Error(); s != last {
			last = s
			fmt.Fprintf(stderr, "%s: %v\n", *label, err)
		}
	}
	exp, err := otlp.NewExporter(opts)
	if err != nil {
		return nil, err
	}
	s := &Stream{exp: exp, stderr: stderr, label: *label, endpoint: *endpoint, hz: *hz, start: time.Now(), stopTick: func() {}}
	if *every > 0 {
		tk := time.NewTicker(*every)
		done := make(chan struct{})
		s.stopTick = func() { tk.Stop(); close(done) }
		go func() {
			for {
				select {
				case <-tk.C:
				case <-done:
					return
				}
				es := exp.Stats()
				fmt.Fprintf(stderr, "%s: %.0fs: %d samples taken, %d sent in %d batches, %d lost, %d batches queued\n",
					*label, time.Since(s.start).Seconds(), es.Samples, es.Sent, es.Batches, es.Lost+es.StreamLost, es.Queued)
			}
		}()
	}
	return s, nil
}

// Write hands the exporter the next bytes of the rawstack stream.
func (s *Stream) Write(p []byte) (int, error) { return s.exp.Write(p) }

// Close ends the stream: the exporter sends the last batch (or counts
// what it could not send), then the summary line is printed. Only the
// first call does it.
func (s *Stream) Close() error {
	s.closed.Do(func() {
		s.stopTick()
		s.err = s.exp.Close()
		fmt.Fprintln(s.stderr, summary(s.label, s.endpoint, s.exp.Stats(), s.hz, time.Since(s.start)))
	})
	return s.err
}

// summary is the stream's last line: what was sent, and what was lost
// where and why.
func summary(label, endpoint string, es otlp.ExporterStats, hz int, d time.Duration) string {
	before := ""
	if es.StreamLost > 0 {
		var rs []string
		for r, n := range es.StreamLostBy {
			rs = append(rs, fmt.Sprintf("%d %v", n, r))
		}
		sort.Strings(rs)
		before = ": " + strings.Join(rs, ", ")
	}
	return fmt.Sprintf("%s: otlp %s: %d samples sent in %d batches (%d bytes, %d on the wire), %d lost (%d queue full, %d rejected, %d unsent at exit; %d retries; %d lost before the exporter%s; %d taken, %d Hz, %.1fs)",
		label, endpoint, es.Sent, es.Batches, es.Bytes, es.WireBytes, es.Lost, es.LostQueueFull, es.LostRejected, es.LostUnsent,
		es.Retries, es.StreamLost, before, es.Samples, hz, d.Seconds())
}
