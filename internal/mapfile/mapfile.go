// Package mapfile maps a file read-only into memory, so a parser can look
// at the few pages of a large file it needs (a symbol table, an unwind
// search table) without reading and copying the rest: `rawstack snapshot`
// names frames from libc's 4 MB debug file and unwinds through a handful of
// its thousands of FDEs.
//
// A mapped file that another process truncates while it is mapped raises
// SIGBUS on access past the new end. Readers of a mapping run with
// [debug.SetPanicOnFault] and turn the fault into an error with [Guard], so
// a file replaced in place costs an error, not the process. (Package
// managers replace libraries by rename, which leaves a mapping intact.)
//
// Where the OS has no mmap here, Open reads the whole file.
package mapfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// maxSize caps the size of a file Open maps.
const maxSize = 1 << 36

// File is a read-only view of a whole file.
type File struct {
	data   []byte
	mapped bool
}

// Open maps the file at path. An empty file gives an empty Data.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("mapfile: %s: not a regular file", path)
	}
	size := st.Size()
	if size > maxSize {
		return nil, fmt.Errorf("mapfile: %s: %d bytes, over the %d cap", path, size, int64(maxSize))
	}
	m := &File{}
	if size == 0 {
		return m, nil
	}
	if m.data, m.mapped, err = mapFile(f, int(size)); err != nil {
		return nil, fmt.Errorf("mapfile: %s: %w", path, err)
	}
	return m, nil
}

// Data is the file's bytes. It stays valid until Close.
func (m *File) Data() []byte { return m.data }

// ReadAt implements io.ReaderAt over Data.
func (m *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.data)) {
		return 0, fmt.Errorf("mapfile: read at %d outside %d bytes", off, len(m.data))
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Close unmaps the file. Slices of Data must not be used after it.
func (m *File) Close() error {
	d := m.data
	m.data = nil
	if m.mapped && d != nil {
		return unmap(d)
	}
	return nil
}

// ErrFault says a mapped file could not be read: it shrank while mapped.
var ErrFault = errors.New("mapfile: fault reading a mapped file (was it truncated?)")

// Guard runs fn with faults on mapped memory turned into ErrFault rather
// than a crash.
func Guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			// A fault at a low address is a nil dereference: a bug, not
			// a mapping that shrank.
			if re, ok := r.(runtime.Error); ok {
				if f, isFault := r.(interface{ Addr() uintptr }); isFault && f.Addr() >= 1<<16 {
					err = fmt.Errorf("%w: %v", ErrFault, re)
					return
				}
			}
			panic(r)
		}
	}()
	return fn()
}
