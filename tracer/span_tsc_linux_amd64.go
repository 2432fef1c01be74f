package tracer

import (
	"os"
	"strings"
)

func rdtsc() int64

// tscTrusted says whether the kernel keeps its own clock on the TSC (the
// clock source is "tsc") and the CPU's counter runs at a constant rate
// through idle states (constant_tsc, nonstop_tsc): then the counter is
// synchronized across CPUs and maps linearly onto CLOCK_MONOTONIC. The
// kernel switches the clock source away from the TSC when it finds it
// unstable; on such machines, and VMs whose clock source is kvm-clock,
// spans read the vDSO clock instead.
func tscTrusted() bool {
	if os.Getenv("RAWSTACK_SPAN_CLOCK") == "vdso" {
		return false
	}
	cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil || strings.TrimSpace(string(cs)) != "tsc" {
		return false
	}
	ci, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(ci), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			var constant, nonstop bool
			for _, f := range strings.Fields(v) {
				constant = constant || f == "constant_tsc"
				nonstop = nonstop || f == "nonstop_tsc"
			}
			return constant && nonstop
		}
	}
	return false
}
