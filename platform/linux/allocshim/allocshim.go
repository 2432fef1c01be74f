// Package allocshim holds the allocation sampler that `rawstack record
// --alloc -- CMD` preloads into the program it launches: a small shared
// object (src/shim.c, built by src/build.sh and committed, as the BPF object is)
// that interposes malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc, memalign, valloc and pvalloc, passes every call to the
// allocator the program would have called (glibc's, jemalloc's,
// tcmalloc's) and samples by bytes itself, per thread, with the Poisson
// process the BPF programs use, so that a call that is not sampled costs
// a few nanoseconds. Given a shared ring ([Ring], named by [RingEnv]), a
// sampled allocation and the free of a sampled block are written there
// by the sampler itself and never enter the kernel. Without one (an eBPF
// frame-pointer recording, a process that cannot open it), a sampled
// allocation calls [AllocSymbol]: the eBPF recorder puts its uprobe
// there (package platform/linux/ebpf). The perf back end has no
// uprobes: its ring ([RingWait]) is the only way, and in frame-pointer
// mode ([RingFP]) the sampler walks the frame pointers itself. The free of a sampled block does not
// trap then either: it is queued with its time and thread, and the
// queue goes along with the next sampled allocation (ahead of it), or
// through [FreeSymbol] when it is full, old or the program exits.
//
// A running process (record -p PID) gets the same sampler by injection
// ([Inject]: ptrace, a remote dlopen, rawstack_attach redirecting the
// allocator slots of its modules; [Injection.Detach] puts them back), as
// heaptrack attaches but without gdb. The recorder stamps the ring at
// every read ([Ring.Stamp]); a sampler whose recorder left ([Ring.Detach])
// or went silent for [AliveTimeout] goes inert. Where injection cannot
// be, and for the whole host (-a), the eBPF back end puts uprobes on the
// allocator instead, and every call traps. The recorder (package
// platform/linux/tracking, for both back ends) cuts the
// sampler's own frames from the stacks it reports (the module with
// [BuildID]).
package allocshim

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/rawstack/rawstack/internal/elfnote"
)

//go:generate sh src/build.sh

const (
	// AllocSymbol is called with (block, size, frees, n) for a sampled
	// allocation; a block of 0 says the sampler's set of sampled blocks
	// was full (the sample is lost). frees points to n (at most
	// [FreeQueue]) frees of sampled blocks made before it, each a
	// block address, a CLOCK_MONOTONIC time in ns (u64 each) and a
	// thread id (u32, then 4 bytes of padding).
	AllocSymbol = "rawstack_alloc_sampled"
	// FreeSymbol is called with (frees, n) for queued frees of sampled
	// blocks (freed or reallocated) that did not go with an allocation:
	// when FreeQueue of them are queued, a free finds the oldest 5 ms old, or
	// the program exits.
	FreeSymbol = "rawstack_free_sampled"
	// FreeQueue is the most frees a marker reports at once.
	FreeQueue = 32
	// RateEnv is the environment variable that gives the sampler its
	// mean sampling interval in bytes (default 512 KiB).
	RateEnv = "RAWSTACK_ALLOC_RATE"
)

// Install returns the path of a file that holds [Object], writing it
// if it is not there yet: in dir, or when dir is "" in a directory of
// the system's temporary one for this user (rawstack-UID), readable by
// every user so that a command run under another user can load it. The
// file is named by its contents and stays, so that the frames of the
// sampler in a trace can be symbolized after the recording and that
// recordings share it. The directory must belong to this user and be
// writable by no other (another user's file would be preloaded into
// the command), and a file found there is used only if it holds Object.
func Install(dir string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = installDir(); err != nil {
			return "", err
		}
	} else if err := private(dir); err != nil {
		return "", fmt.Errorf("installing the allocation sampler: %w", err)
	}
	// Named by its build id (a hash of its contents, made by the
	// linker; no crypto package in every rawstack command's init).
	id := BuildID()
	path := filepath.Join(dir, "librawstack-alloc-"+hex.EncodeToString(id[:min(len(id), 6)])+".so")
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, Object) {
		return path, nil
	}
	f, err := os.CreateTemp(dir, ".librawstack-alloc-*")
	if err != nil {
		return "", fmt.Errorf("installing the allocation sampler: %w", err)
	}
	_, err = f.Write(Object)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("installing the allocation sampler %s: %w", path, err)
	}
	return path, nil
}

// installDir returns this user's directory of the system's temporary
// one (rawstack-UID), made if need be, once it has checked that no other
// user can write to it.
func installDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "rawstack-"+strconv.Itoa(os.Geteuid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("installing the allocation sampler: %w", err)
	}
	if err := private(dir); err != nil {
		return "", fmt.Errorf("installing the allocation sampler: %w", err)
	}
	return dir, nil
}

var (
	buildIDOnce sync.Once
	buildID     []byte
)

// BuildID returns the GNU build id of Object: a module with it in a
// process is the sampler, whose frames the recorder cuts from the
// stacks of sampled allocations.
func BuildID() []byte {
	buildIDOnce.Do(func() {
		f, err := elf.NewFile(bytes.NewReader(Object))
		if err != nil {
			return
		}
		for _, s := range f.Sections {
			if s.Type != elf.SHT_NOTE {
				continue
			}
			if b, err := s.Data(); err == nil {
				if id := elfnote.GNUBuildID(b, f.ByteOrder, s.Addralign); id != nil {
					buildID = id
					return
				}
			}
		}
	})
	return buildID
}
