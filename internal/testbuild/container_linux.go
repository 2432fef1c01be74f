//go:build linux

package testbuild

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
	"testing"
	"time"
)

// A container here is what a container runtime makes of an image: a
// root file system of its own, seen by its processes alone (a mount
// namespace), and a pid namespace. The root is put together from the
// host's files (the program at a path the host does not have, the
// libraries ldd names at their paths), and `unshare --mount --pid --fork`
// with pivot_root (EnterRoot) runs the program in it: the same kernel
// view a container engine gives, without an engine or an image registry,
// neither of which these machines have (docker's client is here, no
// engine).

// ContainerRoot makes a root file system in a temporary directory: each
// host file or directory of files (host path -> path inside; a
// directory is copied whole but for names in skip) and the shared
// libraries ldd lists for each ELF program of libsOf, at their host
// paths.
func ContainerRoot(t testing.TB, files map[string]string, skip []string, libsOf ...string) string {
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

// EnterRoot is the shell script that makes root the root of args'
// process, as a container engine does: in the mount namespace unshare
// made, root is bind-mounted on itself and pivot_root moves the process
// into it, so that the host sees the process's files at their paths in
// root (/proc/PID/maps says /app/chainpriv, a path the host does not
// have), not at root's host path as it would after a chroot.
const EnterRoot = `set -e
root=$1; shift
mount --make-rprivate /
mount --bind "$root" "$root"
cd "$root"
mkdir -p .old
pivot_root . .old
exec "$@"`

// Container runs args in root, in new mount and pid namespaces, and
// returns the host pid of args' process and the unshare command; with
// ready set, once the process has printed that line.
func Container(t testing.TB, root string, env []string, ready string, args ...string) (int, *exec.Cmd) {
	t.Helper()
	NeedAll(t, "runs the container tests' programs in their own namespaces", "unshare", "sh", "mount", "pivot_root")
	cmd := exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "sh", "-c", EnterRoot, "sh", root}, args...)...)
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

// DebianRoot returns a root file system of Debian suite (minbase, with
// the packages of include) made by mmdebstrap from the host's Debian
// mirror, as a distribution's container image is: its libc, its
// interpreters, its compiler, none of them the host's files. It is made
// once per suite and package list (the fixture cache) and copied into a
// temporary directory for the test, which may delete it.
func DebianRoot(t testing.TB, suite string, include ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root for mmdebstrap")
	}
	Need(t, "mmdebstrap", "makes a Debian root file system for the container tests")
	mirror := debianMirror()
	made := Build(t, Cmd{
		Tool: "mmdebstrap",
		Args: []string{"--quiet", "--variant=minbase", "--include=" + strings.Join(include, ","), suite, "{dir}/root", mirror},
		Out:  "root",
		Key:  suite + " " + strings.Join(include, ",") + " " + mirror,
	})
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", made, root).CombinedOutput(); err != nil {
		t.Fatalf("copying the %s root: %v: %s", suite, err, out)
	}
	for _, d := range []string{"app", "proc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	return root
}

// debianMirror returns the Debian mirror the host's apt uses (the first
// URI of its deb822 or one-line sources naming a ".../debian"), else
// deb.debian.org.
func debianMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, f := range append(files, "/etc/apt/sources.list") {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, w := range strings.Fields(line) {
				if (strings.HasPrefix(w, "http://") || strings.HasPrefix(w, "https://")) && strings.HasSuffix(strings.TrimSuffix(w, "/"), "/debian") {
					return w
				}
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// PythonContainer runs script (a host file, at /app/<its name> inside)
// with args under pyenv's Python 3.12 copied into a container root at
// /opt/py (its interpreter, libpython and standard library, none of them
// at a host path), once it has printed ready (if not ""); it returns the
// root, the host pid and the unshare command, as [Container] does.
func PythonContainer(t testing.TB, script, ready string, args ...string) (string, int, *exec.Cmd) {
	t.Helper()
	py := Python(t, "3.12")
	prefix := filepath.Dir(filepath.Dir(py))
	lib := filepath.Join(prefix, "lib", "libpython3.12.so.1.0")
	app := "/app/" + filepath.Base(script)
	root := ContainerRoot(t, map[string]string{
		py:  "/opt/py/bin/python3.12",
		lib: "/opt/py/lib/libpython3.12.so.1.0",
		filepath.Join(prefix, "lib", "python3.12"): "/opt/py/lib/python3.12",
		script: app,
	}, []string{"test", "idlelib", "tkinter", "ensurepip", "site-packages", "lib2to3", "turtledemo", "pydoc_data", "config-3.12-x86_64-linux-gnu"}, lib)
	pid, cmd := Container(t, root, []string{"LD_LIBRARY_PATH=/opt/py/lib"}, ready, append([]string{"/opt/py/bin/python3.12", "-S", app}, args...)...)
	return root, pid, cmd
}
