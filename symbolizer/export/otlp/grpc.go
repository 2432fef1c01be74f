package otlp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Client sends ExportProfilesServiceRequests to an OTLP gRPC endpoint with
// pprofileotlp's gRPC client over a google.golang.org/grpc connection.
//
// This package links gRPC and protobuf-go, whose package initialization
// alone costs more than the rawstack CLI's start-up budget: the CLI does
// not import it; its OTLP work runs in the rawstack-otlp companion.
type Client struct {
	// Endpoint is HOST:PORT.
	Endpoint string
	// TLS, if set, secures the connection; nil means plaintext.
	TLS *tls.Config
	// Headers are sent with every request as gRPC metadata (e.g.
	// authorization); keys are lower-cased, as gRPC requires.
	Headers map[string]string
	// Timeout bounds one export; 0 means 10s.
	Timeout time.Duration
	// Gzip compresses requests with gRPC's gzip encoding, as the
	// Collector's OTLP exporter does by default.
	Gzip bool

	// conn is made on first use; copies of a Client made after that
	// share it.
	conn *clientConn
}

type clientConn struct {
	cc *grpc.ClientConn
	md metadata.MD
}

// connMu guards Client.conn (a package-level lock keeps Client copyable,
// as ExporterOptions holds it by value).
var connMu sync.Mutex

// StatusError is a gRPC status other than OK returned by the endpoint.
type StatusError struct {
	Code    int
	Message string
	// RetryInfo says the status carried a google.rpc.RetryInfo detail:
	// the endpoint says a later attempt may succeed.
	RetryInfo bool
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("otlp: grpc status %d: %s", e.Code, e.Message)
}

// Retryable reports whether the request may succeed later: the codes the
// OTLP specification lists as retryable. RESOURCE_EXHAUSTED is retryable
// only with a RetryInfo detail, as the specification says: without one it
// is what a receiver answers to a request above its message size limit,
// which no retry of the same request would pass.
func (e *StatusError) Retryable() bool {
	switch e.Code {
	case 1, 4, 10, 11, 14, 15: // CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS
		return true
	case 8: // RESOURCE_EXHAUSTED
		return e.RetryInfo
	}
	return false
}

// PartialError says the endpoint accepted the request but rejected some
// profiles.
type PartialError struct {
	Rejected int64
	Message  string
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("otlp: endpoint rejected %d profiles: %s", e.Rejected, e.Message)
}

// connect creates the connection on first use. grpc.NewClient does not
// dial: the connection is made by the first export and remade after the
// endpoint went away, with gRPC's own back-off capped at 4 s (4.8 s with
// its jitter), below the Exporter's maxBackoff. An export waits for the
// connection to be ready (up to Timeout) instead of failing at once while
// it is down, so a batch goes out as soon as the endpoint is back rather
// than at the Exporter's next retry.
func (c *Client) connect() (*clientConn, error) {
	connMu.Lock()
	defer connMu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	creds := insecure.NewCredentials()
	if c.TLS != nil {
		creds = credentials.NewTLS(c.TLS)
	}
	cc, err := grpc.NewClient(c.Endpoint,
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 4 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithStatsHandler(wireCounter{}),
	)
	if err != nil {
		return nil, fmt.Errorf("otlp: endpoint %s: %w", c.Endpoint, err)
	}
	conn := &clientConn{cc: cc}
	if len(c.Headers) > 0 {
		conn.md = metadata.MD{}
		for k, v := range c.Headers {
			conn.md.Set(k, v)
		}
	}
	c.conn = conn
	return conn, nil
}

// Close closes the connection; a later Export opens a new one.
func (c *Client) Close() error {
	connMu.Lock()
	defer connMu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.cc.Close()
	c.conn = nil
	return err
}

// Export sends one encoded ExportProfilesServiceRequest and waits for the
// answer. A transport failure or a retryable status is retryable; see
// [IsRetryable].
func (c *Client) Export(ctx context.Context, req []byte) error {
	_, err := c.send(ctx, req)
	return err
}

// wireKey carries, in a call's context, where the stats handler stores
// the request's size on the wire.
type wireKey struct{}

// wireCounter is a stats.Handler that reports the size of a request's
// message on the wire (gRPC framing and compression included, HTTP/2
// framing not) to the caller that asked for it.
type wireCounter struct{}

func (wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (wireCounter) HandleConn(context.Context, stats.ConnStats)                       {}
func (wireCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok && p.Client {
		if n, ok := ctx.Value(wireKey{}).(*atomic.Int64); ok {
			n.Add(int64(p.WireLength))
		}
	}
}

// send is Export that also returns the request's size on the wire. The
// request goes as it was encoded (pdata's client would encode it again,
// its resource attributes as string-table references: Marshal).
func (c *Client) send(ctx context.Context, data []byte) (int, error) {
	conn, err := c.connect()
	if err != nil {
		return 0, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if conn.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, conn.md.Copy())
	}
	wire := new(atomic.Int64)
	ctx = context.WithValue(ctx, wireKey{}, wire)
	opts := []grpc.CallOption{grpc.WaitForReady(true)}
	if c.Gzip {
		opts = append(opts, grpc.UseCompressor(gzip.Name))
	}
	opts = append(opts, grpc.ForceCodec(rawCodec{}))
	resp := pprofileotlp.NewExportResponse()
	err = conn.cc.Invoke(ctx, exportMethod, encodedRequest(data), &resp, opts...)
	if err != nil {
		if s, ok := status.FromError(err); ok {
			se := &StatusError{Code: int(s.Code()), Message: s.Message()}
			for _, d := range s.Details() {
				if _, ok := d.(*errdetails.RetryInfo); ok {
					se.RetryInfo = true
				}
			}
			return int(wire.Load()), se
		}
		return int(wire.Load()), fmt.Errorf("otlp: export to %s: %w", c.Endpoint, err)
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 {
		return int(wire.Load()), &PartialError{Rejected: ps.RejectedProfiles(), Message: ps.ErrorMessage()}
	}
	return int(wire.Load()), nil
}

// IsRetryable reports whether an error of [Client.Export] may go away
// when the request is sent again.
func IsRetryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	var pe *PartialError
	return !errors.As(err, &pe) && err != nil
}

// exportMethod is the profiles service's Export (opentelemetry-proto:
// collector/profiles/v1development/profiles_service.proto).
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// encodedRequest is an ExportProfilesServiceRequest as Marshal encoded it.
type encodedRequest []byte

// rawCodec sends an encodedRequest as it is and decodes the answer into
// a pdata ExportResponse: protobuf on the wire, as the service's own.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(encodedRequest); ok {
		return b, nil
	}
	return nil, fmt.Errorf("otlp: cannot send a %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if r, ok := v.(*pprofileotlp.ExportResponse); ok {
		return r.UnmarshalProto(data)
	}
	return fmt.Errorf("otlp: cannot decode into a %T", v)
}
