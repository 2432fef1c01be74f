//go:build linux

package tracking

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// TestIDCacheSameBuildOtherPath: a build the host has at one path (its
// /usr/bin/sleep) and a container has at another (/app/sleep, a path the
// host does not have) is copied when the container's is met, though the
// host's was met first: the container's module is looked up by its own
// path or its build id, and the host's file is at neither. (The agent
// left a container's libpython unnamed while a host process ran the same
// build from pyenv.)
func TestIDCacheSameBuildOtherPath(t *testing.T) {
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		testbuild.Skip(t, "no sleep: %v", err)
	}
	sleep, _ = filepath.EvalSymlinks(sleep)
	f, err := elf.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	id := locate.BuildID(f)
	f.Close()
	if len(id) == 0 {
		testbuild.Skip(t, "%s has no build id", sleep)
	}
	host := exec.Command(sleep, "30")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	root := testbuild.ContainerRoot(t, map[string]string{sleep: "/app/sleep"}, nil, sleep)
	pid, cmd := testbuild.Container(t, root, nil, "", "/app/sleep", "30")
	defer func() { syscall.Kill(pid, syscall.SIGKILL); cmd.Wait() }() // the container's init: it ends

	dir := t.TempDir()
	c := newIDCacher(dir, 0)
	c.module(uint32(host.Process.Pid), sleep, id) // the host's: not copied
	c.module(uint32(pid), "/app/sleep", id)       // the container's
	c.close(10 * time.Second)
	if !idcache.Has(dir, id, false) {
		t.Errorf("the container's /app/sleep (build id %x, the host's %s) was not copied: %s", id, sleep, c.summary())
	}
}
