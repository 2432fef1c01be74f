package httpfetch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/symbolizer/fetch"
)

func TestGet(t *testing.T) {
	var ua string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua = r.Header.Get("User-Agent")
		switch r.URL.Path {
		case "/file":
			w.Write([]byte("0123456789"))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/broken":
			http.Error(w, "no", http.StatusInternalServerError)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	if fetch.Default() == nil {
		t.Fatal("importing httpfetch registered no getter")
	}
	dst := filepath.Join(t.TempDir(), "f")
	ctx := context.Background()
	g := Getter{}
	if err := g.Get(ctx, &fetch.Request{URL: srv.URL + "/file", UserAgent: "test-agent", MaxSize: 10}, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "0123456789" || ua != "test-agent" {
		t.Errorf("got %q with User-Agent %q", b, ua)
	}
	if err := g.Get(ctx, &fetch.Request{URL: srv.URL + "/file", MaxSize: 9}, dst); err == nil || !strings.Contains(err.Error(), "larger than 9 bytes") {
		t.Errorf("over MaxSize: %v", err)
	}
	if err := g.Get(ctx, &fetch.Request{URL: srv.URL + "/missing"}, dst); !errors.Is(err, fetch.ErrNotFound) || !strings.Contains(err.Error(), "/missing") {
		t.Errorf("404: %v, want ErrNotFound naming the URL", err)
	}
	if err := g.Get(ctx, &fetch.Request{URL: srv.URL + "/broken"}, dst); err == nil || errors.Is(err, fetch.ErrNotFound) || !strings.Contains(err.Error(), "500") {
		t.Errorf("500: %v", err)
	}
	start := time.Now()
	if err := g.Get(ctx, &fetch.Request{URL: srv.URL + "/slow", Timeout: 200 * time.Millisecond}, dst); err == nil {
		t.Error("slow server: no error")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a 200ms timeout took %v", d)
	}
}
