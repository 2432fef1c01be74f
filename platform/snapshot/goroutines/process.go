package goroutines

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/arch"

	"github.com/rawstack/rawstack/platform/snapshot"
)

// Process lists the goroutines of the live Go process pid. Its threads are
// stopped (see [snapshot.Frozen]) only while the runtime's goroutine list,
// each g, the m's running them and the used part of each stack are
// copied, a few batched reads; the stacks are then unwound and named
// from the copy with the executable's pclntab (see direct.go). A pass
// over the running process first plans those reads (where the g's are,
// how much of the stacks to copy) and faults in the memory they fill,
// so the stop is spent in process_vm_readv. It needs
// what ptrace needs (CAP_SYS_PTRACE or the same user under
// kernel.yama.ptrace_scope=0); off Linux it returns an error wrapping
// platform.ErrNotSupported.
func Process(pid int, opts *Options) (*Dump, error) {
	exe, exeLink, x, err := processExe(pid)
	if err != nil {
		return nil, err
	}
	defer x.close()
	bias := procBias(pid, exe, x)
	a := arch.AMD64
	if x.arm64 {
		a = arch.ARM64
	}
	// A pass over the running target plans the reads of the stopped one
	// and faults in the memory they fill.
	plan := x.plan(func(rs []snapshot.MemRead) { snapshot.ReadLive(pid, rs) }, bias)
	var gs []gCopy
	var copied int64
	at, stopped, err := snapshot.Frozen(pid, func(threads []snapshot.ImageThread, read func([]snapshot.MemRead)) error {
		var err error
		gs, err = x.collect(func(rs []snapshot.MemRead) {
			read(rs)
			for _, r := range rs {
				if r.OK {
					copied += int64(len(r.Buf))
				}
			}
		}, bias, regsOf(a, threads), plan)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("goroutines: pid %d (%s): %w", pid, exeLink, err)
	}
	d := x.interpret(gs, opts)
	d.Pid, d.Exe, d.Time, d.Stopped, d.Copied = pid, exe, at, stopped, copied
	return d, nil
}

// procBias is where pid loaded its executable when it is
// position-independent (from /proc/PID/maps), 0 otherwise.
func procBias(pid int, exe string, x *exeInfo) uint64 {
	if !x.pie {
		return 0
	}
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe || strings.Trim(f[2], "0") != "" {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		start, err := strconv.ParseUint(lo, 16, 64)
		if err == nil {
			return start - x.lowestLoad&^0xfff
		}
	}
	return 0
}

// processExe checks pid's executable and reads what the listing needs
// from it, before the target is stopped.
func processExe(pid int) (exe, exeLink string, x *exeInfo, err error) {
	exeLink = "/proc/" + strconv.Itoa(pid) + "/exe"
	exe, err = os.Readlink(exeLink)
	if err != nil {
		if os.IsNotExist(err) {
			return "", "", nil, fmt.Errorf("goroutines: no process %d", pid)
		}
		return "", "", nil, fmt.Errorf("goroutines: pid %d: %w", pid, err)
	}
	if err := CheckBinary(exeLink); err != nil {
		be := err.(*BinaryError)
		be.Path, be.Pid = exe, pid
		return "", "", nil, be
	}
	x, err = openExe(exeLink)
	if err != nil {
		return "", "", nil, fmt.Errorf("goroutines: pid %d (%s): %w", pid, exe, err)
	}
	x.path = exe
	return exe, exeLink, x, nil
}

// processDelve lists the goroutines of pid as Process did before it
// read them directly: the copy is written as a core file into a
// temporary file (under /dev/shm where it exists: tmpfs keeps the
// untouched pages as holes) and read by delve's core reader. The tests
// hold Process to it.
func processDelve(pid int, opts *Options) (*Dump, *snapshot.Image, error) {
	exe, exeLink, x, err := processExe(pid)
	if err != nil {
		return nil, nil, err
	}
	x.close()
	im, err := snapshot.Dump(pid)
	if err != nil {
		return nil, nil, err
	}
	d, err := delveImage(im, exe, exeLink, opts)
	return d, im, err
}

// delveImage reads the goroutines of a copy with delve's core reader.
func delveImage(im *snapshot.Image, exe, exeLink string, opts *Options) (*Dump, error) {
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	f, err := os.CreateTemp(dir, "rawstack-core-*")
	if err != nil {
		return nil, fmt.Errorf("goroutines: pid %d: core file: %w", im.Pid, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := im.WriteCore(f); err != nil {
		return nil, fmt.Errorf("goroutines: pid %d: writing core %s: %w", im.Pid, f.Name(), err)
	}
	d, err := read(f.Name(), exeLink, opts)
	if err != nil {
		return nil, err
	}
	d.Pid, d.Exe, d.Time, d.Stopped, d.Copied = im.Pid, exe, im.Time, im.Stopped, im.Copied
	return d, nil
}

// imageMemory reads the copied memory of im; pages of a copied region
// that were never touched read as zeros.
func imageMemory(im *snapshot.Image) memory {
	return func(addr uint64, p []byte) bool {
		for len(p) > 0 {
			i, _ := slices.BinarySearchFunc(im.Regions, addr, func(r snapshot.Region, a uint64) int {
				switch {
				case r.End <= a:
					return -1
				case r.Start > a:
					return 1
				}
				return 0
			})
			if i >= len(im.Regions) || im.Regions[i].Start > addr || im.Regions[i].End <= addr {
				return false
			}
			r := &im.Regions[i]
			n := min(uint64(len(p)), r.End-addr)
			j, _ := slices.BinarySearchFunc(r.Runs, addr, func(run snapshot.Run, a uint64) int {
				switch {
				case run.Addr+uint64(len(run.Data)) <= a:
					return -1
				case run.Addr > a:
					return 1
				}
				return 0
			})
			if j < len(r.Runs) && r.Runs[j].Addr <= addr && addr < r.Runs[j].Addr+uint64(len(r.Runs[j].Data)) {
				run := &r.Runs[j]
				n = min(n, run.Addr+uint64(len(run.Data))-addr)
				copy(p[:n], run.Data[addr-run.Addr:])
			} else {
				next := r.End
				if j < len(r.Runs) {
					next = r.Runs[j].Addr
				}
				n = min(n, next-addr)
				clear(p[:n])
			}
			p, addr = p[n:], addr+n
		}
		return true
	}
}

// regsOf are the stopped threads' pc, sp, frame pointer and link
// register, from the general registers in user_regs_struct order.
func regsOf(a arch.Arch, threads []snapshot.ImageThread) []threadRegs {
	var out []threadRegs
	for _, t := range threads {
		g := t.Gregs
		switch {
		case a == arch.AMD64 && len(g) > 19:
			out = append(out, threadRegs{tid: t.Tid, pc: g[16], sp: g[19], bp: g[4]})
		case a == arch.ARM64 && len(g) > 32:
			out = append(out, threadRegs{tid: t.Tid, pc: g[32], sp: g[31], bp: g[29], lr: g[30]})
		}
	}
	return out
}

// imageBias is where a position-independent executable was loaded.
func imageBias(im *snapshot.Image, exe string, x *exeInfo) uint64 {
	if !x.pie {
		return 0
	}
	for _, f := range im.Files {
		if f.Path == exe && f.Offset == 0 {
			return f.Start - x.lowestLoad&^0xfff
		}
	}
	return 0
}
