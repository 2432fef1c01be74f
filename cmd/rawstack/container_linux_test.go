package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// TestContainerNative records a program that exists only inside its
// container, from the host, with each back end; converts the trace after
// the container has exited and its root is deleted; and finds its call
// chain named in the samples, from the files the recording copied into
// the build-id cache while the program ran. Without the cache
// (--no-buildid-cache) the same trace names none of them: the cache is
// what names them.
func TestContainerNative(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/chainpriv", "{in0}"},
		Inputs: []string{"testdata/container/chainpriv.c"},
		Out:    "chainpriv",
	})
	backends := [][]string{{"--backend", "perf"}, {"--backend", "ebpf"}}
	for _, be := range backends {
		t.Run(be[1], func(t *testing.T) {
			if be[1] == "ebpf" {
				testbuild.Feature(t, linux.ProbeBPF())
			}
			cache := t.TempDir()
			t.Setenv(idcache.Env, cache)
			root := testbuild.ContainerRoot(t, map[string]string{bin: "/app/chainpriv"}, nil, bin)
			pid, cmd := testbuild.Container(t, root, nil, "", "/app/chainpriv", "2.5")
			trace := filepath.Join(t.TempDir(), "t.rawstack")
			args := append([]string{"record", "-q", "-F", "499", "-o", trace, "-p", strconv.Itoa(pid), "--duration", "1.5s"}, be...)
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != 0 {
				t.Fatalf("%q exited %d: %s", args, code, stderr.String())
			}
			t.Logf("%s", strings.TrimSpace(stderr.String()))
			if !strings.Contains(stderr.String(), "build-id cache") {
				t.Errorf("the summary does not say what the build-id cache got: %s", stderr.String())
			}
			cmd.Wait()
			os.RemoveAll(root) // the container is gone
			share, n := foldedShare(t, trace, "alpha_step;beta_step;gamma_step")
			t.Logf("%d samples, %.1f%% with main's chain named after the container was deleted", n, 100*share)
			if share < 0.95 {
				t.Errorf("%.1f%% of the samples name alpha_step;beta_step;gamma_step, want >= 95%%", 100*share)
			}
			// The control: the same trace without the cache.
			t.Setenv(idcache.Env, t.TempDir())
			if none, _ := foldedShare(t, trace, "gamma_step"); none > 0 {
				t.Errorf("without the build-id cache %.1f%% of the samples still name gamma_step: the test does not test the cache", 100*none)
			}
		})
	}
}

// recordContainer records the container process pid with args for
// 1.5 s (or until it exits), ends the container, deletes its root and
// returns the trace.
func recordContainer(t *testing.T, pid int, cmd *exec.Cmd, root string, args ...string) string {
	t.Helper()
	return recordContainerFor(t, "1.5s", pid, cmd, root, args...)
}

// recordContainerFor is recordContainer for at most duration.
func recordContainerFor(t *testing.T, duration string, pid int, cmd *exec.Cmd, root string, args ...string) string {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	args = append([]string{"record", "-q", "-F", "499", "-o", trace, "-p", strconv.Itoa(pid), "--duration", duration}, args...)
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%q exited %d: %s", args, code, stderr.String())
	}
	t.Logf("%s", strings.TrimSpace(stderr.String()))
	syscall.Kill(pid, syscall.SIGKILL) // the container's init: the container ends
	cmd.Wait()
	os.RemoveAll(root)
	return trace
}

// TestContainerPython records a Python 3.12 whose interpreter and
// libpython exist only inside its container (pyenv's, at /opt/py), with
// each back end, and converts after the container is gone: the Python
// chain is spliced at the interpreter's evaluation frames as outside a
// container (the interpreter's state read through the process's root at
// each sample, its native frames named from the build-id cache).
func TestContainerPython(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for _, be := range []string{"perf", "ebpf"} {
		t.Run(be, func(t *testing.T) {
			if be == "ebpf" {
				testbuild.Feature(t, linux.ProbeBPF())
			}
			t.Setenv(idcache.Env, t.TempDir())
			root, pid, cmd := testbuild.PythonContainer(t, spin, "ready", "4")
			trace := recordContainer(t, pid, cmd, root, "--backend", be)
			in, n := foldedShare(t, trace, "_PyEval_EvalFrameDefault")
			chain, _ := foldedShare(t, trace, "_PyEval_EvalFrameDefault", "alpha_py;beta_py;gamma_py")
			t.Logf("%d samples, %.1f%% in the interpreter, %.1f%% of those with alpha_py;beta_py;gamma_py", n, 100*in, 100*chain/max(in, 1e-9))
			if in < 0.5 || chain/in < 0.85 {
				t.Errorf("%.1f%% of the interpreter's samples have the Python chain (%.1f%% in the interpreter), want >= 85%%", 100*chain/max(in, 1e-9), 100*in)
			}
		})
	}
}

// TestContainerNode records node running with --perf-basic-prof or
// --perf-prof inside its container (node at /opt/node) with each back
// end: fibJit is named after the container is gone, as outside one.
func TestContainerNode(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	node := needNode(t, "the container Node test runs node inside a container")
	node, _ = filepath.EvalSymlinks(node)
	app, _ := filepath.Abs("testdata/jit/app.js")
	// Its frames come from the perf map in the container's /tmp
	// (--perf-basic-prof, read as node runs) or from the jitdump file
	// node mmaps in its working directory (--perf-prof), each named by
	// the pid the process has in its own namespace. Node writes its
	// jitdump through a 2 MiB stdio buffer, flushed when it exits: that
	// node runs a fixed ~0.5 s of work and the recording lasts until it
	// exits, however slowly a loaded machine runs it (CI once ended a
	// 1.5 s recording before node's exit, its jitdump unflushed: 0.4%
	// named); frame pointers (no stack copy: no V8 reader) leave the
	// names to the jitdump alone.
	type source struct{ name, flag, rounds, unwind, duration string }
	for _, src := range []source{{"perf-map", "--perf-basic-prof", "100000", "auto", "1.5s"}, {"jitdump", "--perf-prof", "600", "fp", "60s"}} {
		for _, be := range []string{"perf", "ebpf"} {
			t.Run(src.name+"/"+be, func(t *testing.T) {
				if be == "ebpf" {
					testbuild.Feature(t, linux.ProbeBPF())
				}
				t.Setenv(idcache.Env, t.TempDir())
				root := testbuild.ContainerRoot(t, map[string]string{node: "/opt/node/bin/node", app: "/app/app.js"}, nil, node)
				pid, cmd := testbuild.Container(t, root, nil, "", "/opt/node/bin/node", src.flag, "/app/app.js", src.rounds)
				trace := recordContainerFor(t, src.duration, pid, cmd, root, "--backend", be, "--unwind", src.unwind)
				share, n := foldedShare(t, trace, "fibJit")
				t.Logf("%d samples, fibJit named in %.1f%%", n, 100*share)
				if share < 0.8 {
					var top []string
					eachFolded(t, trace, func(stack string, n int64) {
						if len(top) < 3 {
							top = append(top, fmt.Sprintf("%d %s", n, stack))
						}
					})
					t.Errorf("fibJit named in %.1f%% of the samples, want >= 80%% as outside a container; stacks such as:\n%s", 100*share, strings.Join(top, "\n"))
				}
			})
		}
	}
}

// TestContainerDebugFile records a container's stripped program whose
// debug file only the container has (its /usr/lib/debug/.build-id, as
// a -dbg package installs it): the recording copies the debug file into
// the build-id cache with the program, and the chain is named after the
// container is gone.
func TestContainerDebugFile(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	testbuild.Need(t, "objcopy", "splits the container program's debug file")
	dir := testbuild.Build(t, testbuild.Cmd{
		Tool:   "sh",
		Args:   []string{"-c", "cc -O2 -g -fno-omit-frame-pointer -Wl,--build-id -o {dir}/prog {in0} && objcopy --only-keep-debug {dir}/prog {dir}/prog.debug && objcopy --strip-all {dir}/prog {dir}/prog.stripped && mkdir -p {dir}/d && mv {dir}/prog.debug {dir}/prog.stripped {dir}/d/"},
		Inputs: []string{"testdata/container/chainpriv.c"},
		Out:    "d",
	})
	bin := filepath.Join(dir, "prog.stripped")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	id := locate.BuildID(f)
	f.Close()
	cache := t.TempDir()
	t.Setenv(idcache.Env, cache)
	root := testbuild.ContainerRoot(t, map[string]string{
		bin:                              "/app/chainpriv",
		filepath.Join(dir, "prog.debug"): idcache.Path("/usr/lib/debug", id, true),
	}, nil, bin)
	pid, cmd := testbuild.Container(t, root, nil, "", "/app/chainpriv", "3")
	trace := recordContainer(t, pid, cmd, root)
	if !idcache.Has(cache, id, true) {
		t.Errorf("the container's debug file is not in the cache")
	}
	share, n := foldedShare(t, trace, "alpha_step;beta_step;gamma_step")
	t.Logf("%d samples, %.1f%% with the chain named from the container's debug file", n, 100*share)
	if share < 0.95 {
		t.Errorf("%.1f%% of the samples name alpha_step;beta_step;gamma_step, want >= 95%%", 100*share)
	}
}

// TestContainerChurn records the whole host with the eBPF back end (as
// the agent does) while 50 short-lived containers a second start, each
// running for 60 ms one of five builds of a program that exists only in
// its container's root; the roots are deleted before the trace is
// converted. Every sample in those programs is named: no module that
// was sampled lost its symbols, and the cache holds every build sampled.
func TestContainerChurn(t *testing.T) {
	testbuild.Feature(t, linux.ProbeBPF())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	testbuild.NeedAll(t, "runs the containers", "unshare", "sh", "mount", "pivot_root")
	cache := t.TempDir()
	t.Setenv(idcache.Env, cache)
	const builds = 5
	var roots []string
	var ids [][]byte
	for i := 0; i < builds; i++ {
		bin := testbuild.Build(t, testbuild.Cmd{
			Tool:   "cc",
			Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-DBUILD=" + strconv.Itoa(i), "-o", "{dir}/chainpriv", "{in0}"},
			Inputs: []string{"testdata/container/chainpriv.c"},
			Out:    "chainpriv",
			Key:    strconv.Itoa(i),
		})
		roots = append(roots, testbuild.ContainerRoot(t, map[string]string{bin: "/app/chainpriv"}, nil, bin))
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, locate.BuildID(f))
		f.Close()
	}
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() {
		done <- run([]string{"record", "-q", "--backend", "ebpf", "-a", "-F", "199", "--duration", "4s", "-o", trace}, &stdout, &stderr)
	}()
	time.Sleep(1500 * time.Millisecond) // the session starts
	started := 0
	tk := time.NewTicker(20 * time.Millisecond)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-tk.C {
		root := roots[started%builds]
		go func() {
			c := exec.Command("unshare", "--mount", "--pid", "--fork", "sh", "-c", testbuild.EnterRoot, "sh", root, "/app/chainpriv", "0.06")
			if c.Start() == nil {
				c.Wait()
			}
		}()
		started++
	}
	tk.Stop()
	if code := <-done; code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	t.Logf("%d containers started; %s", started, strings.TrimSpace(stderr.String()))
	time.Sleep(200 * time.Millisecond)
	for _, r := range roots {
		os.RemoveAll(r)
	}
	named, n := foldedShare(t, trace, "alpha_step;beta_step;gamma_step")
	lost, _ := foldedShare(t, trace, "chainpriv+0x")
	t.Logf("whole host: %d samples, %.2f%% in the containers' chain, %.2f%% in their program unnamed; the cache holds %d bytes", n, 100*named, 100*lost, idcache.Usage(cache))
	// Every build is met alive at least once among 20 containers each,
	// so every build is copied and named. Unnamed samples are those of a
	// process whose file could be read neither through its root nor on
	// the host before it exited: 0.00% in local runs; a build remembered
	// as unreadable after one such process (the defect this once had:
	// "4 files copied", a fifth of the containers unnamed) fails it.
	for i, id := range ids {
		if !idcache.Has(cache, id, false) {
			t.Errorf("build %d (build id %x) is not in the build-id cache", i, id)
		}
	}
	if named == 0 || lost > named/50 {
		t.Errorf("%.2f%% of the samples name the containers' chain, %.2f%% are in their program unnamed: want some, and at most 1/50 as many unnamed", 100*named, 100*lost)
	}
}

// TestContainerDebian records a container of another distribution
// release than the host's: Debian 11 (glibc 2.31, Python 3.9), made by
// mmdebstrap as an image is. Its program is built by its own compiler
// against its own libc, and its Python is its own; nothing in it is a
// host file. Both run under their namespaces and are recorded from the
// host with each back end; then the container is deleted and the
// traces converted: the program's chain and the Python chain are named
// from the files the recordings copied into the build-id cache (the
// container's libc among them).
func TestContainerDebian(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	root := testbuild.DebianRoot(t, "bullseye", "python3-minimal", "gcc", "libc6-dev")
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for src, dst := range map[string]string{"testdata/container/chainpriv.c": "app/chainpriv.c", spin: "app/spin.py"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chroot", root, "gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", "/app/chainpriv", "/app/chainpriv.c").CombinedOutput(); err != nil {
		t.Fatalf("the container's gcc: %v: %s", err, out)
	}
	libcID := func(path string) []byte {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return locate.BuildID(f)
	}
	libc := libcID(filepath.Join(root, "lib/x86_64-linux-gnu/libc.so.6"))
	if bytes.Equal(libc, libcID("/lib/x86_64-linux-gnu/libc.so.6")) {
		t.Fatal("the container's libc is the host's: the test would not test copying")
	}
	cache := t.TempDir()
	t.Setenv(idcache.Env, cache)
	traces := map[string]string{}
	for _, be := range []string{"perf", "ebpf"} {
		if be == "ebpf" && linux.ProbeBPF() != nil {
			testbuild.Feature(t, linux.ProbeBPF())
		}
		for _, prog := range [][]string{{"native", "", "/app/chainpriv", "2.5"}, {"python", "ready", "/usr/bin/python3.9", "-S", "/app/spin.py", "4"}} {
			pid, cmd := testbuild.Container(t, root, nil, prog[1], prog[2:]...)
			trace := filepath.Join(t.TempDir(), "t.rawstack")
			args := []string{"record", "-q", "-F", "499", "-o", trace, "-p", strconv.Itoa(pid), "--duration", "1.5s", "--backend", be}
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			syscall.Kill(pid, syscall.SIGKILL)
			cmd.Wait()
			if code != 0 {
				t.Fatalf("%q exited %d: %s", args, code, stderr.String())
			}
			t.Logf("%s/%s: %s", prog[0], be, strings.TrimSpace(stderr.String()))
			traces[prog[0]+"/"+be] = trace
		}
	}
	os.RemoveAll(root) // the container is gone
	if !idcache.Has(cache, libc, false) {
		t.Errorf("the container's libc (build id %x) is not in the build-id cache", libc)
	}
	for _, be := range []string{"perf", "ebpf"} {
		if trace := traces["native/"+be]; trace != "" {
			share, n := foldedShare(t, trace, "alpha_step;beta_step;gamma_step")
			t.Logf("native/%s: %d samples, %.1f%% with the chain named after the container was deleted", be, n, 100*share)
			if share < 0.95 {
				t.Errorf("native/%s: %.1f%% of the samples name alpha_step;beta_step;gamma_step, want >= 95%%", be, 100*share)
			}
		}
		if trace := traces["python/"+be]; trace != "" {
			// Python 3.9 calls through C: its native frames
			// (_PyFunction_Vectorcall, _PyEval_EvalFrameDefault) lie
			// between the Python ones.
			var all, inN, chainN int64
			pyChain := regexp.MustCompile(`alpha_py;(.*;)?beta_py;(.*;)?gamma_py`)
			eachFolded(t, trace, func(stack string, n int64) {
				all += n
				if strings.Contains(stack, "_PyEval_EvalFrameDefault") {
					inN += n
					if pyChain.MatchString(stack) {
						chainN += n
					}
				}
			})
			in, chain := float64(inN)/float64(max(all, 1)), float64(chainN)/float64(max(all, 1))
			t.Logf("python/%s: %d samples, %.1f%% in the interpreter, %.1f%% of those with alpha_py, beta_py, gamma_py in order", be, all, 100*in, 100*chain/max(in, 1e-9))
			if in < 0.5 || chain/in < 0.85 {
				t.Errorf("python/%s: %.1f%% of the interpreter's samples have the Python chain (%.1f%% in the interpreter), want >= 85%%", be, 100*chain/max(in, 1e-9), 100*in)
			}
		}
	}
}
