//go:build linux && (amd64 || arm64)

package ebpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"

	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// Allocators the programs can probe, by the file name of the library
// that provides malloc, most specific first: a process that maps
// jemalloc or tcmalloc allocates through it (its malloc interposes
// libc's).
var allocatorLibs = []string{"libjemalloc.so", "libtcmalloc", "libc.so.6"}

// findAllocator returns the path (through /proc/PID/root) of the library
// whose malloc process pid calls. A running process shows it in its
// maps; a process stopped at exec, before the dynamic loader ran, is
// looked up from its executable's DT_NEEDED, along its DT_RUNPATH (or
// DT_RPATH), its LD_LIBRARY_PATH and the loader's default directories.
func findAllocator(pid int) (string, error) {
	root := procfs.Dir(pid) + "/root"
	exe, _ := os.Readlink(procfs.Dir(pid) + "/exe")
	if data, err := os.ReadFile(procfs.Dir(pid) + "/maps"); err == nil {
		if ms, err := procfs.ParseMaps(data); err == nil {
			for _, lib := range allocatorLibs {
				for _, m := range ms {
					if m.Exec() && strings.HasPrefix(path.Base(m.Path), lib) {
						return root + m.Path, nil
					}
				}
			}
		}
	}
	f, err := elf.Open(procfs.Dir(pid) + "/exe")
	if err != nil {
		return "", &AllocatorError{Pid: pid, Binary: exe, Reason: err.Error()}
	}
	defer f.Close()
	interp := false
	for _, p := range f.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	if !interp {
		return "", &AllocatorError{Pid: pid, Binary: exe, Reason: "the binary is statically linked: its allocator is not a shared library that uprobes can be put on"}
	}
	needed, _ := f.DynString(elf.DT_NEEDED)
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if rp, _ := f.DynString(tag); len(rp) > 0 {
			for _, d := range strings.Split(rp[0], ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(exe)))
			}
			break
		}
	}
	if env, err := os.ReadFile(procfs.Dir(pid) + "/environ"); err == nil {
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
				dirs = append(dirs, strings.Split(v, ":")...)
			}
		}
	}
	dirs = append(dirs, defaultLibDirs...)
	for _, lib := range allocatorLibs {
		for _, n := range needed {
			if !strings.HasPrefix(n, lib) {
				continue
			}
			for _, d := range dirs {
				if d == "" {
					continue
				}
				if p := root + filepath.Join(d, n); fileExists(p) {
					return p, nil
				}
			}
			return "", &AllocatorError{Pid: pid, Binary: exe, Reason: fmt.Sprintf("its allocator %s was not found in %s", n, strings.Join(dirs, ":"))}
		}
	}
	return "", &AllocatorError{Pid: pid, Binary: exe, Reason: fmt.Sprintf("it links none of %s (DT_NEEDED: %s)", strings.Join(allocatorLibs, ", "), strings.Join(needed, " "))}
}

// defaultLibDirs are where the dynamic loader looks last.
var defaultLibDirs = []string{"/lib/" + libTriple, "/usr/lib/" + libTriple, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// hostLibc returns the host's C library, which a whole-host recording
// probes: the processes that use another allocator are not seen.
func hostLibc() (string, error) {
	for _, d := range defaultLibDirs {
		if p := filepath.Join(d, "libc.so.6"); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: libc.so.6 is in none of %s", ErrNoAllocator, strings.Join(defaultLibDirs, ", "))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// allocProbes are the allocator's functions and the programs on their
// entry; every one of them but free returns through alloc_return.
// malloc and free are required, the others probed where the library
// has them.
var allocProbes = []struct {
	sym, prog string
	ret       bool
	required  bool
}{
	{"malloc", "malloc_enter", true, true},
	{"free", "free_enter", false, true},
	{"calloc", "calloc_enter", true, false},
	{"realloc", "realloc_enter", true, false},
	{"posix_memalign", "posix_memalign_enter", true, false},
	{"aligned_alloc", "aligned_alloc_enter", true, false},
}

// attachAlloc puts the allocation programs on the allocator at lib, for
// process pid only (0: every process that maps lib). The links are
// perf events of the uprobe PMU, owned by this process's file
// descriptors: a recorder that dies, even by SIGKILL, leaves no uprobe
// behind (nothing to clean up at the next start, unlike uprobes made
// through tracefs).
func (p *programs) attachAlloc(lib string, pid int) error {
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return fmt.Errorf("opening the allocator %s: %w", lib, err)
	}
	opts := &link.UprobeOptions{PID: pid}
	for _, a := range allocProbes {
		l, err := ex.Uprobe(a.sym, p.coll.Programs[a.prog], opts)
		if err != nil {
			if !a.required && errors.Is(err, link.ErrNoSymbol) {
				continue
			}
			return fmt.Errorf("uprobe on %s in %s: %w", a.sym, lib, err)
		}
		p.links = append(p.links, l)
		if !a.ret {
			continue
		}
		l, err = ex.Uretprobe(a.sym, p.coll.Programs["alloc_return"], opts)
		if err != nil {
			return fmt.Errorf("uretprobe on %s in %s: %w", a.sym, lib, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

// preload preloads the allocation sampler into cmd, with a shared ring
// when samples copy the stack (the sampler copies it as the BPF
// programs would; with frame pointers the programs walk them, and the
// markers serve). A ring that cannot be made leaves the markers.
func (s *Session) preload(cmd *exec.Cmd) error {
	lib, err := s.PreloadSampler(cmd, s.Unwinder() != nil, 0)
	if err != nil {
		return err
	}
	s.bpf.shim = lib
	return nil
}

// attachShim puts the sampler's programs on its two markers in the file
// at path. Every process that maps the file is probed — the command, the
// children that inherit its LD_PRELOAD, and the commands of other
// recordings of this user — and the programs keep the selected ones
// (the others pay a trap per sampled allocation only).
func (p *programs) attachShim(path string) error {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return fmt.Errorf("opening the allocation sampler %s: %w", path, err)
	}
	for _, a := range []struct{ sym, prog string }{{allocshim.AllocSymbol, "shim_alloc"}, {allocshim.FreeSymbol, "shim_free"}} {
		l, err := ex.Uprobe(a.sym, p.coll.Programs[a.prog], nil)
		if err != nil {
			return fmt.Errorf("uprobe on %s in %s: %w", a.sym, path, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}
