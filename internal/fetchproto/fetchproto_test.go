package fetchproto

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/symbolizer/fetch"
)

func TestRoundTrip(t *testing.T) {
	req := &fetch.Request{URL: "http://h/a b/\"q\"\n", UserAgent: "", MaxSize: 4 << 30, Timeout: 30 * time.Second}
	line := string(AppendGet(nil, 7, req, "/tmp/x\ty"))
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("not one line: %q", line)
	}
	m, err := Parse(strings.TrimSuffix(line, "\n"))
	if err != nil || m.Op != 'G' || m.ID != 7 || m.Req != *req || m.Path != "/tmp/x\ty" {
		t.Fatalf("Parse(%q) = %+v, %v", line, m, err)
	}
	m, err = Parse(strings.TrimSuffix(string(AppendCancel(nil, 9)), "\n"))
	if err != nil || m.Op != 'C' || m.ID != 9 {
		t.Fatalf("cancel: %+v, %v", m, err)
	}
	for _, e := range []error{nil, fmt.Errorf("GET u: 404 Not Found: %w", fetch.ErrNotFound), errors.New("GET u: 500")} {
		m, err := Parse(strings.TrimSuffix(string(AppendReply(nil, 3, e)), "\n"))
		if err != nil || m.Op != 'R' || m.ID != 3 {
			t.Fatalf("reply %v: %+v, %v", e, m, err)
		}
		if (e == nil) != (m.Err == nil) || e != nil && m.Err.Error() != e.Error() ||
			errors.Is(e, fetch.ErrNotFound) != errors.Is(m.Err, fetch.ErrNotFound) {
			t.Errorf("reply %v came back as %v", e, m.Err)
		}
	}
	for _, bad := range []string{"", "G", "G 1 2 3 \"\" \"p\"", "R 1 maybe", "X 1", "C 1 extra", "G 1 -1 0 \"\" \"p\" \"u\"", "R 1 error \"unterminated"} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(strings.TrimSuffix(string(AppendGet(nil, 1, &fetch.Request{URL: "http://x/", Timeout: time.Second}, "/p")), "\n"))
	f.Add("R 2 notfound \"GET x: 404\"")
	f.Add("C 3")
	f.Fuzz(func(t *testing.T, line string) {
		m, err := Parse(line)
		if err != nil {
			return
		}
		// What parses re-encodes to something that parses the same.
		var b []byte
		switch m.Op {
		case 'G':
			b = AppendGet(nil, m.ID, &m.Req, m.Path)
		case 'C':
			b = AppendCancel(nil, m.ID)
		case 'R':
			b = AppendReply(nil, m.ID, m.Err)
		}
		m2, err := Parse(strings.TrimSuffix(string(b), "\n"))
		if err != nil || m2.Op != m.Op || m2.ID != m.ID || m2.Req != m.Req || m2.Path != m.Path || (m.Err == nil) != (m2.Err == nil) {
			t.Fatalf("%q → %+v → %q → %+v, %v", line, m, b, m2, err)
		}
	})
}
