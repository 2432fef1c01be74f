// Package idcache is rawstack's build-id cache: the files of modules a
// recording sampled that the host could not name later, kept by GNU
// build id. A process in its own mount namespace (a container, a systemd
// service with RootDirectory or PrivateTmp) maps files the host does not
// have at the recorded path, and a short-lived container's files are gone
// when the recording ends; the recorder copies them here, through the
// process's root, while it lives, and every symbolizing command looks here
// first.
//
// The layout is the one of debug directories and of perf's cache:
//
//	DIR/.build-id/xx/rest         the module's file (an executable or library)
//	DIR/.build-id/xx/rest.debug   its separate debug file
//
// where xxrest is the build id in hex, so DIR also serves as a debug
// directory (symbolizer.Options.DebugDirs, the Collector processor's
// debug_dirs). Files are written whole under a temporary name and
// renamed, so a reader never sees part of one; a store that finds the
// file present only touches it. The cache is capped: Prune removes the
// least recently stored or touched files first.
package idcache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultMaxBytes is the cache's default cap: 2 GiB.
const DefaultMaxBytes = 2 << 30

// Env names the variable that moves the default cache directory.
const Env = "RAWSTACK_BUILDID_CACHE"

// DefaultDir is the cache every command uses unless told otherwise:
// $RAWSTACK_BUILDID_CACHE, else rawstack/buildid in the user cache
// directory ($XDG_CACHE_HOME, else ~/.cache); "" when neither is known.
func DefaultDir() string {
	if d := os.Getenv(Env); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "rawstack", "buildid")
}

// Path returns where the file of buildID (its separate debug file when
// debug is set) is kept in dir; "" for a build id too short to name one.
func Path(dir string, buildID []byte, debug bool) string {
	if len(buildID) < 2 || dir == "" {
		return ""
	}
	h := hex.EncodeToString(buildID)
	p := filepath.Join(dir, ".build-id", h[:2], h[2:])
	if debug {
		p += ".debug"
	}
	return p
}

// Has reports whether dir holds the file of buildID, and touches it so
// that pruning keeps it as recently used.
func Has(dir string, buildID []byte, debug bool) bool {
	p := Path(dir, buildID, debug)
	if p == "" {
		return false
	}
	if _, err := os.Stat(p); err != nil {
		return false
	}
	now := time.Now()
	os.Chtimes(p, now, now)
	return true
}

// ErrTooLarge says a file is larger than the cache may hold.
var ErrTooLarge = errors.New("idcache: file larger than the cache's cap")

// Store copies src (read from its start) into dir as the file of buildID,
// unless dir has it already, and returns the bytes written (0 when it was
// there). It writes under a temporary name in the same directory and
// renames, so that a concurrent reader or a killed writer never leaves a
// partial file under the build id's name. A file over max bytes is not
// stored (ErrTooLarge); max <= 0 means DefaultMaxBytes.
func Store(dir string, buildID []byte, debug bool, src io.Reader, max int64) (int64, error) {
	p := Path(dir, buildID, debug)
	if p == "" {
		return 0, fmt.Errorf("idcache: build id %x too short", buildID)
	}
	if Has(dir, buildID, debug) {
		return 0, nil
	}
	if max <= 0 {
		max = DefaultMaxBytes
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return 0, fmt.Errorf("idcache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("idcache: %w", err)
	}
	n, err := io.Copy(tmp, io.LimitReader(src, max+1))
	if err == nil && n > max {
		err = fmt.Errorf("%w (%d bytes)", ErrTooLarge, max)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("idcache: storing %s: %w", p, err)
	}
	return n, nil
}

// entry is one cached file.
type entry struct {
	path string
	size int64
	mod  time.Time
}

// Usage returns the bytes of the files in dir's cache.
func Usage(dir string) int64 {
	var n int64
	for _, e := range entries(dir) {
		n += e.size
	}
	return n
}

func entries(dir string) []entry {
	var es []entry
	root := filepath.Join(dir, ".build-id")
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") && time.Since(info.ModTime()) < time.Hour {
			return nil // another writer's file in progress
		}
		es = append(es, entry{p, info.Size(), info.ModTime()})
		return nil
	})
	return es
}

// Prune removes files from dir's cache, least recently stored or touched
// first (temporary files an interrupted writer left first of all), until
// what remains is at most max bytes. It returns the bytes that remain.
func Prune(dir string, max int64) int64 {
	if max <= 0 {
		max = DefaultMaxBytes
	}
	es := entries(dir)
	var total int64
	for _, e := range es {
		total += e.size
	}
	sort.Slice(es, func(i, j int) bool {
		ti, tj := strings.HasPrefix(filepath.Base(es[i].path), ".tmp-"), strings.HasPrefix(filepath.Base(es[j].path), ".tmp-")
		if ti != tj {
			return ti
		}
		return es[i].mod.Before(es[j].mod)
	})
	for _, e := range es {
		if total <= max && !strings.HasPrefix(filepath.Base(e.path), ".tmp-") {
			break
		}
		if os.Remove(e.path) == nil {
			total -= e.size
		}
	}
	return total
}
