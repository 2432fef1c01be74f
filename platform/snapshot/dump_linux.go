//go:build linux

package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/internal/unix"
)

// Dump copies the state of the live process pid that a debugger needs to
// read its data structures offline: every thread's registers and every
// private mapping's memory (heap, stacks, the executable's writable data),
// and returns it as an [Image]. The threads are stopped as [Process] stops
// them (PTRACE_SEIZE + PTRACE_INTERRUPT, detached on every path) only
// while the registers are read and the memory copied; pages the process
// never touched (per /proc/PID/pagemap) are not copied, and read-only file
// mappings are left to be read from their files. Image.Stopped says how
// long the threads were stopped.
//
// Dump is what `rawstack snapshot --goroutines` hands to delve's core-file
// reader: interpreting the Go runtime's structures takes far longer than
// copying them, and the target runs again as soon as the copy is done.
func Dump(pid int) (*Image, error) {
	if err := checkTarget("dump", pid); err != nil {
		return nil, err
	}
	dir := "/proc/" + strconv.Itoa(pid)
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("snapshot: no process %d", pid)
		}
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	im := &Image{Pid: pid, Arch: hostArch}
	im.Auxv, _ = os.ReadFile(dir + "/auxv")
	pagemap, err := os.Open(dir + "/pagemap")
	if err != nil {
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	defer pagemap.Close()
	arena := prefault(dir, pagemap)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := &stopper{pid: pid, dir: dir}
	defer st.release()
	start := time.Now()
	if err := st.stopAll(); err != nil {
		return nil, err
	}
	im.Time = unix.Monotonic()
	for _, tr := range st.tracees {
		if tr.state != stateStopped || tr.gregs == nil {
			continue
		}
		t := ImageThread{Tid: tr.tid, Gregs: tr.gregs}
		if tr.tid == pid { // the main thread first: readers start there
			im.Threads = append([]ImageThread{t}, im.Threads...)
		} else {
			im.Threads = append(im.Threads, t)
		}
	}
	if len(im.Threads) == 0 {
		return nil, fmt.Errorf("snapshot: pid %d: no thread could be stopped", pid)
	}
	// The maps are read while the threads are stopped, so the memory
	// copied matches them.
	mapsText, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	maps, err := parseMaps(mapsText)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s/maps: %w", dir, err)
	}
	lm := newLiveMem(pid, maps)
	defer lm.close()
	var pm []byte
	for _, m := range maps {
		if m.Path == exe {
			im.Files = append(im.Files, FileMapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path})
		}
		if !dumped(&m) {
			continue
		}
		r := Region{Start: m.Start, End: m.End, Perms: m.Perms}
		anon := m.Path == "" || strings.HasPrefix(m.Path, "[")
		pages := int((m.End - m.Start) / pageSize)
		var present func(i int) bool
		if anon {
			if cap(pm) < pages*8 {
				pm = make([]byte, pages*8)
			}
			pm = pm[:pages*8]
			n, _ := pagemap.ReadAt(pm, int64(m.Start/pageSize*8))
			pm = pm[:n-n%8]
			present = func(i int) bool {
				// Bit 63: present; bit 62: swapped.
				return i*8 < len(pm) && binary.LittleEndian.Uint64(pm[i*8:])>>62 != 0
			}
		} else {
			present = func(int) bool { return true }
		}
		var iov []unix.RemoteIovec
		total := 0
		for i := 0; i < pages; {
			if !present(i) {
				i++
				continue
			}
			j := i + 1
			for j < pages && present(j) {
				j++
			}
			iov = append(iov, unix.RemoteIovec{Base: uintptr(m.Start + uint64(i)*pageSize), Len: (j - i) * pageSize})
			total += (j - i) * pageSize
			i = j
		}
		var buf []byte
		if total <= len(arena) {
			buf, arena = arena[:total:total], arena[total:]
		} else {
			buf = make([]byte, total)
		}
		pos, got := 0, 0
		for len(iov) > 0 {
			k := min(len(iov), 1024) // IOV_MAX
			want := 0
			for _, v := range iov[:k] {
				want += v.Len
			}
			n := lm.read(buf[pos:pos+want], iov[:k])
			used := 0
			for _, v := range iov[:k] { // keep the runs read whole
				if n < v.Len {
					break
				}
				r.Runs = append(r.Runs, Run{Addr: uint64(v.Base), Data: buf[pos : pos+v.Len : pos+v.Len]})
				pos, got, n = pos+v.Len, got+v.Len, n-v.Len
				used++
			}
			if used < k { // iov[used] failed: leave it out, go on
				pos += iov[used].Len
				used++
			}
			iov = iov[used:]
		}
		im.Copied += int64(got)
		im.Regions = append(im.Regions, r)
	}
	st.release()
	im.Stopped = time.Since(start)
	return im, nil
}

// prefault returns memory for the copy, sized from the touched pages the
// process has now (plus a quarter and 1 MiB for growth) and written once
// per page, so the page faults and zeroing of fresh memory happen before
// the target is stopped, not while it is.
func prefault(dir string, pagemap *os.File) []byte {
	text, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return nil
	}
	maps, err := parseMaps(text)
	if err != nil {
		return nil
	}
	var total uint64
	var pm []byte
	for _, m := range maps {
		if !dumped(&m) {
			continue
		}
		if m.Path != "" && !strings.HasPrefix(m.Path, "[") {
			total += m.End - m.Start
			continue
		}
		pages := int((m.End - m.Start) / pageSize)
		if cap(pm) < pages*8 {
			pm = make([]byte, pages*8)
		}
		n, _ := pagemap.ReadAt(pm[:pages*8], int64(m.Start/pageSize*8))
		for i := 0; i+8 <= n; i += 8 {
			if binary.LittleEndian.Uint64(pm[i:])>>62 != 0 {
				total += pageSize
			}
		}
	}
	const maxArena = 4 << 30
	total += total/4 + 1<<20
	if total > maxArena {
		total = maxArena
	}
	arena := make([]byte, total)
	for i := 0; i < len(arena); i += pageSize {
		arena[i] = 1
	}
	return arena
}

// dumped says whether Dump copies mapping m: readable private memory
// that is not a read-only file mapping (those are read from their files)
// and not one of the kernel's special mappings.
func dumped(m *mapping) bool {
	if len(m.Perms) < 4 || m.Perms[0] != 'r' || m.Perms[3] != 'p' {
		return false
	}
	switch m.Path {
	case "[vvar]", "[vvar_vclock]", "[vsyscall]":
		return false
	}
	if m.Path != "" && !strings.HasPrefix(m.Path, "[") && m.Perms[1] != 'w' {
		return false
	}
	return true
}
