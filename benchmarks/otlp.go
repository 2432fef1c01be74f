package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// The otlp scenario (issue 16): bytes per sample of the OTLP profiles
// rawstack sends — raw and symbolized, as one request for a whole trace
// (convert --to otlp) and streamed in batches (record --otlp-endpoint) —
// against the gzipped pprof export of the same trace. The stream goes to
// a local gRPC endpoint in this process that answers OK; the bytes on the
// wire are counted there, on the receiving side: every byte read from the
// sender's TCP connections (HTTP/2 frames, headers and gRPC messages),
// not the sender's own count of what it sent.
func init() {
	register(&scenario{name: "otlp", order: 160, run: runOTLP})
}

var reOTLPSent = regexp.MustCompile(`otlp \S+: (\d+) samples sent in (\d+) batches \((\d+) bytes, (\d+) on the wire\)`)

func runOTLP(cfg *config) ([]row, error) {
	load, err := buildC(cfg, "recordload.cc", "-O2", "-g", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	// rawstack runs its OTLP companion from its own directory.
	if b, err := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(rawstack), "rawstack-otlp"), "github.com/rawstack/rawstack/cmd/rawstack-otlp").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build rawstack-otlp: %v\n%s", err, b)
	}
	rounds := "150"
	if cfg.short {
		rounds = "40"
	}
	var rows []row
	sizeOf := func(args ...string) (int64, int64, error) {
		out := filepath.Join(cfg.work, "out.bin")
		cmd := exec.Command(rawstack, append(args, "-o", out)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("rawstack %v: %v\n%s", args, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return 0, 0, err
		}
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(data)
		w.Close()
		return int64(len(data)), int64(z.Len()), nil
	}

	ep, err := newCountingEndpoint()
	if err != nil {
		return nil, err
	}
	defer ep.close()
	for _, interval := range []string{"5s", "1s"} {
		trace := filepath.Join(cfg.work, "otlp.rawstack")
		for _, raw := range []bool{true, false} {
			args := []string{"record", "-q", "-F", "999", "-o", trace, "--otlp-endpoint", ep.addr, "--otlp-interval", interval}
			kind := "symbolized"
			if raw {
				args = append(args, "--otlp-raw")
				kind = "raw"
			}
			b, err := exec.Command(rawstack, append(args, "--", load, rounds)...).CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("rawstack record: %v\n%s", err, b)
			}
			m := reOTLPSent.FindSubmatch(b)
			if m == nil {
				return nil, fmt.Errorf("rawstack record: no otlp summary:\n%s", b)
			}
			sent, _ := strconv.ParseFloat(string(m[1]), 64)
			if sent == 0 {
				return nil, fmt.Errorf("rawstack record: no samples sent:\n%s", b)
			}
			_, samples, err := countSamples(trace)
			if err != nil {
				return nil, err
			}
			pprofBytes, _, err := sizeOf("convert", trace, "--to", "pprof")
			if err != nil {
				return nil, err
			}
			wire, err := ep.received()
			if err != nil {
				return nil, err
			}
			rows = append(rows, row{Scenario: "otlp", Metric: fmt.Sprintf("stream %s, %s batches: B/sample on the wire (gzip)", kind, interval),
				Rawstack: float64(wire) / sent, Peer: "pprof.gz of the trace", PeerVal: float64(pprofBytes) / float64(samples), Better: "lower",
				Note: fmt.Sprintf("%d samples, %s batches; %d B received over TCP by the endpoint (the sender counted %s B of messages)", int64(sent), m[2], wire, m[4])})
		}
		if interval == "5s" {
			_, samples, err := countSamples(trace)
			if err != nil {
				return nil, err
			}
			pprofBytes, _, err := sizeOf("convert", trace, "--to", "pprof")
			if err != nil {
				return nil, err
			}
			for _, raw := range []bool{true, false} {
				args := []string{"convert", trace, "--to", "otlp"}
				kind := "symbolized"
				if raw {
					args = append(args, "--raw")
					kind = "raw"
				}
				n, nz, err := sizeOf(args...)
				if err != nil {
					return nil, err
				}
				per := float64(samples)
				rows = append(rows,
					row{Scenario: "otlp", Metric: "one request, " + kind + ": B/sample", Rawstack: float64(n) / per, Peer: "pprof.gz", PeerVal: float64(pprofBytes) / per, Better: "lower"},
					row{Scenario: "otlp", Metric: "one request, " + kind + ", gzip: B/sample", Rawstack: float64(nz) / per, Peer: "pprof.gz", PeerVal: float64(pprofBytes) / per, Better: "lower"})
			}
		}
	}
	return rows, nil
}

// countingEndpoint is an OTLP/gRPC endpoint (HTTP/2 without TLS) that
// accepts everything and counts every byte it reads from its
// connections, and the samples of the profiles it receives.
type countingEndpoint struct {
	addr    string
	srv     *http.Server
	bytes   atomic.Int64
	open    atomic.Int64 // connections not yet closed
	samples atomic.Int64 // timestamps (or, without, values) of the samples received
	bad     atomic.Int64 // requests that did not decode
}

func newCountingEndpoint() (*countingEndpoint, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &countingEndpoint{addr: l.Addr().String()}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	e.srv = &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, err := otlpSamples(r.Body, r.Header.Get("Grpc-Encoding")); err != nil {
			e.bad.Add(1)
		} else {
			e.samples.Add(n)
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte{0, 0, 0, 0, 0}) // an empty ExportProfilesServiceResponse
		w.Header().Set("Grpc-Status", "0")
	})}
	go e.srv.Serve(&countingListener{Listener: l, e: e})
	return e, nil
}

// received waits until the connections of a sender that exited are
// closed (the server has read all it sent), returns the bytes read from
// them and resets the count.
func (e *countingEndpoint) received() (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for e.open.Load() > 0 {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("otlp endpoint %s: %d connections still open 10 s after the sender exited", e.addr, e.open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return e.bytes.Swap(0), nil
}

func (e *countingEndpoint) close() { e.srv.Close() }

type countingListener struct {
	net.Listener
	e *countingEndpoint
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.e.open.Add(1)
	return &countingConn{Conn: c, e: l.e}, nil
}

// otlpSamples reads a gRPC request body of ExportProfilesServiceRequest
// messages (each a flag byte, a 4-byte length and the message, gzipped
// when the flag is set: the request's grpc-encoding) and counts their samples: a sample's timestamps,
// or its first value where it has none. Every byte is read either way.
func otlpSamples(body io.Reader, encoding string) (int64, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, err
	}
	var n int64
	for len(b) >= 5 {
		size := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if size > len(b)-5 {
			return n, fmt.Errorf("gRPC message of %d bytes in %d", size, len(b)-5)
		}
		msg, compressed := b[5:5+size], b[0] == 1
		b = b[5+size:]
		if compressed {
			if encoding != "gzip" {
				return n, fmt.Errorf("compressed gRPC message, grpc-encoding %q", encoding)
			}
			zr, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil {
				return n, err
			}
			if msg, err = io.ReadAll(zr); err != nil {
				return n, err
			}
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(msg); err != nil {
			return n, err
		}
		for _, rp := range req.Profiles().ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, smp := range pr.Samples().All() {
						switch {
						case smp.TimestampsUnixNano().Len() > 0:
							n += int64(smp.TimestampsUnixNano().Len())
						case smp.Values().Len() > 0:
							n += smp.Values().At(0)
						}
					}
				}
			}
		}
	}
	return n, nil
}

// countingConn counts the bytes read from a sender's connection.
type countingConn struct {
	net.Conn
	e      *countingEndpoint
	closed atomic.Bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.e.bytes.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	if !c.closed.Swap(true) {
		c.e.open.Add(-1)
	}
	return c.Conn.Close()
}
