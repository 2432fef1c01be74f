//go:build linux

package unix

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMonotonic holds Monotonic to the system call it replaces: within
// the time the two reads take of each other.
func TestMonotonic(t *testing.T) {
	for i := 0; i < 100; i++ {
		var a, b unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		m := Monotonic()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		const slack = 1e6 // ns: the calibration is a bracket of a few µs unless all its tries were preempted
		if m < a.Nano()-slack || m > b.Nano()+slack {
			t.Fatalf("Monotonic %d outside [%d, %d]", m, a.Nano(), b.Nano())
		}
	}
}

func BenchmarkMonotonic(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Monotonic()
	}
}
