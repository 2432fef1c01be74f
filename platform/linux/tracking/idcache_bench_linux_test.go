//go:build linux

package tracking

import (
	"os"
	"testing"

	"debug/elf"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// BenchmarkIDCacheDecide is what the build-id cache costs a module the
// host has at its recorded path (every module of a process in the host's
// mount namespace): stats of the file through the process's root and on
// the host, once per build id a recording meets. (go test -bench
// IDCacheDecide ./platform/linux/tracking)
func BenchmarkIDCacheDecide(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		b.Fatal(err)
	}
	id := locate.BuildID(f)
	f.Close()
	if len(id) == 0 {
		b.Skip("the test binary has no GNU build id")
	}
	c := &idCacher{dir: b.TempDir(), seen: map[string]bool{}}
	pid := uint32(os.Getpid())
	for b.Loop() {
		clear(c.seen)
		c.module(pid, exe, id)
	}
}
