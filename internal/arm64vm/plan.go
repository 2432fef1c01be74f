// Package arm64vm runs rawstack's Linux tests on a real arm64 kernel:
// Debian's arm64 kernel booted under qemu-system-aarch64 (TCG), with no
// disk. The initramfs holds a static arm64 /init (package guest), the
// packages' arm64 test binaries, the repository's sources (tests read
// their testdata), the fixtures the tests build, built on the host with
// the cross compilers (internal/testbuild's cross fixtures), and the
// cross toolchain's shared libraries for the dynamically linked ones.
// /init mounts what a kernel without an init system lacks, runs the
// [Plan] it finds in /plan.json, prints each step's output on the serial
// console and powers the VM off.
//
// The host side is the command in ./run:
//
//	go run ./internal/arm64vm/run            # every suite
//	go run ./internal/arm64vm/run -run tracer # the suites whose name matches
package arm64vm

import "time"

// PlanPath is where /init reads its plan.
const PlanPath = "/plan.json"

// Step is one program /init runs.
type Step struct {
	Name    string        // printed with its result
	Dir     string        // working directory
	Path    string        // program
	Args    []string      // arguments after the program's name
	Env     []string      // added to the plan's environment
	Timeout time.Duration // killed after this long (0: no limit)
}

// Plan is what /init runs, in order.
type Plan struct {
	Env   []string // every step's environment
	Steps []Step
}

// Lines /init prints, which the host reads on the console.
const (
	// StepLine starts the line that ends each step: "arm64vm: step NAME
	// ok" or "arm64vm: step NAME FAIL (...)".
	StepLine = "arm64vm: step "
	// DoneLine is printed, with the counts after it ("N passed, M
	// failed"), when every step has run; a console without it means the
	// VM died or was stopped first.
	DoneLine = "arm64vm: done: "
)
