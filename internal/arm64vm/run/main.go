// Command run runs rawstack's Linux tests on a real arm64 kernel, in a
// VM (package arm64vm): for each suite it runs the suite's tests on the
// host first, which builds every fixture they use for arm64 too (the
// cross fixtures of internal/testbuild), then builds the package's arm64
// test binary; it packs them into an initramfs with the sources, the
// fixtures and the cross toolchain's libraries, boots Debian's arm64
// kernel under qemu-system-aarch64 and prints the console.
//
//	go run ./internal/arm64vm/run [-run REGEXP] [-keep]
//
// It exits 1 when a test fails in the VM or on the host, or when the VM
// does not finish. A missing piece (qemu, the kernel package, a cross
// compiler) fails it under CI=true; otherwise it says what is missing
// and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rawstack/rawstack/internal/arm64vm"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// suite is one package's tests run in the VM.
type suite struct {
	name string // names the step
	pkg  string // package directory, from the module root
	run  string // -test.run of the tests that run in the VM
	// timeout is the VM's limit for the suite; the emulated CPU is a
	// few times slower than the host's for the recorder's own work.
	timeout time.Duration
}

// suites are the Linux back end, tracer, snapshot and agent tests that
// run on arm64. Each test chosen here runs on the host too (its fixtures
// are built there), so none may need a tool the VM lacks (gdb, a Python,
// a JIT runtime, the go command). Left out, with the reason:
//   - tests whose thresholds count samples per second of CPU or per
//     wall second, or shares of all samples including start-up, tuned
//     for real hardware: the emulated CPU makes a program's start (the
//     dynamic loader's first run of each page of code) a tenth of a
//     short run, and the recorder's own work several times slower
//     (TestLaunchChain, TestDWARFChain, TestAutoUnwind, TestForkExec,
//     TestSelfProfile, TestAllocAttach, TestEBPFSystemWide, TestEBPFExecExit,
//     TestEBPFKernelFrames: an emulated CPU's interrupts are slow enough
//     to hold a tenth of the samples of a program that lives in short
//     system calls); and the
//     emulated PMU's cycles are not time, so a cycles-weighted split
//     of two threads is not their CPU times (TestGoroutineLabelsOfCommand);
//   - TestWholeHostChurnState: 95 s in the VM;
//   - tests with an amd64 expectation: TestProcessGoOutermost and
//     TestSelfProfileSystemstack (see the issue 37 notes).
//
// TestRecordChainShares, TestRecordAlloc, TestAgentOTLP and
// TestSnapshotThreadChains (package cmd/rawstack) are the acceptance
// figures: chain shares per back end and unwind mode among the samples
// in the hot function, allocation totals (the preloaded sampler with
// both back ends), agent samples through an OTLP receiver in the VM,
// every thread's chain in a snapshot. The allocshim suite runs the
// sampler's own tests (its arm64 object: rawstack_capture's registers,
// the ring) on the arm64 kernel.
var suites = []suite{
	{name: "perf", pkg: "platform/linux/perf", run: ".", timeout: 2 * time.Minute},
	{name: "ebpf", pkg: "platform/linux/ebpf", timeout: 2 * time.Minute,
		run: "^(TestBPFRecordPath|TestBPFRecordAllocs|TestShimRingAllocs|TestBPFBytesPerSample|TestWholeHostNewProcessWakes|FuzzDecodeBPF)$"},
	{name: "allocshim", pkg: "platform/linux/allocshim", timeout: 2 * time.Minute,
		run: "^(TestSampling|TestInstall|TestRing|TestRingSpill|TestRingFile)$"},
	{name: "snapshot", pkg: "platform/snapshot", timeout: 2 * time.Minute,
		run: "^(TestProcessOptions|TestProcessChurn|TestProcessReleasesOnError|TestProcessStopped|TestProcessKeepsSignals|TestProcessProcMem|TestFrozen)$"},
	{name: "tracer", pkg: "tracer", timeout: 3 * time.Minute,
		run: "^(TestEBPFChain|TestEBPFOffCPU|TestThreads|TestAutoRepairsShrinkWrappedLeaf|TestAllocNative|TestAllocNativeFP)$"},
	{name: "cmd", pkg: "cmd/rawstack", timeout: 5 * time.Minute,
		run: "^(TestRecordChainShares|TestRecordAlloc|TestAgentOTLP|TestSnapshotThreadChains|TestRecordCommand)$"},
}

// extra are the -file flags.
var extra []string

func main() {
	runRE := flag.String("run", "", "run only the suites whose name matches this regular expression")
	keep := flag.Bool("keep", false, "keep the work directory (initramfs, test binaries, fixtures)")
	timeout := flag.Duration("timeout", 14*time.Minute, "how long the VM may run")
	script := flag.String("sh", "", "run this shell script in the VM after the suites (rawstack and its companions are on its PATH)")
	flag.Func("file", "copy this host file into the VM's /extra (repeatable; for -sh)", func(p string) error {
		extra = append(extra, p)
		return nil
	})
	flag.Parse()
	if err := run(*runRE, *keep, *timeout, *script); err != nil {
		if errors.Is(err, arm64vm.ErrMissing) && !testbuild.CI() {
			fmt.Printf("arm64vm: skipped: %v\n", err)
			return
		}
		fmt.Fprintf(os.Stderr, "arm64vm: %v\n", err)
		os.Exit(1)
	}
}

func run(runRE string, keep bool, timeout time.Duration, script string) error {
	re, err := regexp.Compile(runRE)
	if err != nil {
		return err
	}
	var chosen []suite
	for _, s := range suites {
		if re.MatchString(s.name) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 && script == "" {
		return fmt.Errorf("no suite matches %q", runRE)
	}
	qemu, err := arm64vm.QEMU()
	if err != nil {
		return err
	}
	for _, tool := range []string{"aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s (Debian packages gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu): the fixtures' cross compiler", arm64vm.ErrMissing, tool)
		}
	}
	crossLibs := "/usr/aarch64-linux-gnu/lib"
	if _, err := os.Stat(filepath.Join(crossLibs, "ld-linux-aarch64.so.1")); err != nil {
		return fmt.Errorf("%w: %s/ld-linux-aarch64.so.1 (Debian package libc6-arm64-cross): the libraries of dynamically linked fixtures", arm64vm.ErrMissing, crossLibs)
	}
	cache, err := os.UserCacheDir()
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" || err != nil {
		cache = d
	}
	kernel, err := arm64vm.Kernel(filepath.Join(cache, "rawstack-tools", "arm64-kernel"))
	if err != nil {
		return err
	}
	busybox, err := arm64vm.Busybox(filepath.Join(cache, "rawstack-tools", "arm64-busybox"))
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "rawstack-arm64vm-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("arm64vm: work directory %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	fixtures := filepath.Join(work, "fixtures")
	plan := arm64vm.Plan{Env: []string{"PATH=/bin:/usr/bin", "HOME=/root", "TMPDIR=/tmp",
		"RAWSTACK_PREBUILT_FIXTURES=/fixtures", "RAWSTACK_FIXTURE_CACHE=/tmp/fixture-cache",
		"CI=" + os.Getenv("CI")}}
	for _, s := range chosen {
		fmt.Printf("arm64vm: %s: the host's run of the suite, which builds its fixtures for arm64\n", s.name)
		// A test that fails here is the host test run's to report (CI
		// runs it first); its fixtures are built before it checks
		// anything, and one it did not reach is named in the VM.
		if err := goCmd(root, []string{"RAWSTACK_CROSS_FIXTURES=arm64:" + fixtures},
			"test", "-count=1", "-run", s.run, "./"+s.pkg); err != nil {
			fmt.Printf("arm64vm: %s: the host's run failed (%v); the VM runs the suite with the fixtures it built\n", s.name, err)
		}
		bin := filepath.Join(work, "bin", s.name+".test")
		if err := goCmd(root, []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
			"test", "-c", "-o", bin, "./"+s.pkg); err != nil {
			return fmt.Errorf("%s: building the arm64 test binary: %w", s.name, err)
		}
		plan.Steps = append(plan.Steps, arm64vm.Step{
			Name: s.name, Dir: "/src/" + s.pkg, Path: "/bin/" + s.name + ".test",
			Args:    []string{"-test.v", "-test.count=1", "-test.run", s.run, "-test.timeout", s.timeout.String()},
			Timeout: s.timeout + 30*time.Second,
		})
	}
	// The command and its companions, for -sh scripts and by-hand runs.
	for _, c := range []string{"rawstack", "rawstack-ebpf", "rawstack-otlp"} {
		if err := goCmd(root, []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
			"build", "-o", filepath.Join(work, "bin", c), "./cmd/"+c); err != nil {
			return fmt.Errorf("building %s for arm64: %w", c, err)
		}
	}
	if script != "" {
		plan.Steps = append(plan.Steps, arm64vm.Step{Name: "sh", Dir: "/src", Path: "/bin/sh", Args: []string{"-c", script}})
	}
	init := filepath.Join(work, "init")
	if err := goCmd(root, []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
		"build", "-o", init, "./internal/arm64vm/guest"); err != nil {
		return fmt.Errorf("building the VM's /init: %w", err)
	}
	initrd := filepath.Join(work, "initramfs.cpio")
	if err := pack(initrd, root, init, busybox, filepath.Join(work, "bin"), fixtures, crossLibs, plan); err != nil {
		return fmt.Errorf("packing the initramfs: %w", err)
	}
	st, _ := os.Stat(initrd)
	fmt.Printf("arm64vm: booting %s with a %d MiB initramfs\n", filepath.Base(kernel), st.Size()>>20)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := arm64vm.Boot(ctx, qemu, kernel, initrd, os.Stdout)
	if err != nil {
		return err
	}
	if !res.Done {
		return errors.New("the VM powered off before every step ran (its console above says why)")
	}
	if res.Failed > 0 {
		return fmt.Errorf("%d of %d suites failed in the VM: %s", res.Failed, res.Passed+res.Failed, strings.Join(res.FailedSteps, ", "))
	}
	fmt.Printf("arm64vm: %d suites passed on the arm64 kernel\n", res.Passed)
	return nil
}

// goCmd runs the go command in dir with env added, its output shown.
func goCmd(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the rawstack module")
	}
	return filepath.Dir(mod), nil
}

// pack writes the initramfs: /init, /plan.json, the test binaries in
// /bin, the module's tracked files in /src (tests read their testdata
// and name their fixtures' inputs there), the fixtures in /fixtures and
// the cross toolchain's libraries where the arm64 dynamic linker looks.
// The sources are the work tree's files that git does not ignore.
func pack(out, root, init, busybox, bins, fixtures, crossLibs string, plan arm64vm.Plan) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	a := arm64vm.NewArchive(f)
	a.File("init", init)
	pj, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	a.Bytes(strings.TrimPrefix(arm64vm.PlanPath, "/"), 0o644, pj)
	a.Bytes("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	a.Bytes("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	a.Dir("root")
	if err := addTree(a, bins, "bin"); err != nil {
		return err
	}
	a.File("bin/busybox", busybox)
	for _, p := range extra {
		a.File("extra/"+filepath.Base(p), p)
	}
	for _, cmd := range busyboxCommands {
		a.Symlink("bin/"+cmd, "busybox")
	}
	// Untracked files too (not ignored ones): a fixture's key hashes
	// its inputs' directories as they are in the work tree.
	files, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		p := filepath.Join(root, name)
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		a.File("src/"+name, p)
	}
	if _, err := os.Stat(fixtures); err == nil {
		if err := addTree(a, fixtures, "fixtures"); err != nil {
			return err
		}
	}
	if err := addTree(a, crossLibs, "lib/aarch64-linux-gnu"); err != nil {
		return err
	}
	a.Symlink("lib/ld-linux-aarch64.so.1", "aarch64-linux-gnu/ld-linux-aarch64.so.1")
	a.Symlink("usr/lib", "../lib")
	a.Symlink("usr/bin", "../bin")
	return a.Close()
}

// busyboxCommands are the commands tests run (sh and the few they call
// by name), linked to busybox.
var busyboxCommands = []string{"sh", "true", "false", "sleep", "timeout", "cat", "echo", "env", "kill", "ls", "ps", "yes", "dd", "head", "base64"}

// addTree adds the files below dir as below name, following symbolic
// links (a fixture directory is a link into the fixture cache; the
// libraries' names are links to their files).
func addTree(a *arm64vm.Archive, dir, name string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		dst := filepath.ToSlash(filepath.Join(name, rel))
		st, err := os.Stat(p)
		if err != nil {
			return nil // a dangling link
		}
		switch {
		case st.IsDir() && d.Type()&fs.ModeSymlink != 0:
			return addTree(a, p, dst)
		case st.IsDir():
			a.Dir(dst)
		case st.Mode().IsRegular():
			a.File(dst, p)
		}
		return nil
	})
}
