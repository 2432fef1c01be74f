package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rawstack/rawstack/internal/protofields"
)

// Client sends ExportProfilesServiceRequests to an OTLP gRPC endpoint: one
// unary call of the profiles service over HTTP/2 (net/http; plaintext
// endpoints with HTTP/2 prior knowledge, as gRPC's insecure credentials
// do), with gRPC's message framing, status trailers and gzip encoding.
//
// It is written on net/http rather than google.golang.org/grpc: a call
// of one method is all an exporter needs, and gRPC-Go with the protobuf
// runtime it brings made up 11 of the agent's 26 MB of binary, most of
// it paged in while the agent runs (issue 38: the agent's memory).
// Receivers built on gRPC-Go (the Collector's) are its tests' peers.
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
	hc   *http.Client
	url  string
	head http.Header
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

// Connection back-off: while the endpoint refuses connections, an export
// dials again after 0.5 s, growing 1.6× (±20%) to 4 s, until its Timeout
// (gRPC's wait-for-ready with its default back-off, capped below the
// Exporter's maxBackoff), so that a batch goes out as soon as the
// endpoint is back rather than at the Exporter's next retry.
const (
	dialBackoff    = 500 * time.Millisecond
	dialBackoffMax = 4 * time.Second
	dialTimeout    = 5 * time.Second
	// maxAnswer caps the bytes read of an answer: an
	// ExportProfilesServiceResponse is a count and a message.
	maxAnswer = 1 << 20
)

// connect makes the HTTP/2 client on first use; connections are dialled
// by the first export and again after the endpoint went away.
func (c *Client) connect() (*clientConn, error) {
	connMu.Lock()
	defer connMu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	host, port, err := net.SplitHostPort(c.Endpoint)
	if err != nil || port == "" {
		return nil, fmt.Errorf("otlp: endpoint %q: want HOST:PORT", c.Endpoint)
	}
	if host == "" {
		host = "localhost" // ":4317", as gRPC reads it
	}
	var p http.Protocols
	scheme := "http"
	tr := &http.Transport{
		DialContext:     (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		Protocols:       &p,
		IdleConnTimeout: 5 * time.Minute,
		// gRPC-Go's client pings an idle connection only when asked to;
		// these find a connection whose peer vanished without a FIN.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 10 * time.Second},
	}
	if c.TLS != nil {
		scheme = "https"
		p.SetHTTP2(true)
		tr.TLSClientConfig = c.TLS.Clone()
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	head := http.Header{
		"Content-Type": {"application/grpc"},
		"Te":           {"trailers"},
		"User-Agent":   {"rawstack-otlp grpc-http2"},
	}
	if c.Gzip {
		head.Set("Grpc-Encoding", "gzip")
	}
	head.Set("Grpc-Accept-Encoding", "gzip")
	for k, v := range c.Headers {
		head.Set(strings.ToLower(k), v)
	}
	c.conn = &clientConn{hc: &http.Client{Transport: tr}, url: scheme + "://" + net.JoinHostPort(host, port) + exportMethod, head: head}
	return c.conn, nil
}

// Close closes the connection; a later Export opens a new one.
func (c *Client) Close() error {
	connMu.Lock()
	defer connMu.Unlock()
	if c.conn != nil {
		c.conn.hc.CloseIdleConnections()
		c.conn = nil
	}
	return nil
}

// Export sends one encoded ExportProfilesServiceRequest and waits for the
// answer. A transport failure or a retryable status is retryable; see
// [IsRetryable].
func (c *Client) Export(ctx context.Context, req []byte) error {
	_, err := c.send(ctx, req)
	return err
}

// frame returns the request as one gRPC message: a compressed flag, the
// length and the bytes (gzipped if c.Gzip).
func (c *Client) frame(data []byte) ([]byte, error) {
	if !c.Gzip {
		out := make([]byte, 5, 5+len(data))
		binary.BigEndian.PutUint32(out[1:], uint32(len(data)))
		return append(out, data...), nil
	}
	var buf bytes.Buffer
	buf.Grow(5 + len(data)/4)
	buf.Write([]byte{1, 0, 0, 0, 0})
	// A compressor holds about 800 KB of tables. It is made for each
	// request and not kept: the agent sends a batch every 10 s, and
	// between two the memory is better returned (issue 38: a pooled one
	// stayed live, and the collector let the heap grow by 1.5 times it).
	// Best speed: at the default level compressing took a tenth of the
	// agent's CPU time (70 of 720 ms in a 3-minute profile) to send 13%
	// fewer bytes (0.36 of the request against 0.41).
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	_, err := zw.Write(data)
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, err
	}
	out := buf.Bytes()
	binary.BigEndian.PutUint32(out[1:], uint32(len(out)-5))
	return out, nil
}

// send is Export that also returns the request's size on the wire (gRPC
// framing and compression included, HTTP/2 framing not). The request
// goes as it was encoded (Marshal).
func (c *Client) send(ctx context.Context, data []byte) (int, error) {
	if uint64(len(data)) > 1<<32-1 {
		return 0, &StatusError{Code: 8, Message: fmt.Sprintf("request of %d bytes exceeds gRPC's message size", len(data))}
	}
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
	body, err := c.frame(data)
	if err != nil {
		return 0, fmt.Errorf("otlp: compressing a request: %w", err)
	}
	wait := dialBackoff
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, conn.url, bytes.NewReader(body))
		if err != nil {
			return 0, fmt.Errorf("otlp: endpoint %s: %w", c.Endpoint, err)
		}
		req.Header = conn.head.Clone()
		if dl, ok := ctx.Deadline(); ok {
			req.Header.Set("Grpc-Timeout", strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)+"m")
		}
		resp, err := conn.hc.Do(req)
		if err == nil {
			defer resp.Body.Close()
			return len(body), c.answer(resp)
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || ctx.Err() != nil {
			return 0, fmt.Errorf("otlp: export to %s: %w", c.Endpoint, err)
		}
		// Nothing was sent: wait for the endpoint, as gRPC's
		// wait-for-ready does, until the export's deadline.
		jittered := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("otlp: export to %s: %w", c.Endpoint, err)
		case <-time.After(jittered):
		}
		wait = min(time.Duration(float64(wait)*1.6), dialBackoffMax)
	}
}

// answer reads a call's answer: its message (an
// ExportProfilesServiceResponse), then its status from the trailers, or
// from the headers of a trailers-only answer.
func (c *Client) answer(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Code: httpToGRPC(resp.StatusCode), Message: fmt.Sprintf("HTTP status %s from %s", resp.Status, c.Endpoint)}
	}
	if st := resp.Header.Get("Grpc-Status"); st != "" {
		return grpcStatus(resp.Header)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("otlp: reading the answer of %s: %w", c.Endpoint, err)
	}
	if len(b) > maxAnswer {
		return &StatusError{Code: 8, Message: fmt.Sprintf("answer of %s exceeds %d bytes", c.Endpoint, maxAnswer)}
	}
	if err := grpcStatus(resp.Trailer); err != nil {
		return err
	}
	msg, err := unframe(b, resp.Header.Get("Grpc-Encoding"))
	if err != nil {
		return &StatusError{Code: 13, Message: fmt.Sprintf("answer of %s: %v", c.Endpoint, err)}
	}
	rejected, text, err := parseResponse(msg)
	if err != nil {
		return &StatusError{Code: 13, Message: fmt.Sprintf("answer of %s: %v", c.Endpoint, err)}
	}
	if rejected > 0 {
		return &PartialError{Rejected: rejected, Message: text}
	}
	return nil
}

// grpcStatus is the status that h (trailers, or a trailers-only
// answer's headers) carries; nil for OK.
func grpcStatus(h http.Header) error {
	s := h.Get("Grpc-Status")
	if s == "" {
		return &StatusError{Code: 13, Message: "answer without a grpc-status"}
	}
	code, err := strconv.Atoi(s)
	if err != nil || code < 0 {
		return &StatusError{Code: 2, Message: fmt.Sprintf("grpc-status %q", s)}
	}
	if code == 0 {
		return nil
	}
	se := &StatusError{Code: code, Message: percentDecode(h.Get("Grpc-Message"))}
	if d := h.Get("Grpc-Status-Details-Bin"); d != "" {
		if b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d, "=")); err == nil {
			se.RetryInfo = hasRetryInfo(b)
		}
	}
	return se
}

// httpToGRPC maps an HTTP status other than 200 to a gRPC code, as
// gRPC's HTTP-to-gRPC status mapping does.
func httpToGRPC(status int) int {
	switch status {
	case http.StatusBadRequest:
		return 13 // INTERNAL
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// percentDecode undoes grpc-message's percent-encoding; a malformed
// escape stays as it is.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unframe returns the one message of a unary answer's body: the gRPC
// framing's flag and length checked, gunzipped if flagged (with the
// answer's grpc-encoding gzip, the only one this client accepts).
func unframe(b []byte, encoding string) ([]byte, error) {
	if len(b) == 0 {
		return nil, nil // no message: an empty response
	}
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes: no gRPC message header", len(b))
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) != uint64(len(b)-5) {
		return nil, fmt.Errorf("gRPC message of %d bytes in %d", n, len(b)-5)
	}
	switch b[0] {
	case 0:
		return b[5:], nil
	case 1:
		if encoding != "gzip" {
			return nil, fmt.Errorf("compressed message with grpc-encoding %q", encoding)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b[5:]))
		if err != nil {
			return nil, err
		}
		out, err := io.ReadAll(io.LimitReader(zr, maxAnswer+1))
		if err != nil {
			return nil, err
		}
		if len(out) > maxAnswer {
			return nil, fmt.Errorf("message exceeds %d bytes", maxAnswer)
		}
		return out, nil
	}
	return nil, fmt.Errorf("gRPC message flag %d", b[0])
}

// Fields of the answers (opentelemetry-proto
// collector/profiles/v1development; googleapis google/rpc/status.proto,
// error_details.proto; google/protobuf/any.proto).
const (
	fieldResponsePartial = 1 // ExportProfilesServiceResponse.partial_success
	fieldPartialRejected = 1 // ExportProfilesPartialSuccess.rejected_profiles
	fieldPartialMessage  = 2 // ExportProfilesPartialSuccess.error_message
	fieldStatusDetails   = 3 // google.rpc.Status.details
	fieldAnyTypeURL      = 1 // google.protobuf.Any.type_url
	retryInfoTypeURLEnd  = "/google.rpc.RetryInfo"
	// maxPartialMessage caps the bytes kept of a partial success's message.
	maxPartialMessage = 64 << 10
)

// parseResponse reads an ExportProfilesServiceResponse: how many
// profiles were rejected, and why.
func parseResponse(b []byte) (rejected int64, msg string, err error) {
	err = protofields.Each(b, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		if num != fieldResponsePartial || typ != protowire.BytesType {
			return nil
		}
		return protofields.Each(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
			switch {
			case num == fieldPartialRejected && typ == protowire.VarintType:
				x, _ := protowire.ConsumeVarint(raw[protowire.SizeTag(num):])
				rejected = int64(x)
			case num == fieldPartialMessage && typ == protowire.BytesType:
				msg = string(v[:min(len(v), maxPartialMessage)])
			}
			return nil
		})
	})
	return rejected, msg, err
}

// hasRetryInfo reports whether an encoded google.rpc.Status has a
// google.rpc.RetryInfo among its details.
func hasRetryInfo(b []byte) bool {
	found := false
	protofields.Each(b, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		if num != fieldStatusDetails || typ != protowire.BytesType {
			return nil
		}
		return protofields.Each(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
			if num == fieldAnyTypeURL && typ == protowire.BytesType && strings.HasSuffix(string(v), retryInfoTypeURLEnd) {
				found = true
			}
			return nil
		})
	})
	return found
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
