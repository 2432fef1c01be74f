//go:build linux

package rawstackprocessor

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

func needBPF(t *testing.T) {
	t.Helper()
	if err := linux.ProbeBPF(); err != nil {
		var pe *platform.PermissionError
		if errors.Is(err, platform.ErrNotSupported) || errors.As(err, &pe) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

var agentSummary = regexp.MustCompile(`otlp \S+: (\d+) samples sent in \d+ batches \(\d+ bytes, \d+ on the wire\), (\d+) lost \((\d+) queue full, \d+ rejected, (\d+) unsent at exit; .*; (\d+) taken, `)

// agentLine is the one line rawstack agent prints, at its end.
type agentLine struct {
	sent, lost, queueFull, unsent, taken int64
}

func parseAgentLine(t *testing.T, stderr string) agentLine {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "rawstack agent: otlp ") {
		t.Fatalf("agent printed %d lines, want its one summary line:\n%s", len(lines), stderr)
	}
	m := agentSummary.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("summary %q: not in the expected form", lines[0])
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
	return agentLine{sent: n(1), lost: n(2), queueFull: n(3), unsent: n(4), taken: n(5)}
}

// sinkTotal counts the samples a sink received, all processes.
func sinkTotal(t *testing.T, sink *consumertest.ProfilesSink) (total int64, perPidN map[int64]int, chainN map[int64]int) {
	samples, chain := perPid(t, sink)
	for _, n := range samples {
		total += int64(n)
	}
	return total, samples, chain
}

// waitPid waits until the sink holds samples of pid.
func waitPid(t *testing.T, sink *consumertest.ProfilesSink, pid int, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if s, _ := perPid(t, sink); s[int64(pid)] > 0 {
			return
		}
	}
	t.Fatalf("no samples of pid %d arrived within %v", pid, within)
}

// TestAgent runs rawstack agent as a daemon runs it: the whole host into
// the in-process Collector (receiver and this processor), a program
// profiled among the host's others and named from debug files by build
// id; the Collector stops for a while mid-run with a queue of two
// batches, so some batches are dropped; SIGTERM ends the agent, which
// exits 0 after one summary line: every sample it counts as sent
// arrived, and sent plus lost is every sample taken.
func TestAgent(t *testing.T) {
	needBPF(t)
	bin, dbg := chain(t)
	c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
	agent, stderr := startAgent(t, "--otlp-endpoint", c.addr, "-F", "99", "--otlp-interval", "200ms", "--otlp-queue", "2")

	// Two programs among the host's, until their samples arrive named:
	// one in a cgroup named as Docker names a container's, one that names
	// its service in its environment.
	boxed, svc, want := startPrograms(t, bin, "agent-test-svc")
	waitPid(t, c.sink, boxed.Process.Pid, time.Minute)
	waitPid(t, c.sink, svc.Process.Pid, time.Minute)
	onlyProcess(t, agent.Process.Pid)
	svc.Process.Kill()
	svc.Wait()
	checkResources(t, c.sink, want)

	// The Collector goes away for 3 s: 15 batches are cut, the queue
	// keeps 2.
	c.stop()
	time.Sleep(3 * time.Second)
	c.start(t, c.addr)
	time.Sleep(2 * time.Second)
	boxed.Process.Kill()
	boxed.Wait()
	time.Sleep(time.Second)

	sum := stopAgent(t, agent, stderr)
	got, samples, _ := sinkTotal(t, c.sink)
	t.Logf("the Collector received %d samples of %d processes", got, len(samples))
	if got != sum.sent {
		t.Errorf("the Collector received %d samples, the agent says it sent %d", got, sum.sent)
	}
	if sum.sent+sum.lost != sum.taken {
		t.Errorf("sent %d + lost %d != taken %d", sum.sent, sum.lost, sum.taken)
	}
	if sum.queueFull == 0 {
		t.Errorf("a Collector down for 3 s with a queue of 2 batches of 200 ms lost nothing to the queue: %+v", sum)
	}
}

// onlyProcess holds the running agent to one process: rawstack agent
// execs rawstack-ebpf in its place, which streams OTLP itself (no
// rawstack-otlp child, no second Go runtime).
func onlyProcess(t *testing.T, pid int) {
	t.Helper()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(comm)); got != "rawstack-ebpf" {
		t.Errorf("the agent's process is %q, want rawstack-ebpf (rawstack agent execs it)", got)
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the agent's threads: %v", err)
	}
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			t.Errorf("the agent has children (%s: %s), want one process", f, b)
		}
	}
}

// startAgent starts rawstack agent with args, its output kept.
func startAgent(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	agent := exec.Command(rawstackCLI(t), append([]string{"agent"}, args...)...)
	var stderr bytes.Buffer
	agent.Stderr, agent.Stdout = &stderr, &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill() })
	return agent, &stderr
}

// stopAgent ends the agent as a service manager does, with SIGTERM: it
// exits 0 after its one summary line, which stopAgent returns.
func stopAgent(t *testing.T, agent *exec.Cmd, stderr *bytes.Buffer) agentLine {
	t.Helper()
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v\n%s", err, stderr.String())
	}
	t.Log(strings.TrimSpace(stderr.String()))
	return parseAgentLine(t, stderr.String())
}

// startPrograms starts the chain fixture twice, for a minute: once in a
// container-like cgroup, once naming its service in OTEL_SERVICE_NAME;
// it returns them and the resource attributes each should arrive with.
func startPrograms(t *testing.T, bin, service string) (boxed, svc *exec.Cmd, want map[int]map[string]string) {
	t.Helper()
	procs, cid := containerCgroup(t)
	boxed = exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$1" 60`, procs, bin)
	svc = exec.Command(bin, "60")
	svc.Env = append(os.Environ(), "OTEL_SERVICE_NAME="+service)
	for _, c := range []*exec.Cmd{boxed, svc} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	want = map[int]map[string]string{
		boxed.Process.Pid: {"container.id": cid, "process.executable.path": bin, "process.executable.name": "chain"},
		svc.Process.Pid:   {"service.name": service, "process.executable.path": bin, "process.executable.name": "chain"},
	}
	return boxed, svc, want
}

// checkResources holds each program's resource to the attributes it
// should carry, and its samples to the chain, named.
func checkResources(t *testing.T, sink *consumertest.ProfilesSink, want map[int]map[string]string) {
	t.Helper()
	samples, named := perPid(t, sink)
	for pid, w := range want {
		res := resourceOf(sink, pid)
		for k, v := range w {
			if res[k] != v {
				t.Errorf("pid %d: %s = %v, want %q (resource %v)", pid, k, res[k], v, res)
			}
		}
		if res["host.name"] == nil || res["host.id"] == nil || res["os.type"] != "linux" {
			t.Errorf("pid %d: resource %v", pid, res)
		}
		n := samples[int64(pid)]
		t.Logf("pid %d: %d samples, %d named c;b;a;main; resource %v", pid, n, named[int64(pid)], res)
		if n == 0 || named[int64(pid)] < n/2 {
			t.Errorf("pid %d: %d of %d samples named c;b;a;main", pid, named[int64(pid)], n)
		}
	}
}

// containerCgroup makes a cgroup named as Docker names a container's
// (v2: docker-ID.scope under system.slice; v1: docker/ID in the pids
// hierarchy) and returns its cgroup.procs file and the id.
func containerCgroup(t *testing.T) (procs, id string) {
	t.Helper()
	var b [32]byte
	rand.Read(b[:])
	id = hex.EncodeToString(b[:])
	var dirs []string
	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers"): // v2
		dirs = []string{"/sys/fs/cgroup/system.slice", "/sys/fs/cgroup/system.slice/docker-" + id + ".scope"}
	case fileExists("/sys/fs/cgroup/unified/cgroup.procs"): // hybrid: v2 beside v1
		dirs = []string{"/sys/fs/cgroup/unified/system.slice", "/sys/fs/cgroup/unified/system.slice/docker-" + id + ".scope"}
	case fileExists("/sys/fs/cgroup/pids/cgroup.procs"): // v1
		dirs = []string{"/sys/fs/cgroup/pids/docker", "/sys/fs/cgroup/pids/docker/" + id}
	default:
		t.Skip("no cgroup hierarchy to make a container's cgroup in")
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			if os.IsPermission(err) || errors.Is(err, syscall.EROFS) {
				t.Skipf("making a container-like cgroup: %v", err)
			}
			t.Fatal(err)
		}
	}
	leaf := dirs[len(dirs)-1]
	t.Cleanup(func() {
		// rmdir fails while a process is in it: wait for the kills.
		for i := 0; i < 50 && os.Remove(leaf) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	return filepath.Join(leaf, "cgroup.procs"), id
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// resourceOf returns the resource attributes the sink received for pid
// (the last batch's).
func resourceOf(sink *consumertest.ProfilesSink, pid int) map[string]any {
	var got map[string]any
	for _, pd := range sink.AllProfiles() {
		for _, rp := range pd.ResourceProfiles().All() {
			if v, ok := rp.Resource().Attributes().Get("process.pid"); ok && v.Int() == int64(pid) {
				got = rp.Resource().Attributes().AsRaw()
			}
		}
	}
	return got
}

// TestAgentContainer runs rawstack agent (the whole host) while a
// program that exists only inside a container (its own mount and pid
// namespaces, at a path the host does not have) runs, and a Python 3.12
// that exists only inside another, then ends the containers and deletes
// their roots while the agent still sends: their samples arrive named, from the build-id cache the agent filled while
// the program lived, on the host (--otlp-raw=false) and in the Collector
// (raw), whose processor is given the host's cache as a debug directory.
func TestAgentContainer(t *testing.T) {
	needBPF(t)
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	bin, _ := chain(t)
	for _, raw := range []bool{true, false} {
		t.Run("raw="+strconv.FormatBool(raw), func(t *testing.T) {
			cache := t.TempDir()
			c := startCollector(t, &Config{DebugDirs: []string{cache}}, "")
			agent, stderr := startAgent(t, "--otlp-endpoint", c.addr, "-F", "99", "--otlp-interval", "200ms",
				"--buildid-cache", cache, "--otlp-raw="+strconv.FormatBool(raw))
			root := testbuild.ContainerRoot(t, map[string]string{bin: "/app/chain"}, nil, bin)
			pid, cmd := testbuild.Container(t, root, nil, "", "/app/chain", "60")
			spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
			pyRoot, pyPid, pyCmd := testbuild.PythonContainer(t, spin, "ready", "60")
			waitPid(t, c.sink, pid, time.Minute)
			waitPid(t, c.sink, pyPid, time.Minute)
			time.Sleep(time.Second)
			for _, p := range []struct {
				pid  int
				cmd  *exec.Cmd
				root string
			}{{pid, cmd, root}, {pyPid, pyCmd, pyRoot}} {
				syscall.Kill(p.pid, syscall.SIGKILL) // the container ends
				p.cmd.Wait()
				os.RemoveAll(p.root)
			}
			time.Sleep(time.Second) // batches sent after the containers are gone
			stopAgent(t, agent, stderr)
			samples, named := perPid(t, c.sink)
			n := samples[int64(pid)]
			t.Logf("pid %d: %d samples, %d named c;b;a;main", pid, n, named[int64(pid)])
			if n == 0 || float64(named[int64(pid)]) < 0.95*float64(n) {
				t.Errorf("pid %d: %d of %d samples named c;b;a;main, want >= 95%%", pid, named[int64(pid)], n)
			}
			// Python 3.12 in its own container: its frames are read
			// through the container's root on the host, its
			// interpreter named from the cache.
			pySamples, pyNamed := perPidChain(t, c.sink, "gamma_py;beta_py;alpha_py")
			_, inEval := perPidChain(t, c.sink, "_PyEval_EvalFrameDefault")
			pn := pySamples[int64(pyPid)]
			t.Logf("python pid %d: %d samples, %d named gamma_py;beta_py;alpha_py, %d in _PyEval_EvalFrameDefault (named)", pyPid, pn, pyNamed[int64(pyPid)], inEval[int64(pyPid)])
			// The process's start-up carries no Python frames until the
			// agent has found its interpreter and told the eBPF program
			// (at the read that follows its first sample, or up to one
			// whole-host read period, 1 s, later when the interpreter
			// was not mapped yet then: platform/linux/ebpf's doc);
			// the rest does, to its exit. Both are held: the wait
			// (0.1-0.7 s seen) and the share after it (95-99% seen).
			wait, after, afterNamed := pythonStart(t, c.sink, pyPid, "gamma_py;beta_py;alpha_py")
			t.Logf("python pid %d: interpreter known %v into its samples; then %d of %d samples named", pyPid, wait, afterNamed, after)
			if wait > 1500*time.Millisecond || after == 0 || float64(afterNamed) < 0.95*float64(after) {
				t.Errorf("python pid %d: Python frames from %v into its samples, then in %d of %d samples; want within 1.5 s, then >= 95%%", pyPid, wait, afterNamed, after)
			}
			if float64(inEval[int64(pyPid)]) < 0.7*float64(pn) {
				t.Errorf("python pid %d: %d of %d samples name the container's interpreter (_PyEval_EvalFrameDefault), want >= 70%%", pyPid, inEval[int64(pyPid)], pn)
			}
		})
	}
}

// TestAgentRuntimes is the matrix's Python and JIT rows for the agent:
// rawstack agent, raw (its default: the host names the Python and JIT
// frames, which the Collector cannot see, and the processor the native
// ones) and named on the host (--otlp-raw=false), into the in-process
// Collector, while a Python 3.12 program, node --perf-basic-prof, a JVM
// and node with no flag run.
// The share of each program's samples that name its frames is what
// folded output gives for a recording of the same program with the same
// back end (eBPF), within 5 points and three standard errors of the two
// shares (two runs of a program on a loaded machine, which gives the
// Python program, timed by the clock, few samples; the agent sees a
// process from its first sample on).
func TestAgentRuntimes(t *testing.T) {
	needBPF(t)
	cli := rawstackCLI(t)
	// With the matrix's rows, node with no flag: shop.js's chain, which
	// TurboFan inlines into one function, named from V8's own metadata
	// (issue 34), its three functions innermost first.
	shop, _ := filepath.Abs("../../cmd/rawstack/testdata/jit/shop.js")
	rows := append(runtimeRows("4", "3000"), runtimeRow{"node-noflag", func(t *testing.T) []string {
		return []string{testbuild.Need(t, "node", "the JIT rows record node"), shop, "3000000"}
	}, "mix;total;handle", "handle;total;mix"})
	want := map[string]float64{}
	wantN := map[string]int64{}
	for _, row := range rows {
		file := filepath.Join(t.TempDir(), row.name+".rawstack")
		args := append([]string{"record", "-q", "--backend", "ebpf", "-F", "99", "-o", file, "--"}, row.argv(t)...)
		rec := exec.Command(cli, args...)
		rec.Dir = t.TempDir() // node --perf-basic-prof leaves isolate-*-v8.log files there
		if out, err := rec.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		want[row.name], wantN[row.name] = foldedShare(t, cli, file, row.rootFirst)
	}
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			c := startCollector(t, &Config{}, "")
			agent, stderr := startAgent(t, "--otlp-endpoint", c.addr, "-F", "99", "--otlp-interval", "200ms", "--otlp-raw="+strconv.FormatBool(raw))
			time.Sleep(2 * time.Second) // the agent's start: its BPF programs loaded
			// One program at a time, as they were recorded alone.
			progs := map[string]*exec.Cmd{}
			for _, row := range rows {
				argv := row.argv(t)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Dir = t.TempDir()
				if err := cmd.Run(); err != nil {
					t.Fatalf("%q: %v", argv, err)
				}
				progs[row.name] = cmd
			}
			time.Sleep(time.Second) // the last batch
			stopAgent(t, agent, stderr)
			for _, row := range rows {
				pid := int64(progs[row.name].Process.Pid)
				samples, named := perPidChain(t, c.sink, row.leafFirst)
				share := float64(named[pid]) / float64(max(samples[pid], 1))
				t.Logf("%s: %s named in %.1f%% of %d samples; %.1f%% in folded output of a recording", row.name, row.leafFirst, 100*share, samples[pid], 100*want[row.name])
				if samples[pid] < 20 {
					t.Errorf("%s: %d samples of pid %d arrived", row.name, samples[pid], pid)
				}
				p := want[row.name]
				tol := 0.05 + 3*math.Sqrt(p*(1-p)/float64(max(samples[pid], 1))+p*(1-p)/float64(max(wantN[row.name], 1)))
				if d := share - p; d < -tol || d > tol {
					t.Errorf("%s: %.1f%% named through the agent, %.1f%% in folded output (±%.1f)", row.name, 100*share, 100*p, 100*tol)
				}
			}
		})
	}
}

// pythonStart reads pid's samples in time order: how long after its
// first sample the first one with chain came, and of the samples from
// that one on, how many have chain.
func pythonStart(t *testing.T, sink *consumertest.ProfilesSink, pid int, chain string) (wait time.Duration, after, named int) {
	t.Helper()
	type sample struct {
		t  uint64
		ok bool
	}
	var all []sample
	for _, pd := range sink.AllProfiles() {
		d := pd.Dictionary()
		for _, rp := range pd.ResourceProfiles().All() {
			if v, ok := rp.Resource().Attributes().Get("process.pid"); !ok || v.Int() != int64(pid) {
				continue
			}
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, smp := range pr.Samples().All() {
						ok := strings.Contains(stackNames(d, smp.StackIndex()), chain)
						for _, ts := range smp.TimestampsUnixNano().All() {
							all = append(all, sample{ts, ok})
						}
					}
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b sample) int { return cmp.Compare(a.t, b.t) })
	first := slices.IndexFunc(all, func(s sample) bool { return s.ok })
	if first < 0 {
		return 0, 0, 0
	}
	for _, s := range all[first:] {
		after++
		if s.ok {
			named++
		}
	}
	return time.Duration(all[first].t - all[0].t), after, named
}
