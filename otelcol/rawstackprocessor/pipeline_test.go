package rawstackprocessor

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// The tests run a real Collector pipeline in process: the OTLP receiver
// (gRPC), this processor, and a consumer that keeps what comes out;
// rawstack record streams to it as a separate process.

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// rawstackCLI builds the rawstack command from the parent module.
func rawstackCLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rawstack-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "rawstack")
		// rawstack and its OTLP and eBPF companions, side by side.
		cmd := exec.Command("go", "build", "-o", dir, "./cmd/rawstack", "./cmd/rawstack-otlp", "./cmd/rawstack-ebpf")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/rawstack ./cmd/rawstack-otlp ./cmd/rawstack-ebpf: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

func needPerf(t testing.TB) {
	t.Helper()
	testbuild.Feature(t, linux.Probe())
}

// chain builds the main→a→b→c fixture and returns it and a debug
// directory holding it by build id (DIR/.build-id/xx/rest.debug), as a
// central symbol store would.
func chain(t testing.TB) (bin, debugDir string) {
	t.Helper()
	bin = testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/chain", "{in0}"},
		Inputs: []string{"../../tracer/testdata/chain.c"},
		Out:    "chain",
	})
	id := buildID(t, bin)
	debugDir = t.TempDir()
	dst := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, debugDir
}

func buildID(t testing.TB, path string) string {
	t.Helper()
	f, err := openELF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id := locate.BuildID(f)
	if len(id) == 0 {
		t.Fatalf("%s has no GNU build id", path)
	}
	return hex.EncodeToString(id)
}

// collector is an in-process pipeline: OTLP receiver → rawstack
// processor → sink.
type collector struct {
	addr string
	sink *consumertest.ProfilesSink
	proc *symProcessor
	rcv  interface{ Shutdown(context.Context) error }
	cfg  *Config

	// optional: TLS on the receiver, and the authorization header seen
	certFile, keyFile string
	mu                sync.Mutex
	auth              []string
}

func startCollector(t *testing.T, cfg *Config, addr string) *collector {
	t.Helper()
	c := &collector{sink: new(consumertest.ProfilesSink), cfg: cfg}
	c.start(t, addr)
	return c
}

func (c *collector) start(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	pf := NewFactory()
	// Between the processor and the sink: note the request's
	// authorization header (the receiver passes it with include_metadata).
	next, err := xconsumer.NewProfiles(func(ctx context.Context, pd pprofile.Profiles) error {
		// What the processor passes on conforms.
		if err := otlpcheck.Check(pd); err != nil {
			t.Errorf("the processor's output does not conform: %v", err)
		}
		c.mu.Lock()
		c.auth = append(c.auth, client.FromContext(ctx).Metadata.Get("authorization")...)
		c.mu.Unlock()
		return c.sink.ConsumeProfiles(ctx, pd)
	})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := pf.CreateProfiles(ctx, processortest.NewNopSettings(Type), c.cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Shutdown(ctx) })
	rf := otlpreceiver.NewFactory().(xreceiver.Factory)
	rcfg := rf.CreateDefaultConfig().(*otlpreceiver.Config)
	if addr == "" {
		addr = freeAddr(t)
	}
	g := rcfg.Protocols.GRPC.GetOrInsertDefault()
	g.NetAddr.Endpoint = addr
	g.IncludeMetadata = true
	if c.certFile != "" {
		g.TLS = configoptional.Some(configtls.ServerConfig{Config: configtls.Config{CertFile: c.certFile, KeyFile: c.keyFile}})
	}
	rcv, err := rf.CreateProfiles(ctx, receivertest.NewNopSettings(rf.Type()), rcfg, proc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	c.addr, c.rcv = addr, rcv
	t.Cleanup(func() { c.stop() })
}

func (c *collector) stop() {
	if c.rcv != nil {
		c.rcv.Shutdown(context.Background())
		c.rcv = nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// record runs rawstack record on the chain fixture for secs CPU seconds.
type recording struct {
	file    string
	stderr  string
	sent    int64
	lost    int64
	maxRSS  int64 // KiB
	samples int64 // Sample events in the file
}

var otlpLine = regexp.MustCompile(`otlp \S+: (\d+) samples sent in \d+ batches \(\d+ bytes, \d+ on the wire\), (\d+) lost`)

func startRecord(t *testing.T, bin, endpoint string, secs string, extra ...string) (*exec.Cmd, *bytes.Buffer, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "t.rawstack")
	args := append([]string{"record", "-q", "-o", file, "-F", "199", "--otlp-endpoint", endpoint, "--otlp-raw", "--otlp-interval", "200ms"}, extra...)
	args = append(args, "--", bin, secs)
	cmd := exec.Command(rawstackCLI(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr, file
}

func finishRecord(t *testing.T, cmd *exec.Cmd, stderr *bytes.Buffer, file string) *recording {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rawstack record: %v\n%s", err, stderr)
	}
	r := summarize(t, file, stderr.String())
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss
	}
	return r
}

// summarize reads what a finished recording says it sent and lost, and
// counts the samples of its trace file.
func summarize(t *testing.T, file, stderr string) *recording {
	t.Helper()
	r := &recording{file: file, stderr: stderr}
	m := otlpLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no otlp summary in:\n%s", r.stderr)
	}
	r.sent, _ = strconv.ParseInt(m[1], 10, 64)
	r.lost, _ = strconv.ParseInt(m[2], 10, 64)
	fr, err := format.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	for {
		ev, err := fr.Next()
		if err != nil {
			break
		}
		if ev.Kind == format.KindSample {
			r.samples++
		}
	}
	return r
}

// perPid sums the samples the sink received per process.pid, and the
// samples whose stack reads c;b;a;main (leaf first).
func perPid(t *testing.T, sink *consumertest.ProfilesSink) (samples, chain map[int64]int) {
	return perPidChain(t, sink, "c;b;a;main")
}

// perPidChain is perPid for another chain, leaf first.
func perPidChain(t *testing.T, sink *consumertest.ProfilesSink, want string) (samples, chain map[int64]int) {
	samples, chain = map[int64]int{}, map[int64]int{}
	for _, pd := range sink.AllProfiles() {
		d := pd.Dictionary()
		for _, rp := range pd.ResourceProfiles().All() {
			v, ok := rp.Resource().Attributes().Get(otlp.AttrPID)
			if !ok {
				t.Fatalf("resource without %s", otlp.AttrPID)
			}
			pid := v.Int()
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, s := range pr.Samples().All() {
						n := s.TimestampsUnixNano().Len()
						samples[pid] += n
						if strings.Contains(stackNames(d, s.StackIndex()), want) {
							chain[pid] += n
						}
					}
				}
			}
		}
	}
	return samples, chain
}

func stackNames(d pprofile.ProfilesDictionary, si int32) string {
	var names []string
	for _, li := range d.StackTable().At(int(si)).LocationIndices().All() {
		loc := d.LocationTable().At(int(li))
		if loc.Lines().Len() == 0 {
			names = append(names, fmt.Sprintf("%#x", loc.Address()))
		}
		for _, l := range loc.Lines().All() {
			names = append(names, d.StringTable().At(int(d.FunctionTable().At(int(l.FunctionIndex())).NameStrindex())))
		}
	}
	return strings.Join(names, ";")
}

func TestPipelineRawRecordSymbolizedCentrally(t *testing.T) {
	needPerf(t)
	bin, dbg := chain(t)
	c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
	cmd, se, file := startRecord(t, bin, c.addr, "0.6")
	r := finishRecord(t, cmd, se, file)
	t.Log(strings.TrimSpace(r.stderr))
	samples, chain := perPid(t, c.sink)
	if len(samples) != 1 {
		t.Fatalf("samples for pids %v, want one process", samples)
	}
	for pid, n := range samples {
		if int64(n) != r.samples || r.lost != 0 {
			t.Errorf("pid %d: the pipeline delivered %d samples, the -o file holds %d (exporter lost %d)", pid, n, r.samples, r.lost)
		}
		if chain[pid] < n/2 {
			t.Errorf("pid %d: only %d of %d samples named c;b;a;main", pid, chain[pid], n)
		}
	}
	if c.proc == nil {
		t.Logf("processor resolved locations through %s", dbg)
	}
}

func TestPipelineEndpointDownFiveSeconds(t *testing.T) {
	needPerf(t)
	bin, dbg := chain(t)
	c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
	// The tracer hands its streams a chunk about every second, so a
	// queue of 2 batches holds about 2 s: a 5 s outage overflows it. A
	// second recorder with a queue of 64 batches (12.8 s at 200 ms) rides
	// the same outage out without losing anything.
	const queue = 2
	cmd, se, file := startRecord(t, bin, c.addr, "8", "--otlp-queue", strconv.Itoa(queue))
	cmdBig, seBig, fileBig := startRecord(t, bin, c.addr, "8", "--otlp-queue", "64")
	time.Sleep(1500 * time.Millisecond)
	c.stop()
	down := time.Now()
	before, _ := perPid(t, c.sink)
	time.Sleep(5 * time.Second)
	up := time.Now()
	c.start(t, c.addr)
	r := finishRecord(t, cmd, se, file)
	big := finishRecord(t, cmdBig, seBig, fileBig)
	t.Log(strings.TrimSpace(r.stderr))
	t.Log(strings.TrimSpace(big.stderr))
	samples, _ := perPid(t, c.sink)
	got := int64(samples[int64(pidOf(t, file))])
	gotBig := int64(samples[int64(pidOf(t, fileBig))])
	// What may be lost: samples of the outage (from a second before it:
	// the tracer hands over a chunk a second) until one maximal back-off
	// (5 s) after the endpoint came back, when the sender next tries.
	during := samplesBetween(t, file, down.Add(-time.Second), up.Add(5*time.Second))
	t.Logf("queue %d: samples: file %d, delivered %d (%d before the outage, both recorders), lost %d, recorded from the outage to one back-off after %d; recorder max RSS %d KiB",
		queue, r.samples, got, sum(before), r.lost, during, r.maxRSS)
	t.Logf("queue 64: samples: file %d, delivered %d, lost %d; recorder max RSS %d KiB", big.samples, gotBig, big.lost, big.maxRSS)
	if got+r.lost != r.samples {
		t.Errorf("delivered %d + lost %d != %d samples in the file: samples went missing uncounted", got, r.lost, r.samples)
	}
	if got != r.sent || gotBig != big.sent {
		t.Errorf("the recorders say they sent %d and %d samples, the pipeline got %d and %d", r.sent, big.sent, got, gotBig)
	}
	if r.lost > during {
		t.Errorf("lost %d samples, more than the %d recorded from the outage to one back-off after it", r.lost, during)
	}
	if gotBig != big.samples || big.lost != 0 {
		t.Errorf("queue 64: delivered %d of %d samples, lost %d: a 5 s outage fits the queue", gotBig, big.samples, big.lost)
	}
	// before holds both recorders; compare this one's own count.
	if got <= int64(before[int64(pidOf(t, file))]) {
		t.Errorf("nothing delivered after the endpoint came back: %d samples before the outage, %d in all", before[int64(pidOf(t, file))], got)
	}
	if r.maxRSS > 200<<10 || big.maxRSS > 200<<10 {
		t.Errorf("recorder max RSS %d and %d KiB", r.maxRSS, big.maxRSS)
	}
}

// samplesBetween counts the samples of a trace taken between two wall
// times.
func samplesBetween(t *testing.T, file string, from, to time.Time) int64 {
	r, err := format.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var cs format.ClockSync
	var n int64
	for {
		ev, err := r.Next()
		if err != nil {
			return n
		}
		switch ev.Kind {
		case format.KindClockSync:
			cs = ev.ClockSync
		case format.KindSample:
			w := time.Unix(0, ev.Sample.Time-cs.Time+cs.WallNano)
			if !w.Before(from) && !w.After(to) {
				n++
			}
		}
	}
}

func sum(m map[int64]int) int64 {
	var s int64
	for _, n := range m {
		s += int64(n)
	}
	return s
}

func TestPipelineThreeRecorders(t *testing.T) {
	needPerf(t)
	bin, dbg := chain(t)
	c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
	type run struct {
		cmd  *exec.Cmd
		se   *bytes.Buffer
		file string
	}
	var runs []run
	for i := 0; i < 3; i++ {
		cmd, se, file := startRecord(t, bin, c.addr, "0.4")
		runs = append(runs, run{cmd, se, file})
	}
	samples, chain := map[int64]int{}, map[int64]int{}
	want := map[int64]int64{}
	for _, r := range runs {
		rec := finishRecord(t, r.cmd, r.se, r.file)
		want[int64(pidOf(t, rec.file))] = rec.samples
	}
	samples, chain = perPid(t, c.sink)
	if len(samples) != 3 {
		t.Fatalf("samples for %d processes %v, want 3", len(samples), samples)
	}
	for pid, n := range want {
		if int64(samples[pid]) != n {
			t.Errorf("pid %d: %d samples in the pipeline, %d in its file", pid, samples[pid], n)
		}
		if chain[pid] < samples[pid]/2 {
			t.Errorf("pid %d: only %d of %d samples named c;b;a;main", pid, chain[pid], samples[pid])
		}
	}
}

// pidOf returns the pid of the first Process event of a trace.
func pidOf(t *testing.T, file string) uint32 {
	r, err := format.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("%s: no Process event", file)
		}
		if ev.Kind == format.KindProcess {
			return ev.Process.Pid
		}
	}
}

// TestPipelineTLSAndHeaders streams over TLS (a certificate made here,
// trusted through --otlp-ca) with an authorization header, symbolized on
// the host: the processor leaves named locations alone.
func TestPipelineTLSAndHeaders(t *testing.T) {
	needPerf(t)
	bin, _ := chain(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, certFile, keyFile)
	c := &collector{sink: new(consumertest.ProfilesSink), cfg: &Config{}, certFile: certFile, keyFile: keyFile}
	c.start(t, "")
	file := filepath.Join(t.TempDir(), "s.rawstack")
	out, err := exec.Command(rawstackCLI(t), "record", "-q", "-o", file, "-F", "199", "--otlp-endpoint", c.addr,
		"--otlp-ca", certFile, "--otlp-header", "authorization=Bearer fleet-token", "--otlp-interval", "200ms", "--", bin, "0.4").CombinedOutput()
	if err != nil {
		t.Fatalf("rawstack record: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
	samples, chain := perPid(t, c.sink)
	if len(samples) != 1 {
		t.Fatalf("samples for pids %v, want the TLS recorder's only", samples)
	}
	for pid, n := range samples {
		if chain[pid] < n/2 {
			t.Errorf("pid %d: only %d of %d host-symbolized samples named c;b;a;main", pid, chain[pid], n)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.auth) == 0 || c.auth[0] != "Bearer fleet-token" {
		t.Errorf("authorization headers seen: %q", c.auth)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1.
func writeCert(t *testing.T, certFile, keyFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rawstack test collector"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}
