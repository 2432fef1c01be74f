// Package fetchproto is the line protocol between the rawstack CLI and
// its rawstack-fetch companion, which downloads for it so that the CLI
// links no network code. Each message is one line of space-separated
// fields, strings Go-quoted:
//
//	G ID TIMEOUT_NS MAX_SIZE "USER_AGENT" "PATH" "URL"   get URL into the file PATH
//	C ID                                                cancel get ID
//	R ID ok                                             done
//	R ID notfound "MESSAGE"                             the server has no such file (404)
//	R ID error "MESSAGE"                                failed
//
// Gets run concurrently; replies come in any order. The companion exits
// when its input ends, cancelling what is under way.
package fetchproto

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer/fetch"
)

// Msg is one message.
type Msg struct {
	Op   byte // 'G', 'C' or 'R'
	ID   uint64
	Req  fetch.Request // G
	Path string        // G
	Err  error         // R: nil for ok, else a *RemoteError
}

// RemoteError is a failure the companion reported. It wraps
// fetch.ErrNotFound for a 404.
type RemoteError struct {
	Msg      string
	NotFound bool
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns fetch.ErrNotFound for a 404, else nil.
func (e *RemoteError) Unwrap() error {
	if e.NotFound {
		return fetch.ErrNotFound
	}
	return nil
}

// ErrSyntax says a line is not a message.
var ErrSyntax = errors.New("fetchproto: malformed message")

// maxLine caps a message line (paths and URLs are short).
const maxLine = 64 << 10

// MaxLine is the longest line Parse accepts.
const MaxLine = maxLine

// AppendGet appends a get message, newline included.
func AppendGet(b []byte, id uint64, req *fetch.Request, path string) []byte {
	b = append(b, "G "...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(req.Timeout), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, req.MaxSize, 10)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, req.UserAgent)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, path)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, req.URL)
	return append(b, '\n')
}

// AppendCancel appends a cancel message.
func AppendCancel(b []byte, id uint64) []byte {
	b = append(b, "C "...)
	b = strconv.AppendUint(b, id, 10)
	return append(b, '\n')
}

// AppendReply appends the reply to get id that ended with err.
func AppendReply(b []byte, id uint64, err error) []byte {
	b = append(b, "R "...)
	b = strconv.AppendUint(b, id, 10)
	switch {
	case err == nil:
		b = append(b, " ok"...)
	case errors.Is(err, fetch.ErrNotFound):
		b = append(b, " notfound "...)
		b = strconv.AppendQuote(b, err.Error())
	default:
		b = append(b, " error "...)
		b = strconv.AppendQuote(b, err.Error())
	}
	return append(b, '\n')
}

// Parse parses one line (without its newline).
func Parse(line string) (Msg, error) {
	var m Msg
	bad := func(why string) (Msg, error) {
		if len(line) > 80 {
			line = line[:80] + "..."
		}
		return Msg{}, fmt.Errorf("%w (%s): %q", ErrSyntax, why, line)
	}
	if len(line) > maxLine {
		return bad("too long")
	}
	f := fields{s: line}
	op := f.word()
	if len(op) != 1 {
		return bad("operation")
	}
	m.Op = op[0]
	id, err := strconv.ParseUint(f.word(), 10, 64)
	if err != nil {
		return bad("id")
	}
	m.ID = id
	switch m.Op {
	case 'G':
		t, err1 := strconv.ParseInt(f.word(), 10, 64)
		max, err2 := strconv.ParseInt(f.word(), 10, 64)
		if err1 != nil || err2 != nil || t < 0 || max < 0 {
			return bad("timeout or size")
		}
		m.Req.Timeout, m.Req.MaxSize = time.Duration(t), max
		m.Req.UserAgent, m.Path, m.Req.URL = f.quoted(), f.quoted(), f.quoted()
		if f.err || m.Path == "" || m.Req.URL == "" {
			return bad("strings")
		}
	case 'C':
	case 'R':
		switch f.word() {
		case "ok":
		case "notfound":
			m.Err = &RemoteError{Msg: f.quoted(), NotFound: true}
		case "error":
			m.Err = &RemoteError{Msg: f.quoted()}
		default:
			return bad("status")
		}
	default:
		return bad("operation")
	}
	if f.err || strings.TrimSpace(f.s) != "" {
		return bad("fields")
	}
	return m, nil
}

// fields reads space-separated words and quoted strings, sticky on error.
type fields struct {
	s   string
	err bool
}

func (f *fields) word() string {
	f.s = strings.TrimLeft(f.s, " ")
	i := strings.IndexByte(f.s, ' ')
	if i < 0 {
		i = len(f.s)
	}
	w := f.s[:i]
	f.s = f.s[i:]
	if w == "" {
		f.err = true
	}
	return w
}

func (f *fields) quoted() string {
	f.s = strings.TrimLeft(f.s, " ")
	q, err := strconv.QuotedPrefix(f.s)
	if err != nil {
		f.err = true
		return ""
	}
	f.s = f.s[len(q):]
	s, err := strconv.Unquote(q)
	if err != nil {
		f.err = true
	}
	return s
}
