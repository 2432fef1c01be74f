//go:build linux

package rawstackprocessor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/rawstack/rawstack/internal/otlpcheck"
)

// otelcolBinary returns the Collector distribution built from
// otelcol/builder-config.yaml ($RAWSTACK_OTELCOL, which .ci/run sets, or
// where the builder writes it). Without it the test skips, but under
// CI=true it fails: .ci/run builds it.
func otelcolBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("RAWSTACK_OTELCOL")
	if p == "" {
		p, _ = filepath.Abs("../otelcol-rawstack/otelcol-rawstack")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Collector distribution: %v (.ci/run builds it with the OpenTelemetry Collector Builder)", err)
		}
		t.Skipf("the Collector distribution: %v (build it: cd otelcol && go run go.opentelemetry.io/collector/cmd/builder@v0.165.0 --config builder-config.yaml)", err)
	}
	return p
}

// startOTLPSink is an OTLP receiver in process, straight into a sink:
// the backend after the Collector.
func startOTLPSink(t *testing.T) (addr string, sink *consumertest.ProfilesSink) {
	t.Helper()
	sink = new(consumertest.ProfilesSink)
	rf := otlpreceiver.NewFactory().(xreceiver.Factory)
	rcfg := rf.CreateDefaultConfig().(*otlpreceiver.Config)
	addr = freeAddr(t)
	rcfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = addr
	// What the Collector exports conforms.
	next, err := xconsumer.NewProfiles(func(ctx context.Context, pd pprofile.Profiles) error {
		if err := otlpcheck.Check(pd); err != nil {
			t.Errorf("the Collector's output does not conform: %v", err)
		}
		return sink.ConsumeProfiles(ctx, pd)
	})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := rf.CreateProfiles(context.Background(), receivertest.NewNopSettings(rf.Type()), rcfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcv.Shutdown(context.Background()) })
	return addr, sink
}

// distribution is the built Collector, run as a process.
type distribution struct {
	bin, config string
	cmd         *exec.Cmd
	log         bytes.Buffer
}

func (d *distribution) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin, "--config", d.config, "--feature-gates=service.profilesSupport")
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (d *distribution) kill() {
	if d.cmd != nil && d.cmd.Process != nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	}
}

// TestDistribution is the fleet end to end with the real binaries:
// rawstack agent --otlp-raw → the Collector distribution built from
// builder-config.yaml (the rawstack processor with debug files by build id
// only, use_recorded_paths false) → an OTLP receiver. Two unrelated
// programs, one in a container-like cgroup and one naming its service in
// OTEL_SERVICE_NAME, arrive named under their own resource attributes.
// The Collector is killed and restarted mid-run; it exports synchronously
// (no sending queue), so what it accepted reached the receiver, and
// samples delivered plus samples the agent counts as lost equal the
// samples it took.
func TestDistribution(t *testing.T) {
	otelcol := otelcolBinary(t)
	needBPF(t)
	bin, dbg := chain(t)
	sinkAddr, sink := startOTLPSink(t)
	colAddr := freeAddr(t)
	config := filepath.Join(t.TempDir(), "collector.yaml")
	yaml := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
processors:
  rawstack:
    debug_dirs: [%s]
    use_recorded_paths: false
exporters:
  otlp:
    endpoint: %s
    tls: {insecure: true}
    sending_queue: {enabled: false}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [rawstack]
      exporters: [otlp]
`, colAddr, dbg, sinkAddr)
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	col := &distribution{bin: otelcol, config: config}
	col.start(t)
	defer col.kill()

	agent, stderr := startAgent(t, "--otlp-endpoint", colAddr, "--otlp-raw", "-F", "99", "--otlp-interval", "500ms")
	boxed, svc, want := startPrograms(t, bin, "distribution-test")
	waitPid(t, sink, boxed.Process.Pid, 2*time.Minute)
	waitPid(t, sink, svc.Process.Pid, time.Minute)

	// The Collector dies and comes back.
	col.kill()
	time.Sleep(2 * time.Second)
	col.start(t)
	time.Sleep(4 * time.Second)
	for _, c := range []*exec.Cmd{boxed, svc} {
		c.Process.Kill()
		c.Wait()
	}
	sum := stopAgent(t, agent, stderr)
	got, samples, _ := sinkTotal(t, sink)
	t.Logf("the receiver got %d samples of %d processes", got, len(samples))
	if got+sum.lost != sum.taken {
		t.Errorf("delivered %d + lost %d != taken %d (the agent says %d sent)\ncollector log:\n%s", got, sum.lost, sum.taken, sum.sent, col.log.String())
	}
	checkResources(t, sink, want)
}
