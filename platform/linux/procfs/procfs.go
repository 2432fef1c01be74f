package procfs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Dir returns /proc/PID.
func Dir(pid int) string { return "/proc/" + strconv.Itoa(pid) }

// ReadSmall reads at most max bytes of a small (proc) file.
func ReadSmall(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Grow up to max as the file turns out to need: /proc/PID/maps is
	// read with a 64 MiB cap, and clearing that much memory up front was
	// most of a short recording's CPU.
	// Most are small (a comm, a stat line, a command line): start small,
	// as a whole-host recorder reads them for every process it samples.
	buf := make([]byte, min(max, 512))
	n := 0
	for n < max {
		if n == len(buf) {
			buf = append(buf, make([]byte, min(len(buf), max-len(buf)))...)
		}
		m, err := f.Read(buf[n:])
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	return buf[:n], nil
}

// ReadInto reads a whole (proc) file of at most limit bytes, appending to
// buf and growing it as the file needs, so that reading every process's
// maps (the eBPF back end's whole-host mode) reuses one buffer.
func ReadInto(path string, buf []byte, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			grow := min(max(512, len(buf)), limit-len(buf))
			buf = append(buf, make([]byte, grow)...)[:len(buf)]
		}
		m, err := f.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+m]
		if err != nil || m == 0 {
			break
		}
	}
	return buf, nil
}

// Comm returns the comm of /proc/PID[/task/TID].
func Comm(dir string) string {
	b, err := ReadSmall(dir+"/comm", 64)
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}

// Cmdline returns the NUL-separated command line of pid.
func Cmdline(pid int) string {
	b, err := ReadSmall(Dir(pid)+"/cmdline", 64<<10)
	if err != nil {
		return ""
	}
	return string(bytes.TrimRight(b, "\x00"))
}

// Ppid returns the parent pid of pid from /proc/PID/stat.
func Ppid(pid int) int {
	b, err := ReadSmall(Dir(pid)+"/stat", 4096)
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// Tasks lists the thread ids of pid.
func Tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(Dir(pid) + "/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	return tids, nil
}

// NSpids returns the NSpid line of /proc/PID[/task/TID]/status (dir):
// the process's (or thread's) id in each pid namespace it is in, from
// the one /proc was mounted in to its own; nil if it cannot be read.
func NSpids(dir string) []uint32 {
	b, err := ReadSmall(dir+"/status", 16<<10)
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		var ids []uint32
		for _, f := range strings.Fields(v) {
			n, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil
			}
			ids = append(ids, uint32(n))
		}
		return ids
	}
	return nil
}

// SysctlInt reads an integer from /proc/sys.
func SysctlInt(name string, def int) int {
	b, err := ReadSmall("/proc/sys/"+strings.ReplaceAll(name, ".", "/"), 64)
	if err != nil {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return v
}

// CapEff returns the effective capability mask of the calling process.
func CapEff() uint64 {
	b, err := ReadSmall("/proc/self/status", 16<<10)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return c
		}
	}
	return 0
}

const (
	CapSysAdmin  = 21
	CapSysPtrace = 19
	CapPerfmon   = 38
)

// PerfPrivileged reports whether the caller bypasses perf_event_paranoid.
func PerfPrivileged() bool {
	c := CapEff()
	return c&(1<<CapPerfmon) != 0 || c&(1<<CapSysAdmin) != 0
}

// OnlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func OnlineCPUs() []int {
	b, err := ReadSmall("/sys/devices/system/cpu/online", 4096)
	var cpus []int
	if err == nil {
		for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
			lo, hi, found := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			z := a
			var err2 error
			if found {
				z, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || z < a || z-a > 4096 {
				continue
			}
			for c := a; c <= z; c++ {
				cpus = append(cpus, c)
			}
		}
	}
	if len(cpus) == 0 {
		cpus = []int{0}
	}
	return cpus
}
