// Package symsrv finds the PDB of a PE image, the way debuggers do: next to
// the image, in --debug-dir directories, at the path the image's CodeView
// record names, and along a symbol path in _NT_SYMBOL_PATH syntax,
// including symbol servers ("SRV*cache*https://server") and symstore
// directories (name.pdb/GUIDAGE/name.pdb, with file.ptr redirects and
// cabinet-compressed name.pd_ files). Downloads land in the cache in the
// same layout, so the cache is itself a symbol store.
//
// Identity is all a store goes by: a PDB is the one whose GUID and age
// match the image's CodeView record, and an image ([LocateImage]) the one
// whose code id (TimeDateStamp and SizeOfImage) matches. Two images with
// the same code id are the same build as far as a store can tell, even
// when their code differs.
//
// [OpenPE] puts it together: it returns a symbolizer.Source for an image
// path, backed by the matching PDB, or by the export table when no PDB is
// found.
//
//	src, err := symsrv.OpenPE("prog.exe", &symsrv.Options{SymbolPath: os.Getenv("_NT_SYMBOL_PATH")})
//	frames, err := src.Symbolize(rva, nil)
package symsrv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer/fetch"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// ErrNotFound says no matching PDB was found anywhere on the search path.
var ErrNotFound = errors.New("symsrv: no matching PDB found")

// Options say where to look.
type Options struct {
	// DebugDirs are searched flat (dir/name.pdb) and as symbol stores.
	DebugDirs []string
	// SymbolPath is a symbol path in _NT_SYMBOL_PATH syntax.
	SymbolPath string
	// CacheDir is the downstream store for "SRV*" elements that name no
	// cache ("SRV*https://server" or "SRV**https://server"). Default: the
	// user cache directory's rawstack/symbols.
	CacheDir string
	// Getter downloads from symbol servers, each request bounded by 60
	// seconds; nil means fetch.Default(), the getter the program
	// registered (import github.com/rawstack/rawstack/symbolizer/fetch/httpfetch
	// for net/http; the rawstack CLI registers its rawstack-fetch
	// companion).
	Getter fetch.Getter
	// Logf, when set, receives one line per place searched.
	Logf func(format string, args ...any)
	// NoRecordedPath leaves out the PDB path the image recorded: a
	// service symbolizing for other machines (a collector) finds PDBs
	// by identity in its stores only, and a recorded name must not be
	// opened relative to its working directory.
	NoRecordedPath bool
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// maxDownload caps the size of a file fetched from a symbol server.
const maxDownload = 8 << 30

// element is one parsed symbol path entry: a list of stores searched in
// order; a hit in a later store is copied into the earlier local ones.
type element struct {
	stores []string // local directories or http(s) URLs
	flat   bool     // a plain directory: also search dir/name.pdb
}

// parseSymbolPath parses _NT_SYMBOL_PATH syntax: entries separated by ';',
// each "srv*store*store..." (also "symsrv*symsrv.dll*store..."),
// "cache*dir" (a cache for the entries after it), or a directory.
func parseSymbolPath(sp, defaultCache string) []element {
	var els []element
	var caches []string
	for _, e := range strings.Split(sp, ";") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		parts := strings.Split(e, "*")
		switch strings.ToLower(parts[0]) {
		case "srv", "symsrv":
			if strings.ToLower(parts[0]) == "symsrv" && len(parts) > 1 {
				parts = parts[1:] // the DLL name
			}
			var stores []string
			for i, s := range parts[1:] {
				if s == "" {
					if i == 0 {
						stores = append(stores, defaultCache)
					}
					continue
				}
				stores = append(stores, s)
			}
			if len(stores) == 1 && isURL(stores[0]) {
				stores = append([]string{defaultCache}, stores...)
			}
			els = append(els, element{stores: append(append([]string{}, caches...), stores...)})
		case "cache":
			dir := defaultCache
			if len(parts) > 1 && parts[1] != "" {
				dir = parts[1]
			}
			caches = append(caches, dir)
		default:
			els = append(els, element{stores: append(append([]string{}, caches...), e), flat: true})
		}
	}
	return els
}

func isURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// Key is what a PDB is looked up by.
type Key struct {
	Name string // PDB file name, e.g. "prog.pdb"
	ID   string // GUID and age, e.g. "9CFFF3223893..."+"1"
	GUID pe.GUID
	Age  uint32
}

// KeyOf returns the lookup key of an image's CodeView record.
func KeyOf(cv *pe.CodeView) Key {
	return Key{Name: cv.PDBName(), ID: cv.DebugID(), GUID: cv.GUID, Age: cv.Age}
}

// Locate finds the PDB of the image at imagePath whose CodeView record is
// cv and returns its local path (downloading it into a cache when it comes
// from a symbol server).
func Locate(ctx context.Context, imagePath string, cv *pe.CodeView, o *Options) (string, error) {
	if o == nil {
		o = &Options{}
	}
	k := KeyOf(cv)
	var tried []string
	try := func(p string) bool {
		tried = append(tried, p)
		ok := matches(p, k)
		o.logf("symsrv: %s: match=%v", p, ok)
		return ok
	}
	// Next to the image, then the debug dirs, then the recorded path.
	if imagePath != "" {
		if p := filepath.Join(filepath.Dir(imagePath), k.Name); try(p) {
			return p, nil
		}
	}
	for _, d := range o.DebugDirs {
		if p := filepath.Join(d, k.Name); try(p) {
			return p, nil
		}
		if p, ok := findInStore(d, k, try); ok {
			return p, nil
		}
	}
	if cv.Path != "" && !o.NoRecordedPath && try(filepath.FromSlash(strings.ReplaceAll(cv.Path, `\`, "/"))) {
		return cv.Path, nil
	}
	cache := o.CacheDir
	if cache == "" {
		if uc, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(uc, "rawstack", "symbols")
		} else {
			cache = filepath.Join(os.TempDir(), "rawstack-symbols")
		}
	}
	for _, el := range parseSymbolPath(o.SymbolPath, cache) {
		if el.flat {
			if p := filepath.Join(el.stores[len(el.stores)-1], k.Name); try(p) {
				return p, nil
			}
		}
		for i, s := range el.stores {
			var p string
			var ok bool
			if isURL(s) {
				var err error
				p, ok, err = download(ctx, o, s, k, el.stores[:i], try)
				if err != nil {
					o.logf("symsrv: %s: %v", s, err)
					continue
				}
			} else {
				p, ok = findInStore(s, k, try)
				if ok && i > 0 {
					p = copyToCaches(p, k, el.stores[:i], o)
				}
			}
			if ok {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w for %s (%s %s); searched %d places", ErrNotFound, imagePath, k.Name, k.ID, len(tried))
}

// storePath is where a store keeps a file of k.
func storePath(store string, k Key, file string) string {
	return filepath.Join(store, k.Name, k.ID, file)
}

// findInStore looks for k in a local symstore-layout directory: the file,
// its compressed form, or a file.ptr redirect.
func findInStore(store string, k Key, try func(string) bool) (string, bool) {
	if p := storePath(store, k, k.Name); try(p) {
		return p, true
	}
	// Stores made on Windows are case-insensitive; on other systems try
	// the lower-case layout too (symstore's usual spelling).
	if lk := (Key{Name: strings.ToLower(k.Name), ID: k.ID, GUID: k.GUID, Age: k.Age}); lk.Name != k.Name {
		if p, ok := findInStore(store, lk, try); ok {
			return p, true
		}
	}
	if cp := storePath(store, k, compressedName(k.Name)); fileExists(cp) {
		out := storePath(store, k, k.Name)
		if err := expandCab(cp, out); err == nil && try(out) {
			return out, true
		}
	}
	if b, err := os.ReadFile(storePath(store, k, "file.ptr")); err == nil {
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "PATH:") {
			p := strings.TrimPrefix(s, "PATH:")
			if try(p) {
				return p, true
			}
		}
	}
	return "", false
}

// compressedName is a file name with its last character replaced by '_'.
func compressedName(name string) string {
	if name == "" {
		return name
	}
	return name[:len(name)-1] + "_"
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// matches says whether p is a PDB with k's GUID and age.
func matches(p string, k Key) bool {
	if !fileExists(p) {
		return false
	}
	f, err := pdb.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return [16]byte(f.GUID) == [16]byte(k.GUID) && (f.Age == k.Age || f.DBIAge == k.Age)
}

func expandCab(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return writeAtomic(dst, func(w io.Writer) error { return extractCab(f, st.Size(), w) })
}

// writeAtomic writes a file through a temporary name so that readers never
// see a partial file.
func writeAtomic(dst string, fill func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// copyToCaches copies a file found in a later store into the local caches
// before it and returns the first cache's copy.
func copyToCaches(src string, k Key, caches []string, o *Options) string {
	first := src
	for i := len(caches) - 1; i >= 0; i-- {
		c := caches[i]
		if isURL(c) {
			continue
		}
		dst := storePath(c, k, k.Name)
		err := writeAtomic(dst, func(w io.Writer) error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(w, f)
			return err
		})
		if err != nil {
			o.logf("symsrv: caching %s in %s: %v", src, c, err)
			continue
		}
		first = dst
	}
	return first
}

// download asks a symbol server for k: name.pdb, then name.pd_ (a cabinet),
// then file.ptr. What it gets lands in the first local cache before it.
func download(ctx context.Context, o *Options, server string, k Key, caches []string, try func(string) bool) (string, bool, error) {
	var cache string
	for _, c := range caches {
		if !isURL(c) {
			cache = c
			break
		}
	}
	if cache == "" {
		return "", false, errors.New("no local cache to download into")
	}
	base := strings.TrimRight(server, "/")
	dst := storePath(cache, k, k.Name)
	// get downloads file of k into to, through a temporary file so that
	// readers never see a partial one.
	get := func(file, to string) (bool, error) {
		url := base + "/" + k.Name + "/" + k.ID + "/" + file
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return false, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(to), ".tmp-*")
		if err != nil {
			return false, err
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		err = fetch.Get(ctx, o.Getter, &fetch.Request{URL: url, UserAgent: "Microsoft-Symbol-Server/10.0.0.0 rawstack",
			MaxSize: maxDownload, Timeout: 60 * time.Second}, tmp.Name())
		if errors.Is(err, fetch.ErrNotFound) {
			o.logf("symsrv: GET %s: not found", url)
			return false, nil
		}
		if err != nil {
			return false, err
		}
		o.logf("symsrv: GET %s: ok", url)
		return true, os.Rename(tmp.Name(), to)
	}
	if ok, err := get(k.Name, dst); err != nil {
		return "", false, err
	} else if ok && try(dst) {
		return dst, true, nil
	}
	cdst := storePath(cache, k, compressedName(k.Name))
	if ok, err := get(compressedName(k.Name), cdst); err != nil {
		return "", false, err
	} else if ok {
		if err := expandCab(cdst, dst); err != nil {
			return "", false, err
		}
		os.Remove(cdst)
		if try(dst) {
			return dst, true, nil
		}
	}
	ptr := storePath(cache, k, "file.ptr")
	if ok, err := get("file.ptr", ptr); err != nil {
		return "", false, err
	} else if ok {
		b, err := os.ReadFile(ptr)
		os.Remove(ptr) // a redirect, not a file of the store
		if err != nil {
			return "", false, err
		}
		s := strings.TrimSpace(string(b))
		if p, found := strings.CutPrefix(s, "PATH:"); found && try(p) {
			return p, true, nil
		}
		o.logf("symsrv: %s: file.ptr says %q", server, s)
	}
	return "", false, nil
}
