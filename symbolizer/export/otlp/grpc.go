package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// exportPath is the gRPC method of the OTLP profiles service.
const exportPath = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// Client sends ExportProfilesServiceRequests to an OTLP gRPC endpoint.
//
// It speaks gRPC's HTTP/2 wire protocol (length-prefixed messages,
// grpc-status trailers) with net/http rather than with google.golang.org/grpc:
// the rawstack CLI links this package, and grpc's and protobuf-go's
// package initialization alone would cost more than the CLI's whole
// start-up budget. Without TLS it uses HTTP/2 with prior knowledge (h2c),
// as gRPC does for insecure connections.
type Client struct {
	// Endpoint is HOST:PORT.
	Endpoint string
	// TLS, if set, secures the connection; nil means plaintext.
	TLS *tls.Config
	// Headers are sent with every request (e.g. authorization).
	Headers map[string]string
	// Timeout bounds one export; 0 means 10s.
	Timeout time.Duration
	// Gzip compresses requests (grpc-encoding: gzip), as the Collector's
	// OTLP exporter does by default.
	Gzip bool

	hc *http.Client
}

// gzipWriters keeps compressors between batches: each holds ~1 MB.
var gzipWriters sync.Pool

// StatusError is a gRPC status other than OK returned by the endpoint.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("otlp: grpc status %d: %s", e.Code, e.Message)
}

// Retryable reports whether the request may succeed later: the codes the
// OTLP specification lists as retryable.
func (e *StatusError) Retryable() bool {
	switch e.Code {
	case 1, 4, 8, 10, 11, 14, 15: // CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS
		return true
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

func (c *Client) client() *http.Client {
	if c.hc != nil {
		return c.hc
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     c.TLS,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 2,
	}
	var p http.Protocols
	if c.TLS == nil {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = &p
	c.hc = &http.Client{Transport: tr}
	return c.hc
}

// Export sends one encoded ExportProfilesServiceRequest and waits for the
// answer. A transport failure or a retryable status is retryable; see
// [IsRetryable].
func (c *Client) Export(ctx context.Context, req []byte) error {
	_, err := c.send(ctx, req)
	return err
}

// send is Export that also returns the request's size on the wire
// (gRPC framing and compression included, HTTP/2 framing not).
func (c *Client) send(ctx context.Context, req []byte) (int, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: c.Endpoint, Path: exportPath}
	body := make([]byte, 5, 5+len(req))
	if c.Gzip {
		zb := bytes.NewBuffer(body)
		zw, _ := gzipWriters.Get().(*gzip.Writer)
		if zw == nil {
			zw = gzip.NewWriter(zb)
		} else {
			zw.Reset(zb)
		}
		zw.Write(req)
		zw.Close()
		gzipWriters.Put(zw)
		body = zb.Bytes()
		body[0] = 1 // compressed
	} else {
		body = append(body, req...)
	}
	binary.BigEndian.PutUint32(body[1:5], uint32(len(body)-5))
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return len(body), err
	}
	hr.Header.Set("Content-Type", "application/grpc")
	hr.Header.Set("TE", "trailers")
	if c.Gzip {
		hr.Header.Set("Grpc-Encoding", "gzip")
	}
	hr.Header.Set("Grpc-Timeout", strconv.FormatInt(timeout.Milliseconds(), 10)+"m")
	for k, v := range c.Headers {
		hr.Header.Set(k, v)
	}
	resp, err := c.client().Do(hr)
	if err != nil {
		return len(body), fmt.Errorf("otlp: export to %s: %w", c.Endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		code := 14 // UNAVAILABLE, as gRPC maps HTTP errors
		if resp.StatusCode == http.StatusBadRequest {
			code = 13
		}
		return len(body), &StatusError{Code: code, Message: "http " + resp.Status}
	}
	msg, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	// A trailers-only answer carries the status in the headers.
	st := resp.Trailer.Get("Grpc-Status")
	m := resp.Trailer.Get("Grpc-Message")
	if st == "" {
		st, m = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if rerr != nil && st == "" {
		return len(body), fmt.Errorf("otlp: export to %s: reading answer: %w", c.Endpoint, rerr)
	}
	if st == "" {
		return len(body), &StatusError{Code: 13, Message: "no grpc-status in the answer"}
	}
	if code, _ := strconv.Atoi(st); code != 0 {
		if um, err := url.PathUnescape(m); err == nil {
			m = um
		}
		return len(body), &StatusError{Code: code, Message: m}
	}
	if len(msg) >= 5 {
		if rej, text := partialSuccess(msg[5:]); rej > 0 {
			return len(body), &PartialError{Rejected: rej, Message: text}
		}
	}
	return len(body), nil
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

// partialSuccess reads ExportProfilesServiceResponse.partial_success
// {rejected_profiles = 1; error_message = 2} from an answer.
func partialSuccess(b []byte) (int64, string) {
	ps := protoField(b, 1)
	if ps == nil {
		return 0, ""
	}
	var rej int64
	var msg string
	for len(ps) > 0 {
		tag, n := binary.Uvarint(ps)
		if n <= 0 {
			break
		}
		ps = ps[n:]
		switch tag {
		case 1<<3 | 0:
			v, n := binary.Uvarint(ps)
			if n <= 0 {
				return rej, msg
			}
			rej, ps = int64(v), ps[n:]
		case 2<<3 | 2:
			l, n := binary.Uvarint(ps)
			if n <= 0 || l > uint64(len(ps)-n) {
				return rej, msg
			}
			msg, ps = string(ps[n:n+int(l)]), ps[n+int(l):]
		default:
			return rej, strings.TrimSpace(msg)
		}
	}
	return rej, msg
}

// protoField returns the bytes of length-delimited field num of message b.
func protoField(b []byte, num uint64) []byte {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil
		}
		b = b[n:]
		switch tag & 7 {
		case 0:
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return nil
			}
			b = b[n:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return nil
			}
			if tag>>3 == num {
				return b[n : n+int(l)]
			}
			b = b[n+int(l):]
		case 1:
			if len(b) < 8 {
				return nil
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return nil
			}
			b = b[4:]
		default:
			return nil
		}
	}
	return nil
}
