package rawstackprocessor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/internal/otlpcheck"
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

// runtimeRow is a program whose frames only the host can name: a Python
// program (Python frames, read from the interpreter's memory) or a Node
// program with a perf map (JIT code, and frames named from V8's own
// metadata), or a Java program (frames named from HotSpot's own tables).
// argv starts it; its samples name leafFirst (OTLP's order) /
// rootFirst (folded's).
type runtimeRow struct {
	name                 string
	argv                 func(t *testing.T) []string
	leafFirst, rootFirst string
}

// runtimeRows are the rows; the Python and Java programs spin for secs
// seconds, the Node program does rounds rounds of work.
func runtimeRows(secs, rounds string) []runtimeRow {
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	app, _ := filepath.Abs("../../cmd/rawstack/testdata/jit/app.js")
	shop, _ := filepath.Abs("../../cmd/rawstack/testdata/jit/Shop.java")
	return []runtimeRow{
		{"python", func(t *testing.T) []string { return []string{testbuild.Python(t, "3.12"), spin, secs} },
			"gamma_py;beta_py;alpha_py", "alpha_py;beta_py;gamma_py"},
		{"jit", func(t *testing.T) []string {
			return []string{testbuild.Need(t, "node", "the JIT rows record node --perf-basic-prof"), "--perf-basic-prof", app, rounds}
		}, "fibJit", "fibJit"},
		{"java", func(t *testing.T) []string {
			// Java frames named from HotSpot's own tables, no flag: the
			// chain C2 inlined (Shop.java), its two innermost frames.
			java := testbuild.Need(t, "java", "the Java rows record a JVM")
			class := testbuild.Build(t, testbuild.Cmd{Tool: "javac", Args: []string{"-d", "{dir}", "{in0}"}, Inputs: []string{shop}, Out: "Shop.class"})
			// At least 3 s: the JVM's start and warm-up take about one.
			if f, err := strconv.ParseFloat(secs, 64); err == nil && f < 3 {
				secs = "3"
			}
			return []string{java, "-cp", filepath.Dir(class), "Shop", secs}
		}, "Shop$Price.mix;Shop.lambda$handle$0", "Shop.lambda$handle$0;Shop$Price.mix"},
	}
}

// TestMatrixOTLPSinkRuntimes is the Python and JIT rows of the OTLP
// columns: a Python 3.12 program and node --perf-basic-prof, recorded into
// a file and, in the same run, over OTLP into the Collector's receiver and
// this processor, raw (--otlp-raw: the host names the Python and JIT
// frames, the processor the native ones) and named on the host
// (--otlp-raw=false). Every sample of the file arrives; the share of
// samples that name the program's frames on the stream is the folded
// output's of the file (within 2 points: a perf map line the recorder
// reads more than a batch after the sample it names); and convert --to
// otlp of the file, raw and named, gives folded's share exactly.
func TestMatrixOTLPSinkRuntimes(t *testing.T) {
	needPerf(t)
	cli := rawstackCLI(t)
	for _, row := range runtimeRows("1.5", "1500") {
		for _, raw := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/raw=%v", row.name, raw), func(t *testing.T) {
				argv := row.argv(t)
				c := startCollector(t, &Config{}, "")
				file := filepath.Join(t.TempDir(), "t.rawstack")
				args := append([]string{"record", "-q", "-o", file, "-F", "499", "--otlp-endpoint", c.addr,
					"--otlp-interval", "200ms", "--otlp-raw=" + strconv.FormatBool(raw), "--"}, argv...)
				cmd := exec.Command(cli, args...)
				cmd.Dir = t.TempDir() // node --perf-basic-prof leaves isolate-*-v8.log files there
				var se strings.Builder
				cmd.Stderr = &se
				if err := cmd.Run(); err != nil {
					t.Fatalf("rawstack record: %v\n%s", err, se.String())
				}
				r := summarize(t, file, se.String())
				samples, named := perPidChain(t, c.sink, row.leafFirst)
				stream, streamNamed := sum(samples), sum(named)
				if stream != r.samples || r.lost != 0 {
					t.Errorf("the stream delivered %d samples, the file holds %d (%d lost)", stream, r.samples, r.lost)
				}
				fshare, fn := foldedShare(t, cli, file, row.rootFirst)
				sshare := float64(streamNamed) / float64(max(stream, 1))
				t.Logf("%s named in %.1f%% of %d samples on the stream, %.1f%% of %d in folded", row.leafFirst, 100*sshare, stream, 100*fshare, fn)
				if fshare < 0.5 {
					t.Errorf("folded names %s in only %.1f%% of the samples", row.rootFirst, 100*fshare)
				}
				if d := sshare - fshare; d < -0.02 || d > 0.02 {
					t.Errorf("the stream's share %.1f%%, folded's %.1f%%", 100*sshare, 100*fshare)
				}
				for _, convRaw := range []bool{true, false} {
					oshare, on := convertShare(t, cli, file, row.leafFirst, convRaw)
					if on != fn || oshare != fshare {
						t.Errorf("convert --to otlp (raw %v): %.2f%% of %d samples, folded %.2f%% of %d", convRaw, 100*oshare, on, 100*fshare, fn)
					}
				}
			})
		}
	}
}

// foldedShare is the share of the samples of a trace whose folded stack
// holds sub, and their number.
func foldedShare(t *testing.T, cli, trace, sub string) (float64, int64) {
	t.Helper()
	out, err := exec.Command(cli, "convert", trace, "--to", "folded", "--no-debuginfod").Output()
	if err != nil {
		t.Fatalf("convert --to folded: %v", err)
	}
	var all, in int64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[sp+1:], 10, 64)
		if sp < 0 || err != nil {
			t.Fatalf("folded line %q", line)
		}
		all += n
		if strings.Contains(line[:sp], sub) {
			in += n
		}
	}
	return float64(in) / float64(max(all, 1)), all
}

// convertShare is foldedShare for convert --to otlp (stacks leaf first),
// whose output must conform.
func convertShare(t *testing.T, cli, trace, sub string, raw bool) (float64, int64) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "t.otlp")
	args := []string{"convert", trace, "--to", "otlp", "-o", out, "--no-debuginfod"}
	if raw {
		args = append(args, "--raw")
	}
	if b, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("%q: %v\n%s", args, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := otlpcheck.CheckBytes(data); err != nil {
		t.Fatalf("%q: the output does not conform: %v", args, err)
	}
	var u pprofile.ProtoUnmarshaler
	p, err := u.UnmarshalProfiles(data)
	if err != nil {
		t.Fatal(err)
	}
	var all, in int64
	d := p.Dictionary()
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, s := range pr.Samples().All() {
					n := int64(s.TimestampsUnixNano().Len())
					all += n
					if strings.Contains(stackNames(d, s.StackIndex()), sub) {
						in += n
					}
				}
			}
		}
	}
	return float64(in) / float64(max(all, 1)), all
}
