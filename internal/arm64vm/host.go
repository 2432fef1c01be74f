package arm64vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The machine the tests boot: qemu's "virt" board with a CPU of every
// feature TCG emulates, but pointer authentication with qemu's own cheap
// algorithm (the architected one, QARMA, costs the emulation much more
// at each signed return), two CPUs and memory for an initramfs of about
// 300 MiB plus the tests.
var qemuArgs = []string{"-M", "virt", "-cpu", "max,pauth-impdef=on", "-smp", "2", "-m", "3072",
	"-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot"}

// ErrMissing is wrapped by the errors of what the VM needs and the
// host lacks (qemu, the kernel package, the cross compilers).
var ErrMissing = errors.New("missing")

// QEMU returns the path of qemu-system-aarch64.
func QEMU() (string, error) {
	p, err := exec.LookPath("qemu-system-aarch64")
	if err != nil {
		return "", fmt.Errorf("%w: qemu-system-aarch64 (Debian package qemu-system-arm)", ErrMissing)
	}
	return p, nil
}

// Kernel returns the path of Debian's arm64 kernel image, fetched into
// dir (a cache) the first time: the package linux-image-arm64:arm64
// depends on names it (apt-cache), [Fetch] gets it. apt needs the arm64
// architecture (dpkg --add-architecture arm64, then apt-get update).
func Kernel(dir string) (string, error) {
	if k, err := findKernel(dir); err == nil {
		return k, nil
	}
	out, err := exec.Command("apt-cache", "depends", "linux-image-arm64:arm64").Output()
	if err != nil {
		return "", fmt.Errorf("%w: Debian's arm64 kernel: apt-cache depends linux-image-arm64:arm64: %v (dpkg --add-architecture arm64 && apt-get update)", ErrMissing, err)
	}
	pkg := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Depends: "); ok && strings.HasPrefix(v, "linux-image-") {
			pkg = v
			break
		}
	}
	if pkg == "" {
		return "", fmt.Errorf("%w: Debian's arm64 kernel: linux-image-arm64:arm64 depends on no linux-image package:\n%s", ErrMissing, out)
	}
	// Only the image and its config: not the modules (hundreds of MiB).
	if err := Fetch(dir, pkg, "boot"); err != nil {
		return "", err
	}
	return findKernel(dir)
}

func findKernel(dir string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*-arm64"))
	if len(m) == 0 {
		return "", fmt.Errorf("%w: no boot/vmlinuz-*-arm64 in %s", ErrMissing, dir)
	}
	return m[len(m)-1], nil
}

// Busybox returns the path of Debian's static arm64 busybox (package
// busybox-static:arm64), fetched into dir the first time: the VM's sh,
// sleep, true and the few other commands tests run.
func Busybox(dir string) (string, error) {
	p := filepath.Join(dir, "bin", "busybox")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := Fetch(dir, "busybox-static:arm64", "bin"); err != nil {
		return "", err
	}
	return p, nil
}

// Fetch downloads Debian package pkg with apt-get and unpacks the
// directories keep of it into dir, which it replaces.
func Fetch(dir, pkg string, keep ...string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	get := exec.Command("apt-get", "download", pkg)
	get.Dir = tmp
	if b, err := get.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: apt-get download %s: %v (dpkg --add-architecture arm64 && apt-get update)\n%s", ErrMissing, pkg, err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
	}
	root := filepath.Join(tmp, "root")
	if b, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %v\n%s", debs[0], err, b)
	}
	kept := filepath.Join(tmp, "kept")
	if err := os.MkdirAll(kept, 0o755); err != nil {
		return err
	}
	for _, k := range keep {
		if err := os.Rename(filepath.Join(root, k), filepath.Join(kept, k)); err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
	}
	os.RemoveAll(dir)
	return os.Rename(kept, dir)
}

// Result is what the console said.
type Result struct {
	Done           bool // /init printed DoneLine: every step ran
	Passed, Failed int
	FailedSteps    []string
}

// Boot boots kernel with initrd and copies the console to out until the
// machine powers off or ctx ends (then qemu is killed).
func Boot(ctx context.Context, qemu, kernel, initrd string, out io.Writer) (Result, error) {
	args := append(append([]string(nil), qemuArgs...), "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyAMA0 panic=-1 loglevel=4")
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var res Result
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			fmt.Fprintln(out, line)
			if v, ok := strings.CutPrefix(line, DoneLine); ok {
				res.Done = true
				fmt.Sscanf(v, "%d passed, %d failed", &res.Passed, &res.Failed)
			}
			if v, ok := strings.CutPrefix(line, StepLine); ok && strings.Contains(v, " FAIL") {
				res.FailedSteps = append(res.FailedSteps, strings.Fields(v)[0])
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-scanned
	if ctx.Err() != nil {
		return res, fmt.Errorf("the VM did not power off in time: %w", ctx.Err())
	}
	if err != nil {
		return res, fmt.Errorf("qemu-system-aarch64: %w", err)
	}
	return res, nil
}
