package otlp

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// AttrBuildIDHTLHash is the semantic conventions' deterministic build id
// of a file, which the OpenTelemetry eBPF profiler writes for every
// mapping: see [HTLHash].
const AttrBuildIDHTLHash = "process.executable.build_id.htlhash"

// htlPage is how much of each end of a file the htlhash reads.
const htlPage = 4096

// HTLHash computes process.executable.build_id.htlhash of the size bytes
// of r, as the OpenTelemetry profiles specification ("Mappings") defines
// it: SHA-256 over the first 4096 bytes of the file, then its last 4096
// bytes (the two overlap in a file shorter than 8192 bytes, and neither is
// padded in a file shorter than 4096), then the file's length as a
// big-endian uint64; the first 16 bytes of the digest, in lower-case hex.
func HTLHash(r io.ReaderAt, size int64) (string, error) {
	if size < 0 {
		return "", fmt.Errorf("otlp: htlhash: negative size %d", size)
	}
	n := min(size, htlPage)
	buf := make([]byte, 2*n+8)
	if _, err := r.ReadAt(buf[:n], 0); err != nil && !(err == io.EOF && n == 0) {
		return "", fmt.Errorf("otlp: htlhash: reading the first %d bytes: %w", n, err)
	}
	if _, err := r.ReadAt(buf[n:2*n], size-n); err != nil && !(err == io.EOF && n == 0) {
		return "", fmt.Errorf("otlp: htlhash: reading the last %d bytes at offset %d: %w", n, size-n, err)
	}
	binary.BigEndian.PutUint64(buf[2*n:], uint64(size))
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:16]), nil
}

// HTLHashFile computes the htlhash of the regular file at path.
func HTLHashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("otlp: htlhash: %s is not a regular file", path)
	}
	h, err := HTLHash(f, st.Size())
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// ParseHTLHash reads an htlhash attribute value: 32 hex digits, either
// case.
func ParseHTLHash(s string) (string, bool) {
	if len(s) != 32 {
		return "", false
	}
	s = strings.ToLower(s)
	if _, err := hex.DecodeString(s); err != nil {
		return "", false
	}
	return s, true
}

// fileHash returns the htlhash of module m's file, "" when the file is
// not available here or is not the recorded build: it is computed where
// the trace was recorded (the Exporter on the host, convert on the same
// machine), from the file at its recorded path — inside the process's
// mount namespace (/proc/PID/root) first on Linux, so a container's files
// are hashed, not the host's. A file whose GNU build id or PE code id
// differs from the recorded one is not hashed.
func (b *Builder) fileHash(m *symbolizer.Module) string {
	if b.opts.NoFileHash || m.Path == "" {
		return ""
	}
	if h, ok := b.hashes[m]; ok {
		return h
	}
	// Every process that maps a library has its own Module: with a build
	// id, one hash serves them all (a host that starts fifty processes a
	// second opened libc twice for each).
	idKey := ""
	if len(m.BuildID) > 0 && m.Kind == format.ModuleELF {
		idKey = string(m.BuildID)
		if h, ok := b.idHashes[idKey]; ok {
			b.setHash(m, h)
			return h
		}
	}
	h := ""
	switch m.Kind {
	case format.ModuleELF, format.ModuleUnknown, format.ModulePE:
		var cands []string
		if b.hdr.OS == format.OSLinux && strings.HasPrefix(m.Path, "/") && m.Pid != 0 {
			cands = append(cands, "/proc/"+strconv.FormatUint(uint64(m.Pid), 10)+"/root"+m.Path)
		}
		cands = append(cands, m.Path)
		for _, p := range cands {
			if !sameBuild(p, m) {
				continue
			}
			if s, err := HTLHashFile(p); err == nil {
				h = s
				break
			}
		}
	}
	if idKey != "" && h != "" {
		if b.idHashes == nil || len(b.idHashes) >= maxIDHashes {
			b.idHashes = map[string]string{}
		}
		b.idHashes[idKey] = h
	}
	b.setHash(m, h)
	return h
}

// maxIDHashes bounds the hashes kept by build id.
const maxIDHashes = 4096

func (b *Builder) setHash(m *symbolizer.Module, h string) {
	if b.hashes == nil {
		b.hashes = map[*symbolizer.Module]string{}
	}
	b.hashes[m] = h
}

// sameBuild reports whether the file at p can be the recorded module: it
// exists, and its GNU build id or PE code id, where the trace recorded
// one, is the recorded one.
func sameBuild(p string, m *symbolizer.Module) bool {
	switch {
	case m.Kind == format.ModulePE && (m.TimeDateStamp != 0 || m.SizeOfImage != 0):
		img, err := pe.Open(p)
		if err != nil {
			return false
		}
		defer img.Close()
		return img.TimeDateStamp == m.TimeDateStamp && img.SizeOfImage == m.SizeOfImage
	case len(m.BuildID) > 0:
		f, err := elf.Open(p)
		if err != nil {
			return false
		}
		defer f.Close()
		return bytes.Equal(locate.BuildID(f), m.BuildID)
	}
	_, err := os.Stat(p)
	return err == nil
}
