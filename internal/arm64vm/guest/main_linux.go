//go:build linux

// Command guest is the arm64 test VM's /init (package arm64vm): the
// first process of a kernel booted with an initramfs and no init system.
// It mounts the file systems the tests use, sets the loopback interface
// up, runs the plan in /plan.json with each step's output on the serial
// console, and powers the machine off.
//
// As the first process it also reaps every orphan: the steps run in a
// child (this program again, with ARM64VM_RUNNER=1), so that the reaping
// never takes a step's own exit status.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rawstack/rawstack/internal/arm64vm"
	sys "github.com/rawstack/rawstack/internal/unix"
)

func main() {
	if os.Getenv("ARM64VM_RUNNER") == "1" {
		os.Exit(runPlan())
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "arm64vm guest: not the first process; this program is the test VM's /init")
		os.Exit(2)
	}
	code := 1
	if err := setup(); err != nil {
		fmt.Printf("arm64vm: setting up the machine: %v\n", err)
	} else {
		code = runChild()
	}
	fmt.Printf("arm64vm: runner exited %d; powering off\n", code)
	if err := sys.PowerOff(); err != nil {
		fmt.Printf("arm64vm: power off: %v\n", err)
	}
	select {}
}

// setup mounts what tests read (/proc, /sys and tracefs, BPF's file
// system, cgroup v2, /dev, a /tmp in memory) and sets lo up.
func setup() error {
	for _, m := range []struct{ src, dir, fs, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=755"},
		{"tracefs", "/sys/kernel/tracing", "tracefs", ""},
		{"debugfs", "/sys/kernel/debug", "debugfs", ""},
		{"bpf", "/sys/fs/bpf", "bpf", ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", ""},
	} {
		if err := sys.Mount(m.src, m.dir, m.fs, m.data); err != nil {
			return err
		}
	}
	// The emulated CPU takes tens to hundreds of microseconds per
	// sampling interrupt (the kernel measured 49-400 µs), where real
	// hardware takes a few: left at its default (25%), the kernel's
	// limit on the time spent in them lowered
	// kernel.perf_event_max_sample_rate to 500 within seconds and then
	// throttled the tests' 1 kHz events. The limit is the emulator's
	// artefact, not the kernel's, so it is off here.
	if err := os.WriteFile("/proc/sys/kernel/perf_cpu_time_max_percent", []byte("0"), 0); err != nil {
		return err
	}
	return sys.LinkUp("lo")
}

// runChild runs the plan in a child and reaps every process until that
// child ends; it returns the child's exit code.
func runChild() int {
	self, err := os.Executable()
	if err != nil {
		self = "/init"
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "ARM64VM_RUNNER=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Printf("arm64vm: starting the runner: %v\n", err)
		return 1
	}
	for {
		pid, code, err := sys.WaitAny()
		if err != nil {
			fmt.Printf("arm64vm: wait: %v\n", err)
			return 1
		}
		if pid == cmd.Process.Pid {
			return code
		}
	}
}

// runPlan runs every step of the plan and prints the counts; it returns
// 0 when all passed.
func runPlan() int {
	b, err := os.ReadFile(arm64vm.PlanPath)
	if err != nil {
		fmt.Printf("arm64vm: %v\n", err)
		return 1
	}
	var p arm64vm.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		fmt.Printf("arm64vm: %s: %v\n", arm64vm.PlanPath, err)
		return 1
	}
	passed, failed := 0, 0
	for _, st := range p.Steps {
		if err := runStep(p.Env, st); err != nil {
			failed++
			fmt.Printf("%s%s FAIL (%v)\n", arm64vm.StepLine, st.Name, err)
		} else {
			passed++
			fmt.Printf("%s%s ok\n", arm64vm.StepLine, st.Name)
		}
	}
	fmt.Printf("%s%d passed, %d failed\n", arm64vm.DoneLine, passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

func runStep(env []string, st arm64vm.Step) error {
	ctx := context.Background()
	if st.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, st.Timeout)
		defer cancel()
	}
	fmt.Printf("arm64vm: running %s: %s %s\n", st.Name, st.Path, strings.Join(st.Args, " "))
	cmd := exec.CommandContext(ctx, st.Path, st.Args...)
	cmd.Dir = st.Dir
	cmd.Env = append(append([]string(nil), env...), st.Env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("timed out after %v", st.Timeout)
	}
	return err
}
