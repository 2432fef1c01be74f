// Package goruntime reads, for a Linux session's sample of Go code, the
// goroutine that was running and its pprof labels, out of the target's
// memory: the g register (R14 on amd64, X28 on arm64) and the stack
// pointer come with the sample, and the runtime's g and label structures
// are found at offsets read from the executable's DWARF. Both Linux back
// ends use it through package platform/linux/tracking when
// [platform.Config] Goroutines is set.
//
// It is not package platform/snapshot/goroutines, which lists every
// goroutine of a stopped process for a snapshot.
package goruntime
