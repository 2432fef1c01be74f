package arm64vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Archive writes an initramfs: a cpio archive in the "newc" format the
// kernel unpacks into its root file system (Documentation/
// driver-api/early-userspace/buffer-format.rst), uncompressed, so that
// the emulated kernel spends no time inflating it. Parent directories
// are added as needed, each once.
type Archive struct {
	w    *bufio.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

// NewArchive starts an archive written to w; Close ends it.
func NewArchive(w io.Writer) *Archive {
	return &Archive{w: bufio.NewWriterSize(w, 1<<20), ino: 1, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func (a *Archive) header(name string, mode, size uint32) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	a.ino++
	// c_magic, then 13 fields of 8 hex digits: ino, mode, uid, gid,
	// nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	// namesize (with its NUL), check.
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		a.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	a.write([]byte(hdr))
	a.write([]byte(name))
	a.write([]byte{0})
	a.pad(len(hdr) + len(name) + 1)
}

func (a *Archive) write(b []byte) {
	if a.err == nil {
		_, a.err = a.w.Write(b)
	}
}

func (a *Archive) pad(n int) {
	if r := n % 4; r != 0 {
		a.write(make([]byte, 4-r))
	}
}

// Dir adds directory name and its parents.
func (a *Archive) Dir(name string) {
	name = strings.TrimPrefix(path.Clean(name), "/")
	if a.dirs[name] {
		return
	}
	a.Dir(path.Dir(name))
	a.dirs[name] = true
	a.header(name, modeDir|0o755, 0)
}

// Bytes adds a file of contents b with permission bits perm.
func (a *Archive) Bytes(name string, perm os.FileMode, b []byte) {
	a.Dir(path.Dir(name))
	a.header(name, modeFile|uint32(perm.Perm()), uint32(len(b)))
	a.write(b)
	a.pad(len(b))
}

// File adds the host file src (symbolic links followed) as name.
func (a *Archive) File(name, src string) {
	if a.err != nil {
		return
	}
	f, err := os.Open(src)
	if err != nil {
		a.err = err
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.err = err
		return
	}
	if st.Size() >= 1<<32 {
		a.err = fmt.Errorf("%s: %d bytes, too large for a cpio entry", src, st.Size())
		return
	}
	a.Dir(path.Dir(name))
	a.header(name, modeFile|uint32(st.Mode().Perm()), uint32(st.Size()))
	if a.err != nil {
		return
	}
	n, err := io.Copy(a.w, f)
	if err == nil && n != st.Size() {
		err = fmt.Errorf("%s changed size while archived", src)
	}
	if err != nil {
		a.err = err
		return
	}
	a.pad(int(n))
}

// Symlink adds a symbolic link name pointing at target.
func (a *Archive) Symlink(name, target string) {
	a.Dir(path.Dir(name))
	a.header(name, modeLink|0o777, uint32(len(target)))
	a.write([]byte(target))
	a.pad(len(target))
}

// Close writes the trailer and flushes; it returns the first error.
func (a *Archive) Close() error {
	a.header("TRAILER!!!", 0, 0)
	if a.err == nil {
		a.err = a.w.Flush()
	}
	return a.err
}
