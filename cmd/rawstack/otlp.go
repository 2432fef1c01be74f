package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

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

// exporter returns the Exporter the flags ask for, or nil.
func (o *otlpFlags) exporter(stderr io.Writer) (*otlp.Exporter, error) {
	if o.endpoint == "" {
		return nil, nil
	}
	if o.interval <= 0 || o.queue <= 0 {
		return nil, &usageError{"--otlp-interval and --otlp-queue must be positive"}
	}
	c := otlp.Client{Endpoint: o.endpoint, Headers: map[string]string{}}
	switch o.compress {
	case "gzip":
		c.Gzip = true
	case "none":
	default:
		return nil, &usageError{"--otlp-compression must be gzip or none"}
	}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, &usageError{"--otlp-header wants KEY=VALUE"}
		}
		c.Headers[k] = v
	}
	if o.tls || o.caFile != "" {
		c.TLS = &tls.Config{}
		if o.caFile != "" {
			pem, err := os.ReadFile(o.caFile)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate", o.caFile)
			}
			c.TLS.RootCAs = pool
		}
	}
	host, _ := os.Hostname()
	opts := otlp.ExporterOptions{Client: c, Interval: o.interval, Queue: o.queue,
		Build: otlp.Options{Raw: o.raw, HostName: host, ServiceName: o.service}}
	if !o.raw {
		opts.Build.Resolver = symbolizer.NewResolver(nil, 0, 0)
	}
	last := ""
	opts.Warn = func(err error) {
		if s := err.Error(); s != last {
			last = s
			fmt.Fprintf(stderr, "rawstack record: %v\n", err)
		}
	}
	return otlp.NewExporter(opts)
}

// writeOTLP is convert --to otlp.
func writeOTLP(w io.Writer, path string, raw bool, o *symbolizer.Options) error {
	r, err := format.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	host, _ := os.Hostname()
	opts := otlp.Options{Raw: raw, HostName: host}
	if !raw {
		opts.Resolver = symbolizer.NewResolver(o, 0, 0)
		defer opts.Resolver.Close()
	}
	p, c, err := otlp.Convert(r, opts, o.Warn)
	if err != nil {
		return err
	}
	if c.Samples == 0 && c.RawStacks > 0 {
		return errors.New(otlp.ErrRawStacks.Error())
	}
	return otlp.Write(w, p)
}
