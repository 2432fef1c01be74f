package goroutines

import (
	"fmt"
	"os"
	"strconv"

	"github.com/rawstack/rawstack/platform/snapshot"
)

// Process lists the goroutines of the live Go process pid. Its threads are
// stopped only while [snapshot.Dump] copies their registers and memory;
// the copy is written as a core file into a temporary file (under
// /dev/shm where it exists: tmpfs keeps the untouched pages as holes),
// which delve then reads. It needs what ptrace needs (CAP_SYS_PTRACE or
// the same user under kernel.yama.ptrace_scope=0); off Linux it returns an
// error wrapping platform.ErrNotSupported.
func Process(pid int, opts *Options) (*Dump, error) {
	exeLink := "/proc/" + strconv.Itoa(pid) + "/exe"
	exe, err := os.Readlink(exeLink)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("goroutines: no process %d", pid)
		}
		return nil, fmt.Errorf("goroutines: pid %d: %w", pid, err)
	}
	if err := CheckBinary(exeLink); err != nil {
		be := err.(*BinaryError)
		be.Path, be.Pid = exe, pid
		return nil, be
	}
	im, err := snapshot.Dump(pid)
	if err != nil {
		return nil, err
	}
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	f, err := os.CreateTemp(dir, "rawstack-core-*")
	if err != nil {
		return nil, fmt.Errorf("goroutines: pid %d: core file: %w", pid, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := im.WriteCore(f); err != nil {
		return nil, fmt.Errorf("goroutines: pid %d: writing core %s: %w", pid, f.Name(), err)
	}
	im.Regions = nil // the copy now lives in the file
	d, err := read(f.Name(), exeLink, opts)
	if err != nil {
		return nil, err
	}
	d.Pid, d.Exe, d.Time, d.Stopped, d.Copied = pid, exe, im.Time, im.Stopped, im.Copied
	return d, nil
}
