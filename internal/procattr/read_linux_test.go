package procattr

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
)

func get(attrs []format.Label, k string) string {
	i := slices.IndexFunc(attrs, func(l format.Label) bool { return l.Key == k })
	if i < 0 {
		return ""
	}
	return attrs[i].Value
}

// TestRead reads a child that names its service in its environment: its
// executable's path, its service, this host's name and machine id.
func TestRead(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(sleep, "10")
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=procattr-test")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// cmd.Start returns when the child's close-on-exec pipe closes, which
	// the kernel does before it writes the new environment to the stack:
	// until then /proc/PID/environ reads empty though exe already names
	// sleep. Wait for the environment as a sampler meets the process, running.
	environ := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ"
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, err := os.ReadFile(environ); err != nil || len(b) > 0 {
			break
		}
	}
	attrs := Read(cmd.Process.Pid)
	t.Logf("%q", attrs)
	if got := get(attrs, ServiceName); got != "procattr-test" {
		t.Errorf("service.name %q", got)
	}
	want, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(attrs, ExecutablePath); got != want {
		t.Errorf("process.executable.path %q, want %q", got, want)
	}
	if h, _ := os.Hostname(); get(attrs, HostName) != h {
		t.Errorf("host.name %q, want %q", get(attrs, HostName), h)
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && get(attrs, HostID) != HostIDFromMachineID(b) {
		t.Errorf("host.id %q, /etc/machine-id %q", get(attrs, HostID), b)
	}
}
