package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The startup scenario (issue 14) times "rawstack --help", the floor under
// every short command, against a Go program that does nothing, built the
// same way (CGO_ENABLED=0), and that against a static C program that does
// nothing (when cc is installed): the floor of the Go runtime and the
// floor of any process on this machine. Runs alternate A B C A B C; each
// row gives the medians and the median of the per-round ratios. The
// minor page faults of each (from wait4's rusage) are the figure that
// does not vary with load, and on a virtual machine where a fault exits
// to the hypervisor they are most of the time. Target: ≤ 3 ms on an idle
// machine. GODEBUG=inittrace=1 (and TestStartupInitCost in cmd/rawstack)
// says which package's init costs what.
func init() {
	register(&scenario{name: "startup", order: 140, run: runStartup})
}

func runStartup(cfg *config) ([]row, error) {
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "trivial")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module trivial\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	triv := filepath.Join(dir, "trivial")
	build := exec.Command("go", "build", "-o", triv, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build trivial: %v\n%s", err, out)
	}
	// The floor of a Go tool that reads ELF files and takes flags: an
	// empty main that imports only debug/elf, flag, fmt and os (their
	// package init and the pages it touches), built the same way.
	elfDir := filepath.Join(cfg.work, "elfcli")
	if err := os.MkdirAll(elfDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(elfDir, "main.go"), []byte("package main\n\nimport (\n\t_ \"debug/elf\"\n\t_ \"flag\"\n\t_ \"fmt\"\n\t_ \"os\"\n)\n\nfunc main() {}\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(elfDir, "go.mod"), []byte("module elfcli\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	elfCLI := filepath.Join(elfDir, "elfcli")
	build = exec.Command("go", "build", "-o", elfCLI, ".")
	build.Dir = elfDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build elfcli: %v\n%s", err, out)
	}
	// The floor of rawstack's packages: an empty main that imports every
	// package rawstack imports, so that it runs the same package init
	// work, in a smaller binary (only what the inits reach is linked).
	// Between it and rawstack --help lie main's own work and the size of
	// the binary (runtime start work proportional to it, code spread over
	// more pages).
	importsFloor, err := buildImportsFloor(cfg)
	if err != nil {
		return nil, err
	}
	// The linker writes its output through a shared mapping, which leaves
	// the file in 4 KB pages in the page cache; a copy written with
	// write(2) (cp, install) sits in large folios, and a page fault then
	// maps its neighbours for less kernel work. Both sides are timed
	// again from such copies.
	cliCopy, err := copyFile(cli, filepath.Join(cfg.work, "rawstack-copy"))
	if err != nil {
		return nil, err
	}
	trivCopy, err := copyFile(triv, filepath.Join(dir, "trivial-copy"))
	if err != nil {
		return nil, err
	}
	// The C floor: a static binary, no dynamic loader, no runtime.
	var cFloor, cNote string
	if cc, err := exec.LookPath("cc"); err != nil {
		cNote = "cc not installed: no C floor"
	} else {
		src := filepath.Join(dir, "empty.c")
		if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
			return nil, err
		}
		cFloor = filepath.Join(dir, "empty-c")
		if out, err := exec.Command(cc, "-O2", "-static", "-o", cFloor, src).CombinedOutput(); err != nil {
			cFloor, cNote = "", fmt.Sprintf("cc -static failed (no static libc?): %v %s", err, strings.TrimSpace(string(out)))
		}
	}
	// A round is 7 starts of ~1-2 ms: 101 rounds take a few seconds and
	// halve the spread of the medians against 31 on a loaded machine.
	pairs := 101
	if cfg.short {
		pairs = 11
	}
	type result struct{ ms, cpu, faults []float64 }
	timeRun := func(r *result, args ...string) error {
		start := time.Now()
		c := exec.Command(args[0], args[1:]...)
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		r.ms = append(r.ms, ms(time.Since(start)))
		r.faults = append(r.faults, float64(minorFaults(c.ProcessState)))
		r.cpu = append(r.cpu, ms(c.ProcessState.UserTime()+c.ProcessState.SystemTime()))
		return nil
	}
	load0 := loadAvg()
	var raw, goFloor, cRes, elfRes, impRes, rawCopy, trivCopyRes result
	var ratio, goRatio, elfRatio, cpuRatio, elfCPURatio, impCPURatio, copyCPURatio []float64
	if cNote != "" {
		if err := needPeer(cNote); err != nil {
			return nil, err
		}
	}
	for i := 0; i < pairs; i++ {
		sides := []func() error{
			func() error { return timeRun(&raw, cli, "--help") },
			func() error { return timeRun(&goFloor, triv) },
			func() error { return timeRun(&elfRes, elfCLI) },
			func() error { return timeRun(&impRes, importsFloor) },
			func() error { return timeRun(&rawCopy, cliCopy, "--help") },
			func() error { return timeRun(&trivCopyRes, trivCopy) },
		}
		if cFloor != "" {
			sides = append(sides, func() error { return timeRun(&cRes, cFloor) })
		}
		if err := inTurn(i, sides...); err != nil {
			return nil, err
		}
		ratio = append(ratio, raw.ms[i]/goFloor.ms[i])
		elfRatio = append(elfRatio, elfRes.ms[i]/goFloor.ms[i])
		if goFloor.cpu[i] > 0 {
			cpuRatio = append(cpuRatio, raw.cpu[i]/goFloor.cpu[i])
			elfCPURatio = append(elfCPURatio, elfRes.cpu[i]/goFloor.cpu[i])
			impCPURatio = append(impCPURatio, impRes.cpu[i]/goFloor.cpu[i])
		}
		if trivCopyRes.cpu[i] > 0 {
			copyCPURatio = append(copyCPURatio, rawCopy.cpu[i]/trivCopyRes.cpu[i])
		}
		if cFloor != "" {
			goRatio = append(goRatio, goFloor.ms[i]/cRes.ms[i])
		}
	}
	load := fmt.Sprintf("loadavg %s → %s", load0, loadAvg())
	rows := []row{
		{Scenario: "startup", Metric: "ms rawstack --help, process start to exit", Rawstack: median(raw.ms), Peer: "empty Go program", PeerVal: median(goFloor.ms), Better: "lower",
			Note: fmt.Sprintf("target ≤ 3 ms; median ratio of %d alternating rounds %.2f; %s", pairs, median(ratio), load)},
	}
	// CPU time (user + system, from wait4) varies less with the machine's
	// load than wall time does: a process waiting for a CPU is not charged.
	if len(cpuRatio) > 0 {
		rows = append(rows, row{Scenario: "startup", Metric: "CPU ms rawstack --help (user+sys)", Rawstack: median(raw.cpu), Peer: "empty Go program", PeerVal: median(goFloor.cpu), Better: "lower",
			Note: fmt.Sprintf("median ratio %.2f; an empty Go program importing debug/elf, flag, fmt, os: %.3f ms, ratio %.2f; one importing every package rawstack imports: %.3f ms, ratio %.2f", median(cpuRatio), median(elfRes.cpu), median(elfCPURatio), median(impRes.cpu), median(impCPURatio))})
	}
	rows = append(rows, row{Scenario: "startup", Metric: "ms empty Go program importing debug/elf, flag, fmt, os", Rawstack: median(elfRes.ms), Peer: "empty Go program", PeerVal: median(goFloor.ms), Better: "lower",
		Note: fmt.Sprintf("the floor of a Go tool that reads ELF files and takes flags; median ratio %.2f (rawstack --help's goal: <= 1.20); minor faults %.0f against %.0f", median(elfRatio), median(elfRes.faults), median(goFloor.faults))})
	rows = append(rows, row{Scenario: "startup", Metric: "CPU ms rawstack --help, copies written with cp (large page-cache folios)", Rawstack: median(rawCopy.cpu), Peer: "empty Go program, copied", PeerVal: median(trivCopyRes.cpu), Better: "lower",
		Note: fmt.Sprintf("median ratio %.2f; the copies against the linker-written empty program: %.2f and %.2f", median(copyCPURatio), median(rawCopy.cpu)/median(goFloor.cpu), median(trivCopyRes.cpu)/median(goFloor.cpu))})
	rows = append(rows, row{Scenario: "startup", Metric: "CPU ms empty Go program importing every package rawstack imports", Rawstack: median(impRes.cpu), Peer: "empty Go program", PeerVal: median(goFloor.cpu), Better: "lower",
		Note: fmt.Sprintf("the package-init floor of rawstack's imports (their init work, in a smaller binary); median ratio %.2f; minor faults %.0f", median(impCPURatio), median(impRes.faults))})
	if cFloor != "" {
		rows = append(rows, row{Scenario: "startup", Metric: "ms empty Go program (the Go floor)", Rawstack: median(goFloor.ms), Peer: "empty static C program", PeerVal: median(cRes.ms), Better: "lower",
			Note: fmt.Sprintf("what the Go runtime's start costs here; median ratio %.2f", median(goRatio))})
	} else {
		rows = append(rows, row{Scenario: "startup", Metric: "ms empty Go program (the Go floor)", Rawstack: median(goFloor.ms), Note: cNote})
	}
	if median(raw.faults) > 0 {
		note := "the same in every run; on this kind of VM each costs µs"
		if cFloor != "" {
			note = fmt.Sprintf("empty static C program: %.0f", median(cRes.faults))
		}
		rows = append(rows, row{Scenario: "startup", Metric: "minor page faults, rawstack --help", Rawstack: median(raw.faults), Peer: "empty Go program", PeerVal: median(goFloor.faults), Better: "lower", Note: note})
	}
	return rows, nil
}

// buildImportsFloor builds an empty main that imports every package
// cmd/rawstack imports (go list -deps), placed by an overlay inside this
// module so that its internal packages may be imported, and returns the
// binary's path.
func buildImportsFloor(cfg *config) (string, error) {
	const cli = "github.com/rawstack/rawstack/cmd/rawstack"
	list := exec.Command("go", "list", "-deps", cli)
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps %s: %v", cli, err)
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		return "", fmt.Errorf("go env GOMOD: %v (run from the repository)", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range strings.Fields(string(out)) {
		// The package sits in cmd/internal: it may import the module's
		// internal and cmd/internal packages, no other internal ones.
		visible := strings.HasPrefix(p, "github.com/rawstack/rawstack/internal/") || strings.HasPrefix(p, "github.com/rawstack/rawstack/cmd/internal/")
		internal := strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal")
		if p == cli || p == "unsafe" || p == "C" || strings.HasPrefix(p, "vendor/") || (internal && !visible) {
			continue // not importable from here; what imports it does
		}
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	dir := filepath.Join(cfg.work, "importsfloor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	mainGo := filepath.Join(dir, "main.go")
	if err := os.WriteFile(mainGo, []byte(src.String()), 0o644); err != nil {
		return "", err
	}
	pkgDir := filepath.Join(root, "cmd", "internal", "startupfloor") // may import cmd/internal/...
	overlay := filepath.Join(dir, "overlay.json")
	ov := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(pkgDir, "main.go"), mainGo)
	if err := os.WriteFile(overlay, []byte(ov), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "importsfloor")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", bin, "./cmd/internal/startupfloor")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build imports floor: %v\n%s", err, out)
	}
	return bin, nil
}

// copyFile copies src to dst with write(2), executable.
func copyFile(src, dst string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, b, 0o755)
}

// loadAvg is the 1, 5 and 15 minute load average, "" where unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
