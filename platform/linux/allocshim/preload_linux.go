package allocshim

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"

	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// PreloadEnv returns env (a command's environment) with the sampler at
// lib first in LD_PRELOAD, its mean sampling interval rate in RateEnv
// and, with a ring, the ring's file in RingEnv; earlier values of those
// are dropped. First, so that the next allocator the sampler finds
// (RTLD_NEXT) is the one the command would have called, a jemalloc of
// its own LD_PRELOAD included.
func PreloadEnv(env []string, lib string, rate int, ring *Ring) []string {
	pre := lib
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "LD_PRELOAD="):
			if v := strings.TrimPrefix(kv, "LD_PRELOAD="); v != "" {
				pre += ":" + v
			}
		case strings.HasPrefix(kv, RateEnv+"="), strings.HasPrefix(kv, RingEnv+"="):
		default:
			out = append(out, kv)
		}
	}
	out = append(out, "LD_PRELOAD="+pre, fmt.Sprintf("%s=%d", RateEnv, rate))
	if ring != nil {
		out = append(out, RingEnv+"="+ring.Path())
	}
	return out
}

// Preloadable checks that process pid, stopped at exec, runs a dynamic
// loader that will preload the sampler: a statically linked binary has
// none (nor an allocator library uprobes could be put on).
func Preloadable(pid int) error {
	exe, _ := os.Readlink(procfs.Dir(pid) + "/exe")
	f, err := elf.Open(procfs.Dir(pid) + "/exe")
	if err != nil {
		return &AllocatorError{Pid: pid, Binary: exe, Reason: err.Error()}
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil
		}
	}
	return &AllocatorError{Pid: pid, Binary: exe, Reason: "the binary is statically linked: the allocation sampler cannot be preloaded into it, nor uprobes put on its allocator"}
}
