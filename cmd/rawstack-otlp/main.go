// Command rawstack-otlp is the OTLP side of rawstack: `rawstack convert
// --to otlp` and `rawstack record --otlp-endpoint` run it. It links the
// OpenTelemetry Collector's pdata, whose package initialization (feature
// gates, a JSON codec) would slow the start of every rawstack command, so
// it is a binary of its own, looked for next to rawstack and then on PATH.
//
//	rawstack-otlp convert FILE [--raw] [-o OUT] [--debug-dir DIR]... [--path-map OLD=NEW]... [--no-debuginfod] [--kallsyms FILE] [--symbol-path PATH] [--symbol-cache DIR] [-j N] [--raw-kernel] [--no-file-hash]
//	rawstack-otlp stream --endpoint HOST:PORT [--raw [--raw-kernel]] [--interval D] [--queue N] [--tls] [--ca FILE] [--header K=V]... [--service NAME] [--compression gzip|none] < STREAM
//
// stream reads a rawstack stream on standard input (record writes it as
// one of its tracer's streams), sends it in batches and, at the end,
// prints one summary line on standard error.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/selfprof"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rawstack-otlp convert|stream ARGS")
		os.Exit(2)
	}
	stop := selfprof.Start("rawstack-otlp")
	var err error
	switch os.Args[1] {
	case "convert":
		err = convert(os.Args[2:])
	case "stream":
		err = stream(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "rawstack-otlp: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawstack-otlp %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func convert(args []string) error {
	fs := flag.NewFlagSet("convert", flag.ExitOnError)
	raw := fs.Bool("raw", false, "leave locations unsymbolized")
	out := fs.String("o", "", "output file (default: standard output)")
	var sf sources.Flags
	sf.Register(fs)
	rawKernel := fs.Bool("raw-kernel", false, "with --raw, leave kernel frames unnamed too")
	noFileHash := fs.Bool("no-file-hash", false, "leave out process.executable.build_id.htlhash (the files at the recorded paths are not the recorded ones)")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("want the trace FILE first")
	}
	file := args[0]
	fs.Parse(args[1:])
	o, err := sf.Options()
	if err != nil {
		return err
	}
	warned := map[string]bool{}
	o.Warn = func(err error) {
		if !warned[err.Error()] {
			warned[err.Error()] = true
			fmt.Fprintf(os.Stderr, "warning: %v\n", err)
		}
	}
	r, err := format.Open(file)
	if err != nil {
		return err
	}
	defer r.Close()
	host, _ := os.Hostname()
	opts := otlp.Options{Raw: *raw, RawKernel: *rawKernel, HostName: host, NoFileHash: *noFileHash}
	// In raw mode it names kernel frames only (--kallsyms applies).
	opts.Resolver = symbolizer.NewResolver(o, 0, 0)
	defer opts.Resolver.Close()
	p, c, err := otlp.Convert(r, opts, o.Warn)
	if err != nil {
		return err
	}
	if c.Samples == 0 && c.RawStacks > 0 {
		return otlp.ErrRawStacks
	}
	var w io.Writer = os.Stdout
	var f *os.File
	if *out != "" && *out != "-" {
		if f, err = os.Create(*out); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	if err := otlp.Write(bw, p); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

func stream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
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
	fs.Parse(args)
	start := time.Now()
	// The stream ends when standard input does: the recorder closes it
	// after an interrupt or SIGTERM, which a terminal or a service manager
	// also sends here. Dying on them would lose what is queued.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	c := otlp.Client{Endpoint: *endpoint, Headers: map[string]string{}, Gzip: *compression == "gzip"}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return fmt.Errorf("header %q: want KEY=VALUE", h)
		}
		c.Headers[k] = v
	}
	if *useTLS || *ca != "" {
		c.TLS = &tls.Config{}
		if *ca != "" {
			pem, err := os.ReadFile(*ca)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("%s: no PEM certificate", *ca)
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
	last := ""
	opts.Warn = func(err error) {
		if *noWarn {
			return
		}
		if s := err.Error(); s != last {
			last = s
			fmt.Fprintf(os.Stderr, "%s: %v\n", *label, err)
		}
	}
	exp, err := otlp.NewExporter(opts)
	if err != nil {
		return err
	}
	if *every > 0 {
		tk := time.NewTicker(*every)
		defer tk.Stop()
		go func() {
			for range tk.C {
				es := exp.Stats()
				fmt.Fprintf(os.Stderr, "%s: %.0fs: %d samples taken, %d sent in %d batches, %d lost, %d batches queued\n",
					*label, time.Since(start).Seconds(), es.Samples, es.Sent, es.Batches, es.Lost+es.StreamLost, es.Queued)
			}
		}()
	}
	_, cerr := io.Copy(exp, os.Stdin)
	if err := exp.Close(); err != nil && cerr == nil {
		cerr = err
	}
	fmt.Fprintln(os.Stderr, summary(*label, *endpoint, exp.Stats(), *hz, time.Since(start)))
	return cerr
}

// summary is stream's last line: what was sent, and what was lost where
// and why.
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
