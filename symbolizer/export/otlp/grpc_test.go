package otlp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // the Collector's receivers take gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// profileServer is a gRPC server of the OTLP profiles service built with
// pprofileotlp's server side: what a Collector's receiver runs.
type profileServer struct {
	pprofileotlp.UnimplementedGRPCServer
	mu       sync.Mutex
	auth     []string
	encoding []string
	samples  int
	answer   func() (pprofileotlp.ExportResponse, error)
	// nonconforming requests (internal/otlpcheck)
	bad []error
}

func (s *profileServer) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, md.Get("authorization")...)
	if err := otlpcheck.Check(req.Profiles()); err != nil {
		s.bad = append(s.bad, err)
	}
	for _, rp := range req.Profiles().ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, smp := range pr.Samples().All() {
					s.samples += smp.TimestampsUnixNano().Len()
				}
			}
		}
	}
	if s.answer != nil {
		return s.answer()
	}
	return pprofileotlp.NewExportResponse(), nil
}

// The server's stats.Handler notes each request's grpc-encoding.
func (s *profileServer) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (s *profileServer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (s *profileServer) HandleConn(context.Context, stats.ConnStats) {}
func (s *profileServer) HandleRPC(_ context.Context, st stats.RPCStats) {
	if h, ok := st.(*stats.InHeader); ok {
		s.mu.Lock()
		s.encoding = append(s.encoding, h.Compression)
		s.mu.Unlock()
	}
}

func startProfileServer(t *testing.T) (*profileServer, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &profileServer{}
	gs := grpc.NewServer(grpc.StatsHandler(ps))
	pprofileotlp.RegisterGRPCServer(gs, ps)
	go gs.Serve(l)
	t.Cleanup(func() {
		gs.Stop()
		for _, err := range ps.bad {
			t.Errorf("a request on the wire does not conform: %v", err)
		}
	})
	return ps, l.Addr().String()
}

// TestClient sends a converted trace with the Client (pprofileotlp's gRPC
// client) and checks what the server saw: the samples, the headers as
// metadata, gzip, and how answers become errors.
func TestClient(t *testing.T) {
	data, _ := chainTrace(t)
	req, err := otlp.Marshal(convert(t, data, true))
	if err != nil {
		t.Fatal(err)
	}
	want := Summarize(t, convert(t, data, true)).Samples
	srv, addr := startProfileServer(t)
	c := &otlp.Client{Endpoint: addr, Gzip: true, Headers: map[string]string{"Authorization": "Bearer x"}}
	defer c.Close()
	ctx := context.Background()
	if err := c.Export(ctx, req); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	if srv.samples != want || len(srv.auth) != 1 || srv.auth[0] != "Bearer x" || len(srv.encoding) != 1 || srv.encoding[0] != "gzip" {
		t.Errorf("server saw %d samples (want %d), authorization %q, grpc-encoding %q", srv.samples, want, srv.auth, srv.encoding)
	}
	srv.answer = func() (pprofileotlp.ExportResponse, error) {
		r := pprofileotlp.NewExportResponse()
		r.PartialSuccess().SetRejectedProfiles(2)
		r.PartialSuccess().SetErrorMessage("too old")
		return r, nil
	}
	srv.mu.Unlock()
	var pe *otlp.PartialError
	if err := c.Export(ctx, req); !errors.As(err, &pe) || pe.Rejected != 2 || pe.Message != "too old" || otlp.IsRetryable(err) {
		t.Errorf("partial success answered %v, want a PartialError of 2 profiles, not retryable", err)
	}
	for _, tc := range []struct {
		code      codes.Code
		retryable bool
	}{{codes.Unavailable, true}, {codes.ResourceExhausted, false}, {codes.InvalidArgument, false}, {codes.PermissionDenied, false}} {
		srv.mu.Lock()
		srv.answer = func() (pprofileotlp.ExportResponse, error) {
			return pprofileotlp.ExportResponse{}, status.Error(tc.code, "no")
		}
		srv.mu.Unlock()
		err := c.Export(ctx, req)
		var se *otlp.StatusError
		if !errors.As(err, &se) || se.Code != int(tc.code) || se.Message != "no" || otlp.IsRetryable(err) != tc.retryable {
			t.Errorf("status %v answered %v (retryable %v), want a StatusError, retryable %v", tc.code, err, otlp.IsRetryable(err), tc.retryable)
		}
	}
	// RESOURCE_EXHAUSTED is retryable when the answer carries RetryInfo.
	srv.mu.Lock()
	srv.answer = func() (pprofileotlp.ExportResponse, error) {
		st, err := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		if err != nil {
			return pprofileotlp.ExportResponse{}, err
		}
		return pprofileotlp.ExportResponse{}, st.Err()
	}
	srv.mu.Unlock()
	if err := c.Export(ctx, req); !otlp.IsRetryable(err) {
		t.Errorf("RESOURCE_EXHAUSTED with RetryInfo answered %v, not retryable", err)
	}
	// Bytes that are no request fail before the network, for good.
	if err := c.Export(ctx, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}); err == nil || otlp.IsRetryable(err) {
		t.Errorf("garbage request: %v", err)
	}
}

// TestExporterWireBytes streams a trace through an Exporter and checks
// the accounting: every sample sent, gzip making the wire bytes smaller
// than the protobuf bytes.
func TestExporterWireBytes(t *testing.T) {
	data, _ := chainTrace(t)
	want := Summarize(t, convert(t, data, true)).Samples
	srv, addr := startProfileServer(t)
	exp, err := otlp.NewExporter(otlp.ExporterOptions{Client: otlp.Client{Endpoint: addr, Gzip: true}, Build: otlp.Options{Raw: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exp.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	st := exp.Stats()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if st.Sent != int64(want) || srv.samples != want || st.Lost != 0 {
		t.Errorf("sent %d, server got %d, lost %d; want %d", st.Sent, srv.samples, st.Lost, want)
	}
	if st.WireBytes <= 0 || st.WireBytes >= st.Bytes {
		t.Errorf("%d bytes on the wire for %d protobuf bytes, gzipped", st.WireBytes, st.Bytes)
	}
}

// TestExporterMaxBatchSamples: with a long interval, batches are cut by
// sample count, so no request grows past a receiver's size limit.
func TestExporterMaxBatchSamples(t *testing.T) {
	data, _ := chainTrace(t)
	want := Summarize(t, convert(t, data, true)).Samples
	srv, addr := startProfileServer(t)
	exp, err := otlp.NewExporter(otlp.ExporterOptions{Client: otlp.Client{Endpoint: addr}, Build: otlp.Options{Raw: true},
		Interval: time.Hour, MaxBatchSamples: 50})
	if err != nil {
		t.Fatal(err)
	}
	// The tracer hands over a chunk at a time; so does this, at chunk
	// boundaries the reader finds in any split.
	for i := 0; i < len(data); i += 512 {
		if _, err := exp.Write(data[i:min(i+512, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	st := exp.Stats()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	t.Logf("%d samples in %d batches", st.Sent, st.Batches)
	if st.Sent != int64(want) || srv.samples != want {
		t.Errorf("sent %d, server got %d; want %d", st.Sent, srv.samples, want)
	}
	if st.Batches < int64(want/50/2) {
		t.Errorf("%d samples in %d batches with MaxBatchSamples 50", want, st.Batches)
	}
}

// TestExporterRejectedBatch: what a refused batch costs. An endpoint that
// answers InvalidArgument (the rawstack processor's answer to a request
// that breaks the conformance rules) gets each batch once: the exporter
// counts its samples as lost to rejection, never retries it, warns once
// per distinct error, and goes on with the next batch.
func TestExporterRejectedBatch(t *testing.T) {
	data, _ := chainTrace(t)
	want := Summarize(t, convert(t, data, true)).Samples
	srv, addr := startProfileServer(t)
	var requests int
	srv.answer = func() (pprofileotlp.ExportResponse, error) {
		requests++ // under srv.mu
		return pprofileotlp.ExportResponse{}, status.Error(codes.InvalidArgument, "rawstack processor: malformed profiles: ...")
	}
	var warnings []error
	var mu sync.Mutex
	exp, err := otlp.NewExporter(otlp.ExporterOptions{Client: otlp.Client{Endpoint: addr}, Build: otlp.Options{Raw: true},
		Interval: time.Hour, MaxBatchSamples: 50, Warn: func(err error) { mu.Lock(); warnings = append(warnings, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exp.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	st := exp.Stats()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	t.Logf("%d requests for %d batches; stats %+v", requests, st.Batches, st)
	if st.Sent != 0 || st.LostRejected != int64(want) || st.Lost != int64(want) || st.Retries != 0 {
		t.Errorf("sent %d, lost %d (%d rejected), %d retries; want all %d samples lost to rejection, no retry", st.Sent, st.Lost, st.LostRejected, st.Retries, want)
	}
	if batches := (want + 49) / 50; requests < batches || requests > batches+1 {
		t.Errorf("%d requests for %d samples in batches of 50: each batch is sent once", requests, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) != requests {
		t.Errorf("%d warnings for %d refused batches", len(warnings), requests)
	}
}

// TestClientTLS exports through TLS to a gRPC-Go server with a
// certificate made here: HTTP/2 negotiated by ALPN, the server checked
// against the Client's roots.
func TestClientTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &profileServer{}
	gs := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	pprofileotlp.RegisterGRPCServer(gs, ps)
	go gs.Serve(l)
	defer gs.Stop()

	data, _ := chainTrace(t)
	req, err := otlp.Marshal(convert(t, data, true))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plain := &otlp.Client{Endpoint: l.Addr().String(), Timeout: 2 * time.Second}
	defer plain.Close()
	if err := plain.Export(ctx, req); err == nil {
		t.Error("a plaintext export to a TLS endpoint succeeded")
	}
	untrusted := &otlp.Client{Endpoint: l.Addr().String(), TLS: &tls.Config{}, Timeout: 2 * time.Second}
	defer untrusted.Close()
	if err := untrusted.Export(ctx, req); err == nil {
		t.Error("an export to an endpoint whose certificate is not trusted succeeded")
	}
	roots := x509.NewCertPool()
	parsed, _ := x509.ParseCertificate(der)
	roots.AddCert(parsed)
	c := &otlp.Client{Endpoint: l.Addr().String(), TLS: &tls.Config{RootCAs: roots}, Gzip: true}
	defer c.Close()
	if err := c.Export(ctx, req); err != nil {
		t.Fatal(err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if want := Summarize(t, convert(t, data, true)).Samples; ps.samples != want {
		t.Errorf("server saw %d samples over TLS, want %d", ps.samples, want)
	}
}

// TestClientWaitsForEndpoint: an export made while nothing listens waits
// for the endpoint (gRPC's wait-for-ready) within its Timeout, and goes
// out when the endpoint comes up.
func TestClientWaitsForEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	data, _ := chainTrace(t)
	req, err := otlp.Marshal(convert(t, data, true))
	if err != nil {
		t.Fatal(err)
	}
	c := &otlp.Client{Endpoint: addr, Timeout: 1500 * time.Millisecond}
	defer c.Close()
	start := time.Now()
	if err := c.Export(context.Background(), req); err == nil || !otlp.IsRetryable(err) || time.Since(start) < time.Second {
		t.Fatalf("export to a closed port: %v after %v, want a retryable error at the timeout", err, time.Since(start))
	}
	c.Timeout = 10 * time.Second
	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- c.Export(context.Background(), req) }()
	time.Sleep(700 * time.Millisecond)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	ps := &profileServer{}
	gs := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(gs, ps)
	go gs.Serve(l)
	defer gs.Stop()
	if err := <-done; err != nil {
		t.Fatalf("export while the endpoint came up: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("export took %v; the endpoint was up after 0.7 s", d)
	}
}
