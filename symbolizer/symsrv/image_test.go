package symsrv

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// TestLocateImage fetches a PE image by name and code id from a symbol
// server (plain and cabinet-compressed), finds it in a local store and
// flat in a debug directory, and rejects another build of the same name.
func TestLocateImage(t *testing.T) {
	b := buildHello(t, 1)
	other := buildHello(t, 2)
	img, err := pe.Open(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	id := img.CodeID()
	img.Close()
	oimg, err := pe.Open(other.exe)
	if err != nil {
		t.Fatal(err)
	}
	if oid := oimg.CodeID(); oid == id {
		t.Fatalf("both builds have code id %s: they are one build as far as a store can tell", id)
	}
	oimg.Close()
	data, err := os.ReadFile(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"exe", "ex_"} {
		t.Run("server-"+mode, func(t *testing.T) {
			files := map[string][]byte{}
			if mode == "exe" {
				files["/prog.exe/"+id+"/prog.exe"] = data
			} else {
				files["/prog.exe/"+id+"/prog.ex_"] = makeCab(t, b.exe, "prog.exe")
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if d, ok := files[r.URL.Path]; ok {
					w.Write(d)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			cache := t.TempDir()
			p, err := LocateImage(context.Background(), "prog.exe", id, &Options{SymbolPath: "SRV*" + cache + "*" + srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(cache, "prog.exe", id, "prog.exe"); p != want {
				t.Errorf("downloaded to %q, want %q", p, want)
			}
		})
	}
	t.Run("debug-dir", func(t *testing.T) {
		dir := t.TempDir()
		// The other build under the flat name, the wanted one in store layout.
		o, _ := os.ReadFile(other.exe)
		os.WriteFile(filepath.Join(dir, "prog.exe"), o, 0o644)
		store := filepath.Join(t.TempDir())
		os.MkdirAll(filepath.Join(store, "prog.exe", id), 0o755)
		os.WriteFile(filepath.Join(store, "prog.exe", id, "prog.exe"), data, 0o644)
		p, err := LocateImage(context.Background(), "prog.exe", id, &Options{DebugDirs: []string{dir, store}})
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(store, "prog.exe", id, "prog.exe"); p != want {
			t.Errorf("found %q, want %q (the flat file is another build)", p, want)
		}
		if _, err := LocateImage(context.Background(), "prog.exe", id, &Options{DebugDirs: []string{dir}}); !errors.Is(err, ErrImageNotFound) {
			t.Errorf("only another build around: err %v, want ErrImageNotFound", err)
		}
	})
}
