package rawstackprocessor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// manyModules returns a raw profile with n mappings, each with its own
// GNU build id and one location.
func manyModules(n int) pprofile.Profiles {
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	d.StringTable().Append("", otlp.AttrBuildIDGNU, "/lib/x.so")
	d.AttributeTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	st := d.StackTable().AppendEmpty()
	for i := 0; i < n; i++ {
		a := d.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(1)
		a.Value().SetStr(fmt.Sprintf("%040x", 0xfeed0000+i))
		m := d.MappingTable().AppendEmpty()
		base := uint64(0x10000000 + i<<20)
		m.SetMemoryStart(base)
		m.SetMemoryLimit(base + 1<<20)
		m.SetFilenameStrindex(2)
		m.AttributeIndices().Append(int32(d.AttributeTable().Len() - 1))
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(int32(d.MappingTable().Len() - 1))
		l.SetAddress(base + 0x1234)
		st.LocationIndices().Append(int32(d.LocationTable().Len() - 1))
	}
	pr := p.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	pr.SetDurationNano(2)
	s := pr.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.TimestampsUnixNano().Append(1)
	return p
}

// TestLookupsBounded: a request naming 300 unknown build ids makes the
// processor search for at most max_lookups_per_request of them (counted
// where the searches end, at a debuginfod server); the rest stay raw and
// are searched for when a later request names them again.
func TestLookupsBounded(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /buildid/HEX/debuginfo or /executable
		parts := strings.Split(r.URL.Path, "/")
		if len(parts) > 2 {
			mu.Lock()
			asked[parts[2]] = true
			mu.Unlock()
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := &Config{DebuginfodURLs: []string{srv.URL}, DebuginfodCache: t.TempDir(), MaxLookupsPerRequest: 10}
	proc := newSymbolizer(cfg, zap.NewNop())
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(asked) }

	if _, err := proc.process(context.Background(), manyModules(300)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n == 0 || n > 10 {
		t.Fatalf("first request: debuginfod asked for %d build ids, want 1..10", n)
	}
	if s, d := proc.searched.Load(), proc.deferred.Load(); s != 10 || d != 290 {
		t.Errorf("first request: searched %d, deferred %d; want 10 and 290", s, d)
	}
	// The same request again: the 10 already searched for cost nothing
	// (remembered as missing), 10 new ones are searched.
	if _, err := proc.process(context.Background(), manyModules(300)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n > 20 {
		t.Errorf("second request: %d build ids asked in all, want ≤ 20", n)
	}
	if s := proc.searched.Load(); s != 20 {
		t.Errorf("second request: searched %d in all, want 20", s)
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(2, 4, func() time.Time { return now })
	for i := 0; i < 4; i++ {
		if !l.take() {
			t.Fatalf("take %d of a burst of 4 refused", i+1)
		}
	}
	if l.take() {
		t.Fatal("fifth take of a burst of 4 allowed")
	}
	now = now.Add(time.Second)
	if !l.take() || !l.take() || l.take() {
		t.Error("after 1 s at 2/s: want exactly 2 takes")
	}
	now = now.Add(time.Hour)
	n := 0
	for l.take() {
		n++
	}
	if n != 4 {
		t.Errorf("after an hour: %d takes, want the burst of 4", n)
	}
}
