//go:build linux

package snapshot

import (
	"os"
	"testing"
)

func TestSomeAvg10(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"some avg10=37.65 avg60=55.61 avg300=64.79 total=6110048831\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 37.65, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 0, true},
		{"some avg10=5.5\n", 5.5, true},
		{"full avg10=1.00 avg60=0.00\n", 0, false},
		{"some avg10=x avg60=0.00\n", 0, false},
		{"", 0, false},
	} {
		v, ok := someAvg10([]byte(c.in))
		if v != c.want || ok != c.ok {
			t.Errorf("someAvg10(%q) = %v, %v; want %v, %v", c.in, v, ok, c.want, c.ok)
		}
	}
	// This kernel's own file, where it has one, parses.
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		if _, ok := someAvg10(b); !ok {
			t.Errorf("/proc/pressure/cpu does not parse: %q", b)
		}
	}
}

func TestTracerCount(t *testing.T) {
	if n := tracerCount(100, true); n != 1 {
		t.Errorf("100 threads, CPUs contended: %d tracers, want 1", n)
	}
	if n := tracerCount(1, false); n != 1 {
		t.Errorf("1 thread: %d tracers, want 1", n)
	}
	if n := tracerCount(1000, false); n < 1 || n > maxTracers {
		t.Errorf("1000 threads: %d tracers, want 1..%d", n, maxTracers)
	}
}
