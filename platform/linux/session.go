package linux

import "github.com/rawstack/rawstack/platform/linux/tracking"

// Session is a running sampling session of either back end (a
// *perf.Session or an *ebpf.Session, of packages platform/linux/perf and
// platform/linux/ebpf).
type Session = tracking.Session
