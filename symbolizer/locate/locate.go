// Package locate finds the files that symbolize an ELF module recorded on
// another machine or at another time: the binary at its recorded path
// (after path mapping), separate debug files in build-id directories
// (DIR/.build-id/xx/rest.debug), through .gnu_debuglink (with its CRC
// checked), and from debuginfod servers (GET /buildid/HEX/debuginfo), with
// the build id of every candidate verified before it is used.
package locate

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/rawstack/rawstack/internal/elfnote"
	"github.com/rawstack/rawstack/internal/idcache"
)

// DefaultDebugDir is the system's directory of separate debug files.
const DefaultDebugDir = "/usr/lib/debug"

// Request describes the module to find.
type Request struct {
	Path    string // path of the binary on this machine (already path-mapped)
	BuildID []byte // GNU build id recorded on the host; nil if unknown
}

// Config says where to look.
type Config struct {
	// BuildIDDirs are build-id caches (package internal/idcache: the
	// files a recorder copied from processes' roots, DIR/.build-id/xx/rest
	// and rest.debug): searched for the binary by its build id when the
	// recorded path does not hold it, and first of all for its debug
	// file.
	BuildIDDirs []string
	// DebugDirs are searched before DefaultDebugDir: for debug files,
	// and for the binary by its build id (DIR/.build-id/xx/rest, the
	// cache's layout) when the recorded path does not hold it.
	DebugDirs []string
	// Debuginfod, if set, is asked when local files are missing.
	Debuginfod *Client
}

// Result names the files found. Binary is "" when the binary itself is
// not available (or is a different build); Debug is "" when the binary
// carries its own debug information or none was found.
type Result struct {
	Binary string
	Debug  string
	// Notes says what was tried and rejected, for diagnostics.
	Notes []string
}

// ErrNotFound says neither the binary nor a debug file was found.
var ErrNotFound = errors.New("locate: no file found")

// Find locates the binary and its debug file.
func Find(req Request, cfg *Config) (Result, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	var res Result
	note := func(format string, args ...any) { res.Notes = append(res.Notes, fmt.Sprintf(format, args...)) }
	var debuglink string
	var linkCRC uint32
	hasLink := false
	byID := func(dirs []string) bool {
		if len(req.BuildID) < 2 {
			return false
		}
		for _, d := range dirs {
			p := idcache.Path(d, req.BuildID, false)
			info, err := inspect(p)
			if err != nil {
				continue
			}
			if !bytes.Equal(info.buildID, req.BuildID) {
				note("%s: build id %x, want %x", p, info.buildID, req.BuildID)
				continue
			}
			res.Binary = p
			debuglink, linkCRC, hasLink = info.debuglink, info.linkCRC, info.debuglink != ""
			return info.hasDWARF
		}
		return false
	}
	if req.Path != "" {
		info, err := inspect(req.Path)
		switch {
		case err != nil:
			note("%s: %v", req.Path, err)
		case len(req.BuildID) > 0 && len(info.buildID) > 0 && !bytes.Equal(info.buildID, req.BuildID):
			note("%s: build id %x, want %x", req.Path, info.buildID, req.BuildID)
		default:
			res.Binary = req.Path
			if info.hasDWARF {
				return res, nil
			}
			debuglink, linkCRC, hasLink = info.debuglink, info.linkCRC, info.debuglink != ""
			if len(req.BuildID) == 0 {
				req.BuildID = info.buildID
			}
		}
	}
	// Not at the recorded path (a container's file, a module rebuilt
	// since): by build id in the caches, then in the debug directories.
	if res.Binary == "" && (byID(cfg.BuildIDDirs) || res.Binary == "" && byID(cfg.DebugDirs)) {
		return res, nil
	}
	dirs := append(append(append([]string(nil), cfg.BuildIDDirs...), cfg.DebugDirs...), DefaultDebugDir)
	if len(req.BuildID) >= 2 {
		h := hex.EncodeToString(req.BuildID)
		for _, d := range dirs {
			p := filepath.Join(d, ".build-id", h[:2], h[2:]+".debug")
			if ok, why := hasBuildID(p, req.BuildID); ok {
				res.Debug = p
				return res, nil
			} else if why != "" {
				note("%s: %s", p, why)
			}
		}
	}
	if hasLink {
		binDir := filepath.Dir(req.Path)
		cands := []string{filepath.Join(binDir, debuglink), filepath.Join(binDir, ".debug", debuglink)}
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, binDir, debuglink), filepath.Join(d, debuglink))
		}
		for _, p := range cands {
			if p == req.Path {
				continue
			}
			c, err := fileCRC(p)
			if err != nil {
				continue
			}
			if c != linkCRC {
				note("%s: debuglink CRC %08x, want %08x", p, c, linkCRC)
				continue
			}
			res.Debug = p
			return res, nil
		}
	}
	if cfg.Debuginfod != nil && len(req.BuildID) > 0 {
		if p, err := cfg.Debuginfod.Fetch(req.BuildID, "debuginfo"); err == nil {
			res.Debug = p
			return res, nil
		} else {
			note("debuginfod debuginfo: %v", err)
		}
		if res.Binary == "" {
			if p, err := cfg.Debuginfod.Fetch(req.BuildID, "executable"); err == nil {
				res.Binary = p
				return res, nil
			} else {
				note("debuginfod executable: %v", err)
			}
		}
	}
	if res.Binary == "" && res.Debug == "" {
		return res, fmt.Errorf("%w for %s (build id %x)", ErrNotFound, req.Path, req.BuildID)
	}
	return res, nil
}

type fileInfo struct {
	buildID   []byte
	hasDWARF  bool
	debuglink string
	linkCRC   uint32
}

// maxNoteSize caps the notes section read for a build id.
const maxNoteSize = 1 << 16

func inspect(path string) (fileInfo, error) {
	var fi fileInfo
	f, err := elf.Open(path)
	if err != nil {
		return fi, err
	}
	defer f.Close()
	fi.buildID = BuildID(f)
	if s := f.Section(".debug_info"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		fi.hasDWARF = true
	} else if s := f.Section(".zdebug_info"); s != nil {
		fi.hasDWARF = true
	}
	if s := f.Section(".gnu_debuglink"); s != nil && s.Size <= 4096 {
		if d, err := s.Data(); err == nil {
			if i := bytes.IndexByte(d, 0); i > 0 {
				fi.debuglink = string(d[:i])
				off := (i + 4) &^ 3
				if off+4 <= len(d) {
					fi.linkCRC = f.ByteOrder.Uint32(d[off:])
				}
			}
		}
	}
	return fi, nil
}

// BuildID returns the GNU build id of f, nil if it has none.
func BuildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNoteSize {
			continue
		}
		d, err := s.Data()
		if err != nil {
			continue
		}
		if id := elfnote.GNUBuildID(d, f.ByteOrder, s.Addralign); id != nil {
			return id
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSize {
			continue
		}
		d := make([]byte, p.Filesz)
		if _, err := p.ReadAt(d, 0); err != nil {
			continue
		}
		if id := elfnote.GNUBuildID(d, f.ByteOrder, p.Align); id != nil {
			return id
		}
	}
	return nil
}

// parseNotes returns the descriptor of the first NT_GNU_BUILD_ID note in
// a 4-byte-aligned note block.
func parseNotes(d []byte, bo binary.ByteOrder) []byte { return elfnote.GNUBuildID(d, bo, 4) }

func hasBuildID(path string, want []byte) (bool, string) {
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, ""
		}
		return false, err.Error()
	}
	defer f.Close()
	got := BuildID(f)
	if !bytes.Equal(got, want) {
		return false, fmt.Sprintf("build id %x, want %x", got, want)
	}
	return true, ""
}

// fileCRC is the CRC-32 (IEEE) .gnu_debuglink records for a debug file.
func fileCRC(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// NoteBuildID returns the GNU build id in a block of ELF notes (a
// PT_NOTE segment, /sys/kernel/notes), nil if there is none.
func NoteBuildID(notes []byte, bo binary.ByteOrder) []byte { return parseNotes(notes, bo) }
