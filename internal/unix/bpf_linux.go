//go:build linux

package unix

import "golang.org/x/sys/unix"

// perf_event constants the eBPF back end uses.
const (
	PerfCountSWDummy = unix.PERF_COUNT_SW_DUMMY
)

// PerfSetBPF attaches the BPF program progFD to the perf event fd: the
// program runs on each of the event's overflows.
func PerfSetBPF(fd, progFD int) error {
	return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, progFD)
}

// CapEff returns the calling thread's effective capability set (the low
// 64 bits), from capget(2).
func CapEff() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// Capability numbers (linux/capability.h).
const (
	CapSysAdmin = 21
	CapPerfmon  = 38
	CapBPF      = 39
)
