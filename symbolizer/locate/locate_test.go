package locate

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/internal/fixture"
)

// split builds the C corpus, splits off its debug information and
// returns (binary with debuglink, debug file, stripped binary without
// debuglink, build id).
func split(t *testing.T) (string, string, string, []byte) {
	dir := fixture.Build(t, []string{"../elfsrc/testdata/prog.c"}, []string{"gcc", "objcopy"},
		"gcc -O2 -g -Wl,--build-id -o prog prog.c && objcopy --only-keep-debug prog prog.debug && "+
			"objcopy --strip-debug --add-gnu-debuglink=prog.debug prog prog.linked && objcopy --strip-debug prog prog.bare")
	f, err := elf.Open(filepath.Join(dir, "prog"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id := BuildID(f)
	if len(id) != 20 {
		t.Fatalf("build id %x, want 20 bytes", id)
	}
	return filepath.Join(dir, "prog.linked"), filepath.Join(dir, "prog.debug"), filepath.Join(dir, "prog.bare"), id
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(to), 0o755)
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindBuildIDDir(t *testing.T) {
	_, dbg, bare, id := split(t)
	dd := t.TempDir()
	h := hex.EncodeToString(id)
	want := filepath.Join(dd, ".build-id", h[:2], h[2:]+".debug")
	copyFile(t, dbg, want)
	res, err := Find(Request{Path: bare, BuildID: id}, &Config{DebugDirs: []string{dd}})
	if err != nil || res.Binary != bare || res.Debug != want {
		t.Fatalf("Find = %+v, %v; want binary %s, debug %s", res, err, bare, want)
	}
	// A binary whose build id differs from the recorded one is not used.
	other := append([]byte{}, id...)
	other[0] ^= 0xff
	res, err = Find(Request{Path: bare, BuildID: other}, &Config{DebugDirs: []string{dd}})
	if err == nil || res.Binary != "" {
		t.Errorf("mismatched build id: Find = %+v, %v; want not found", res, err)
	}
}

func TestFindDebuglinkCRC(t *testing.T) {
	linked, dbg, _, id := split(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog.linked")
	copyFile(t, linked, bin)
	copyFile(t, dbg, filepath.Join(dir, ".debug", "prog.debug"))
	res, err := Find(Request{Path: bin}, &Config{DebugDirs: []string{t.TempDir()}})
	if err != nil || res.Debug != filepath.Join(dir, ".debug", "prog.debug") {
		t.Fatalf("debuglink: Find = %+v, %v", res, err)
	}
	// Corrupt the debug file: its CRC no longer matches the link.
	b, _ := os.ReadFile(dbg)
	b[len(b)-1] ^= 1
	os.WriteFile(filepath.Join(dir, ".debug", "prog.debug"), b, 0o644)
	res, _ = Find(Request{Path: bin}, &Config{DebugDirs: []string{t.TempDir()}})
	if res.Debug != "" || !strings.Contains(strings.Join(res.Notes, "\n"), "CRC") {
		t.Errorf("corrupt debug file accepted: %+v", res)
	}
	_ = id
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestDebuginfodServer runs Debian's debuginfod on loopback over a
// directory holding the debug file, and fetches it by build id.
func TestDebuginfodServer(t *testing.T) {
	server := testbuild.Need(t, "debuginfod", "the loopback debuginfod server")
	_, dbg, bare, id := split(t)
	serve := t.TempDir()
	copyFile(t, dbg, filepath.Join(serve, "prog.debug"))
	port := freePort(t)
	cmd := exec.Command(server, "-F", serve, "-p", fmt.Sprint(port), "-d", filepath.Join(t.TempDir(), "db.sqlite"), "-t", "1", "-c", "1")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	h := hex.EncodeToString(id)
	// Wait for the scan: the server answers 404 until it has indexed the file.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/buildid/" + h + "/debuginfo")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("debuginfod did not serve %s within 60s; log:\n%s", h, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	cache := t.TempDir()
	c := &Client{URLs: []string{url}, CacheDir: cache, Timeout: 10 * time.Second}
	res, err := Find(Request{Path: bare, BuildID: id}, &Config{DebugDirs: []string{t.TempDir()}, Debuginfod: c})
	if err != nil || res.Debug == "" || !strings.HasPrefix(res.Debug, cache) {
		t.Fatalf("Find through debuginfod = %+v, %v", res, err)
	}
	if ok, why := hasBuildID(res.Debug, id); !ok {
		t.Fatalf("downloaded file: %s", why)
	}
	// The cache answers once the server is gone.
	cmd.Process.Kill()
	cmd.Wait()
	p, err := c.Fetch(id, "debuginfo")
	if err != nil || p != res.Debug {
		t.Errorf("cached fetch = %q, %v; want %q", p, err, res.Debug)
	}
	// Unknown build ids fail.
	c2 := &Client{URLs: []string{url}, CacheDir: t.TempDir(), Timeout: 2 * time.Second}
	if _, err := c2.Fetch([]byte{1, 2, 3, 4}, "debuginfo"); err == nil {
		t.Error("fetch from a stopped server succeeded")
	}
}

func TestDebuginfodVerifiesAndTimesOut(t *testing.T) {
	_, dbg, _, id := split(t)
	wrong, _ := os.ReadFile(dbg)
	slow := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			select {
			case <-slow:
			case <-time.After(5 * time.Second):
			}
		case strings.HasPrefix(r.URL.Path, "/buildid/"):
			w.Write(wrong) // a valid ELF file, with another build id than asked
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(slow) // runs first: releases the slow handler so Close returns
	other := append([]byte{}, id...)
	other[1] ^= 0x55
	c := &Client{URLs: []string{srv.URL}, CacheDir: t.TempDir(), Timeout: 2 * time.Second}
	if _, err := c.Fetch(other, "debuginfo"); err == nil || !strings.Contains(err.Error(), "build id") {
		t.Errorf("file with the wrong build id: err = %v, want a build id mismatch", err)
	}
	if p, err := c.Fetch(id, "debuginfo"); err != nil {
		t.Errorf("right build id: %v", err)
	} else if ok, _ := hasBuildID(p, id); !ok {
		t.Errorf("cached file %s lacks the build id", p)
	}
	c.URLs = []string{srv.URL + "/slow"}
	c.CacheDir = t.TempDir()
	c.Timeout = 300 * time.Millisecond
	start := time.Now()
	if _, err := c.Fetch(id, "debuginfo"); err == nil {
		t.Error("slow server: no error")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout of 300ms took %v", d)
	}
}

func TestNewClientFromEnv(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "")
	if NewClientFromEnv() != nil {
		t.Error("client without DEBUGINFOD_URLS")
	}
	t.Setenv("DEBUGINFOD_URLS", "http://a.example http://b.example")
	t.Setenv("DEBUGINFOD_TIMEOUT", "7")
	c := NewClientFromEnv()
	if c == nil || len(c.URLs) != 2 || c.Timeout != 7*time.Second {
		t.Errorf("client %+v", c)
	}
}

func FuzzParseNotes(f *testing.F) {
	note := []byte{4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 3, 4}
	f.Add(note)
	f.Fuzz(func(t *testing.T, d []byte) {
		id := parseNotes(d, binary.LittleEndian)
		if len(id) > len(d) {
			t.Fatalf("build id longer than the notes")
		}
	})
}

// TestFindBuildIDCache finds a module whose recorded path the host does
// not have (a container's, gone) by its build id in a build-id cache
// (internal/idcache's layout), with its debug file there; in a debug
// directory too (the Collector processor's debug_dirs given a host's
// cache); and never a cached file whose build id is another.
func TestFindBuildIDCache(t *testing.T) {
	_, dbg, bare, id := split(t)
	cache := t.TempDir()
	h := hex.EncodeToString(id)
	bin := filepath.Join(cache, ".build-id", h[:2], h[2:])
	copyFile(t, bare, bin)
	copyFile(t, dbg, bin+".debug")
	gone := "/app/no/such/prog"
	for _, cfg := range []*Config{{BuildIDDirs: []string{cache}}, {DebugDirs: []string{cache}}} {
		res, err := Find(Request{Path: gone, BuildID: id}, cfg)
		if err != nil || res.Binary != bin || res.Debug != bin+".debug" {
			t.Errorf("%+v: %+v, %v; want binary %s and its debug file", cfg, res, err, bin)
		}
	}
	// The recorded path, when it holds the build id, comes first.
	res, err := Find(Request{Path: bare, BuildID: id}, &Config{BuildIDDirs: []string{cache}})
	if err != nil || res.Binary != bare || res.Debug != bin+".debug" {
		t.Errorf("recorded path present: %+v, %v", res, err)
	}
	// A cached file of another build (a collision, a corrupted cache) is
	// refused.
	other := append([]byte{}, id...)
	other[len(other)-1] ^= 1
	oh := hex.EncodeToString(other)
	copyFile(t, bare, filepath.Join(cache, ".build-id", oh[:2], oh[2:]))
	if res, err := Find(Request{Path: gone, BuildID: other}, &Config{BuildIDDirs: []string{cache}}); err == nil || res.Binary != "" {
		t.Errorf("a cached file of build id %x taken for %x: %+v", id, other, res)
	}
}
