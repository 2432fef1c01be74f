package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// spansRecording builds examples/spans and runs it: a real recording of a
// Go program that samples itself while it runs spans "request" > "parse",
// "compute" on two goroutines (functions main.parse and main.compute),
// with markers and a counter. It returns the raw trace.
func spansRecording(t *testing.T) string {
	t.Helper()
	testbuild.Feature(t, linux.Probe())
	dir := t.TempDir()
	bin := filepath.Join(dir, "spans")
	if b, err := exec.Command("go", "build", "-o", bin, "../../examples/spans").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/spans: %v\n%s", err, b)
	}
	trace := filepath.Join(dir, "spans.rawstack")
	cmd := exec.Command(bin, "-d", "600ms", "-o", trace, "-perfetto", "")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("examples/spans: %v\n%s", err, b)
	}
	return trace
}

// TestConvertTimelines converts a real recording to every timeline format
// and checks that each holds the program's functions and spans.
func TestConvertTimelines(t *testing.T) {
	trace := spansRecording(t)
	dir := t.TempDir()
	for _, to := range []string{"perfetto", "chrome", "firefox", "speedscope"} {
		out := filepath.Join(dir, "out."+to)
		var so, se bytes.Buffer
		if code := run([]string{"convert", trace, "--to", to, "-o", out}, &so, &se); code != 0 {
			t.Fatalf("convert --to %s: exit %d: %s", to, code, se.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"main.parse", "main.compute", "request", "compute"} {
			if !bytes.Contains(b, []byte(name)) {
				t.Errorf("--to %s: no %q in the output", to, name)
			}
		}
		if to == "perfetto" {
			if len(b) == 0 || b[0] != 1<<3|2 { // Trace.packet, length-delimited
				t.Errorf("--to perfetto: does not start with a TracePacket")
			}
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("--to %s: %v", to, err)
		}
	}
	var so, se bytes.Buffer
	if code := run([]string{"convert", trace, "--to", "svg"}, &so, &se); code != 2 {
		t.Errorf("--to svg: exit %d, want 2", code)
	}
}

// chromium returns the headless browser to drive, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("RAWSTACK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testbuild.Skip(t, "no chromium to drive (apt-get install chromium, or set RAWSTACK_CHROMIUM)")
	return ""
}

var scriptRE = regexp.MustCompile(`(?s)<script.*?</script>`)

// headless loads url in a fresh headless Chromium, lets its scripts run
// (virtual time), saves a screenshot to shot and returns the rendered DOM
// without its <script> elements: text there was put on the page, not
// merely shipped in data.
func headless(t *testing.T, browser, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--window-size=1280,800", "--virtual-time-budget=8000",
		"--enable-logging=stderr", "--v=0",
		"--screenshot="+shot, "--dump-dom", url)
	cmd.Dir = filepath.Dir(shot)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, stderr.Bytes())
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") && !strings.Contains(l, "WebGL") {
			t.Logf("console: %.300s", l)
		}
	}
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Errorf("no screenshot of %s: %v", url, err)
	} else {
		t.Logf("screenshot of %s: %s", url, shot)
	}
	return scriptRE.ReplaceAllString(string(dom), "")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestViewChromium serves a real recording with rawstack view and loads
// pprof's flame graph and top pages in headless Chromium: the rendered
// pages must name the program's hot functions. A thread filter (tag
// "thread") and a time-range filter (tag "time") must change the table.
func TestViewChromium(t *testing.T) {
	browser := chromium(t)
	trace := spansRecording(t)
	// rawstack view runs the rawstack-view command, found on PATH here.
	bin := t.TempDir()
	if b, err := exec.Command("go", "build", "-o", bin, "../rawstack-view").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/rawstack-view: %v\n%s", err, b)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runView(ctx, []string{trace, "--no-browser", "--http", addr}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view: %v\n%s", err, stderr.String())
		}
	}()
	base := "http://" + addr + "/ui/"
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	deadline := time.Now().Add(time.Minute)
	for get("top") == "" {
		if time.Now().After(deadline) {
			t.Fatalf("view did not serve %s: %s", base, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), base) {
		t.Errorf("view printed %q, not the URL %s", stdout.String(), base)
	}
	art := t.ArtifactDir()
	for _, page := range []string{"flamegraph", "top"} {
		dom := headless(t, browser, base+page, filepath.Join(art, "view-"+page+".png"))
		for _, fn := range []string{"main.parse", "main.compute", "main.request"} {
			if !strings.Contains(dom, fn) {
				t.Errorf("%s page in Chromium does not show %s", page, fn)
			}
		}
	}
	// Tag filters: no thread has that name; the recording lasts 600 ms,
	// so nothing falls 10 s to 20 s after its start and everything 0-10 s.
	all := get("top")
	none := get("top?tf=" + "thread=no-such-thread")
	if strings.Contains(none, "main.parse") || !strings.Contains(all, "main.parse") {
		t.Errorf("thread tag filter did not filter")
	}
	late := get("top?tf=" + "time=10s:20s") // after the 600 ms recording
	if strings.Contains(late, "main.parse") {
		t.Errorf("time tag filter did not filter")
	}
	early := get("top?tf=" + "time=0s:10s")
	if !strings.Contains(early, "main.parse") {
		t.Errorf("time tag filter 0s:10s dropped the samples")
	}
}

// speedscopeDir returns speedscope's built web app (npm package
// speedscope, dist/release), or skips.
func speedscopeDir(t *testing.T) string {
	t.Helper()
	dirs := []string{os.Getenv("RAWSTACK_SPEEDSCOPE")}
	if c, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(c, "rawstack-tools", "node_modules", "speedscope", "dist", "release"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "index.html")); err == nil {
			return d
		}
	}
	testbuild.Skip(t, "speedscope not installed: npm install --prefix ~/.cache/rawstack-tools speedscope (or set RAWSTACK_SPEEDSCOPE to its dist/release)")
	return ""
}

// TestSpeedscopeChromium opens a real recording, converted to speedscope's
// format, in speedscope's own web app from local files (served on
// localhost, as its #profileURL= needs) in headless Chromium: the sandwich
// view's table must list the program's functions, from the speedscope
// export and from the Chrome JSON export, which speedscope also imports.
func TestSpeedscopeChromium(t *testing.T) {
	browser := chromium(t)
	app := speedscopeDir(t)
	trace := spansRecording(t)
	dir := t.TempDir()
	// Not "x.chrome.json": speedscope takes that name for a DevTools
	// timeline (a different JSON format) and fails on a trace.
	names := map[string]string{"speedscope": "profile.speedscope.json", "chrome": "trace-events.json"}
	for to, name := range names {
		var so, se bytes.Buffer
		if code := run([]string{"convert", trace, "--to", to, "-o", filepath.Join(dir, name)}, &so, &se); code != 0 {
			t.Fatalf("convert --to %s: %s", to, se.String())
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/profiles/", http.StripPrefix("/profiles/", http.FileServer(http.Dir(dir))))
	mux.Handle("/", http.FileServer(http.Dir(app)))
	srv := &http.Server{Handler: mux}
	addr := freeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	art := t.ArtifactDir()
	url := fmt.Sprintf("http://%s/index.html#profileURL=/profiles/profile.speedscope.json&view=sandwich", addr)
	dom := headless(t, browser, url, filepath.Join(art, "speedscope-sandwich.png"))
	// The table renders the rows in view only, sorted by self time: the
	// functions that do the work are at the top.
	for _, fn := range []string{"main.parse", "main.compute"} {
		if !strings.Contains(dom, fn) {
			t.Errorf("speedscope does not list %s", fn)
		}
	}
	url = fmt.Sprintf("http://%s/index.html#profileURL=/profiles/trace-events.json&view=sandwich", addr)
	dom = headless(t, browser, url, filepath.Join(art, "speedscope-chrome-json.png"))
	// speedscope's Trace Event importer takes the samples (stackFrames
	// and samples) when a trace has them, one profile per thread.
	for _, fn := range []string{"main.parse", "main.compute"} {
		if !strings.Contains(dom, fn) {
			t.Errorf("speedscope, from the Chrome JSON, does not list %s", fn)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a command's output goroutines and
// the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
