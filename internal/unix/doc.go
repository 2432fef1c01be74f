// Package unix is the one place rawstack calls the Linux kernel from: thin
// wrappers over golang.org/x/sys/unix for perf_event_open, its ring buffer
// mmap and ioctls, poll, ptrace, the clocks and file locks. On other
// systems the package is empty; the per-OS back ends under platform/ and
// internal/wine (its prefix lock) are the importers.
package unix
