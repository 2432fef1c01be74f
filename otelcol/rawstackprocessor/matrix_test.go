package rawstackprocessor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
	"github.com/rawstack/rawstack/platform/linux"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // linux.ProbeBPF probes with the loader; rawstack runs rawstack-ebpf
)

// TestMatrixOTLPSink is the OTLP-sink column of the capability matrix
// (README, "What works where"; the file sink is cmd/rawstack's
// TestMatrix): each back end that runs here records the main→a→b→c
// program into a trace file and, in the same run, raw over OTLP into the
// Collector's otlpreceiver and this processor, which names the frames
// from debug files found by build id. Every sample of the file arrives,
// and the chain is named.
func TestMatrixOTLPSink(t *testing.T) {
	for _, be := range []struct {
		name  string
		probe func() error
	}{
		{"perf", linux.Probe},
		{"ebpf", linux.ProbeBPF},
	} {
		t.Run(be.name, func(t *testing.T) {
			testbuild.Feature(t, be.probe())
			bin, dbg := chain(t)
			c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
			cmd, se, file := startRecord(t, bin, c.addr, "0.6", "--backend", be.name)
			r := finishRecord(t, cmd, se, file)
			t.Log(strings.TrimSpace(r.stderr))
			checkDelivered(t, c, r, "c;b;a;main")
		})
	}
	t.Run("windows", func(t *testing.T) {
		w := wine.Need(t)
		exe := testbuild.Build(t, testbuild.Cmd{
			Tool: "clang",
			Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-fuse-ld=lld",
				"-Wl,--pdb={dir}/chain.pdb", "-L/usr/lib/gcc/x86_64-w64-mingw32/12-win32", "-o", "{dir}/chain.exe", "{in0}"},
			Inputs: []string{"../../platform/windows/testdata/chain.c"},
			Out:    "chain.exe",
		})
		// rawstack.exe and rawstack-otlp.exe side by side, as a Windows
		// user installs them.
		dir := t.TempDir()
		build := exec.Command("go", "build", "-o", dir, "./cmd/rawstack", "./cmd/rawstack-otlp")
		build.Dir = "../.."
		build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("GOOS=windows go build: %v\n%s", err, out)
		}
		c := startCollector(t, &Config{DebugDirs: []string{filepath.Dir(exe)}}, "")
		file := filepath.Join(t.TempDir(), "t.rawstack")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := w.Command(ctx, filepath.Join(dir, "rawstack.exe"), "record", "-q", "-F", "250", "-o", wine.Path(file),
			"--otlp-endpoint", c.addr, "--otlp-raw", "--otlp-interval", "200ms", "--", wine.Path(exe), "2")
		var se strings.Builder
		cmd.Stderr = &se
		cmd.Stdout = &se
		if err := cmd.Run(); err != nil {
			t.Fatalf("wine rawstack.exe record: %v\n%s", err, se.String())
		}
		r := summarize(t, file, se.String())
		t.Log(strings.TrimSpace(r.stderr))
		checkDelivered(t, c, r, "leaf_work;middle;outer;main")
	})
}

// checkDelivered holds the pipeline's output to the recording: every
// sample of the file delivered, none lost, the chain (leaf first) named
// in at least half.
func checkDelivered(t *testing.T, c *collector, r *recording, chainLeafFirst string) {
	t.Helper()
	samples, chain := perPidChain(t, c.sink, chainLeafFirst)
	if len(samples) != 1 {
		t.Fatalf("samples for pids %v, want one process", samples)
	}
	for pid, n := range samples {
		if int64(n) != r.samples || r.lost != 0 || r.sent != r.samples {
			t.Errorf("pid %d: the pipeline delivered %d samples, the -o file holds %d (the exporter says %d sent, %d lost)", pid, n, r.samples, r.sent, r.lost)
		}
		if chain[pid] < n/2 {
			t.Errorf("pid %d: only %d of %d samples named %s", pid, chain[pid], n, chainLeafFirst)
		}
	}
}
