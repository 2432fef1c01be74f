package main

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
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

	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// A container here is what a container runtime makes of an image: a
// root file system of its own, seen by its processes alone (a mount
// namespace), and a pid namespace. The root is put together from the
// host's files (the program at a path the host does not have, the
// libraries ldd names at their paths), and `unshare --mount --pid --fork`
// with pivot_root (enterRoot) runs the program in it: the same kernel
// view a container engine gives, without an engine or an image registry,
// neither of which these machines have (docker's client is here, no
// engine).

// containerRoot makes a root file system in a temporary directory: each
// host file or directory of files (host path -> path inside; a
// directory is copied whole but for names in skip) and the shared
// libraries ldd lists for each ELF program of libsOf, at their host
// paths.
func containerRoot(t *testing.T, files map[string]string, skip []string, libsOf ...string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"tmp", "proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	copyIn := func(src, dst string) {
		t.Helper()
		dst = filepath.Join(root, dst)
		if _, err := os.Stat(dst); err == nil {
			return
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		fi, _ := in.Stat()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	for src, dst := range files {
		filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(skip, d.Name()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				copyIn(p, filepath.Join(dst, strings.TrimPrefix(p, src)))
			}
			return nil
		})
	}
	lib := regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x`)
	for _, src := range append(libsOf, "/bin/true") {
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", src, err)
		}
		for _, m := range lib.FindAllStringSubmatch(string(out), -1) {
			real, err := filepath.EvalSymlinks(m[1])
			if err != nil {
				t.Fatal(err)
			}
			copyIn(real, m[1])
		}
	}
	return root
}

// enterRoot is the shell script that makes root the root of args'
// process, as a container engine does: in the mount namespace unshare
// made, root is bind-mounted on itself and pivot_root moves the process
// into it, so that the host sees the process's files at their paths in
// root (/proc/PID/maps says /app/chainpriv, a path the host does not
// have), not at root's host path as it would after a chroot.
const enterRoot = `set -e
root=$1; shift
mount --make-rprivate /
mount --bind "$root" "$root"
cd "$root"
mkdir -p .old
pivot_root . .old
exec "$@"`

// container runs args in root, in new mount and pid namespaces, and
// returns the host pid of args' process and the unshare command; with
// ready set, once the process has printed that line.
func container(t *testing.T, root string, env []string, ready string, args ...string) (int, *exec.Cmd) {
	t.Helper()
	testbuild.NeedAll(t, "runs the container tests' programs in their own namespaces", "unshare", "sh", "mount", "pivot_root")
	cmd := exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "sh", "-c", enterRoot, "sh", root}, args...)...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	children := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(children)
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			// Wait for the exec of args: the child is the shell until then.
			for time.Now().Before(deadline) {
				if exe, err := os.Readlink("/proc/" + f[0] + "/exe"); err == nil && exe == args[0] {
					for ready != "" {
						line, ok := <-lines
						if !ok {
							t.Fatalf("%s ended before it printed %q: %s", args[0], ready, stderr.String())
						}
						if line == ready {
							break
						}
					}
					return pid, cmd
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	t.Fatalf("no process %s in the container: %s", args[0], stderr.String())
	return 0, nil
}

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
			root := containerRoot(t, map[string]string{bin: "/app/chainpriv"}, nil, bin)
			pid, cmd := container(t, root, nil, "", "/app/chainpriv", "2.5")
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
// 1.5 s, ends the container, deletes its root and returns the trace.
func recordContainer(t *testing.T, pid int, cmd *exec.Cmd, root string, args ...string) string {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	args = append([]string{"record", "-q", "-F", "499", "-o", trace, "-p", strconv.Itoa(pid), "--duration", "1.5s"}, args...)
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
	py := testbuild.Python(t, "3.12")
	prefix := filepath.Dir(filepath.Dir(py))
	lib := filepath.Join(prefix, "lib", "libpython3.12.so.1.0")
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for _, be := range []string{"perf", "ebpf"} {
		t.Run(be, func(t *testing.T) {
			if be == "ebpf" {
				testbuild.Feature(t, linux.ProbeBPF())
			}
			t.Setenv(idcache.Env, t.TempDir())
			root := containerRoot(t, map[string]string{
				py:  "/opt/py/bin/python3.12",
				lib: "/opt/py/lib/libpython3.12.so.1.0",
				filepath.Join(prefix, "lib", "python3.12"): "/opt/py/lib/python3.12",
				spin: "/app/spin.py",
			}, []string{"test", "idlelib", "tkinter", "ensurepip", "site-packages", "lib2to3", "turtledemo", "pydoc_data", "config-3.12-x86_64-linux-gnu"}, lib)
			pid, cmd := container(t, root, []string{"LD_LIBRARY_PATH=/opt/py/lib"}, "ready", "/opt/py/bin/python3.12", "-S", "/app/spin.py", "4")
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

// TestContainerNode records node running with --perf-basic-prof inside
// its container (node at /opt/node, its perf map in the container's
// /tmp under its pid in the container's pid namespace) with each back
// end: fibJit is named after the container is gone, as outside one.
func TestContainerNode(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for unshare --mount --pid")
	}
	node := needNode(t, "the container Node test runs node inside a container")
	node, _ = filepath.EvalSymlinks(node)
	app, _ := filepath.Abs("testdata/jit/app.js")
	for _, be := range []string{"perf", "ebpf"} {
		t.Run(be, func(t *testing.T) {
			if be == "ebpf" {
				testbuild.Feature(t, linux.ProbeBPF())
			}
			t.Setenv(idcache.Env, t.TempDir())
			root := containerRoot(t, map[string]string{node: "/opt/node/bin/node", app: "/app/app.js"}, nil, node)
			pid, cmd := container(t, root, nil, "", "/opt/node/bin/node", "--perf-basic-prof", "/app/app.js", "100000")
			trace := recordContainer(t, pid, cmd, root, "--backend", be)
			share, n := foldedShare(t, trace, "fibJit")
			t.Logf("%d samples, fibJit named in %.1f%%", n, 100*share)
			if share < 0.8 {
				t.Errorf("fibJit named in %.1f%% of the samples, want >= 80%% as outside a container", 100*share)
			}
		})
	}
}
