//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the Collector's receivers take gzip

	"github.com/rawstack/rawstack/cmd/internal/otlpstream"
	"github.com/rawstack/rawstack/cmd/internal/record"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// otlpReceiver is an OTLP profiles receiver (pdata's gRPC service) that
// keeps, per process, how many samples came and how many of them hold a
// chain of function names.
type otlpReceiver struct {
	pprofileotlp.UnimplementedGRPCServer
	chain string // leaf first, ";"-joined
	mu    sync.Mutex
	reqs  int
	all   map[int64]int
	named map[int64]int
}

func (r *otlpReceiver) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := req.Profiles()
	d := pd.Dictionary()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs++
	for _, rp := range pd.ResourceProfiles().All() {
		v, _ := rp.Resource().Attributes().Get(otlp.AttrPID)
		pid := v.Int()
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, s := range pr.Samples().All() {
					n := s.TimestampsUnixNano().Len()
					r.all[pid] += n
					if strings.Contains(otlpStackNames(d, s.StackIndex()), r.chain) {
						r.named[pid] += n
					}
				}
			}
		}
	}
	return pprofileotlp.NewExportResponse(), nil
}

// otlpStackNames names a stack's frames, leaf first.
func otlpStackNames(d pprofile.ProfilesDictionary, si int32) string {
	if int(si) >= d.StackTable().Len() {
		return ""
	}
	var names []string
	for _, li := range d.StackTable().At(int(si)).LocationIndices().All() {
		loc := d.LocationTable().At(int(li))
		for _, l := range loc.Lines().All() {
			names = append(names, d.StringTable().At(int(d.FunctionTable().At(int(l.FunctionIndex())).NameStrindex())))
		}
		if loc.Lines().Len() == 0 {
			names = append(names, fmt.Sprintf("%#x", loc.Address()))
		}
	}
	return strings.Join(names, ";")
}

// inProcessOTLP makes record stream OTLP in this process, as
// rawstack-ebpf does, until the test ends.
func inProcessOTLP(t *testing.T) {
	record.InProcessOTLP = func(args []string, stderr io.Writer) (io.WriteCloser, error) {
		return otlpstream.Start(args, stderr)
	}
	t.Cleanup(func() { record.InProcessOTLP = nil })
}

// TestAgentOTLP runs rawstack agent as a host runs it, the whole host at
// 99 Hz for 5 s with its samples named on the host (--otlp-raw=false), into an
// OTLP receiver on the loopback interface, while the chain fixture spins
// in main → a → b → c: the receiver gets the fixture's samples, named,
// as OTLP profiles. The exporter runs in this process, as in
// rawstack-ebpf (record.InProcessOTLP): no rawstack-otlp is built.
// (The otelcol module's TestAgent runs the agent's binaries into the
// Collector, which names raw samples centrally.)
func TestAgentOTLP(t *testing.T) {
	testbuild.Feature(t, linux.ProbeBPF())
	inProcessOTLP(t)
	bin := chainFixtures(t)[0].bin

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{chain: "c;b;a;main", all: map[int64]int{}, named: map[int64]int{}}
	gs := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(gs, rcv)
	go gs.Serve(l)
	defer gs.Stop()

	prog := exec.Command(bin, "30")
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		prog.Process.Kill()
		prog.Wait()
	}()
	var so, se bytes.Buffer
	args := []string{"agent", "--otlp-endpoint", l.Addr().String(), "--otlp-raw=false", "-F", "99", "--otlp-interval", "200ms", "--duration", "5s"}
	if code := run(args, &so, &se); code != 0 {
		t.Fatalf("%q exited %d: %s", args, code, se.String())
	}
	t.Log(strings.TrimSpace(se.String()))
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	pid := int64(prog.Process.Pid)
	total := 0
	for _, n := range rcv.all {
		total += n
	}
	t.Logf("agent samples through the OTLP receiver: %d in %d requests, %d processes; the fixture (pid %d): %d samples, %d named c←b←a←main",
		total, rcv.reqs, len(rcv.all), pid, rcv.all[pid], rcv.named[pid])
	var sent int
	if i := strings.Index(se.String(), " samples sent"); i < 0 {
		t.Fatalf("no summary line: %s", se.String())
	} else if f := strings.Fields(se.String()[:i]); len(f) == 0 {
		t.Fatalf("summary %q", se.String())
	} else if sent, err = strconv.Atoi(f[len(f)-1]); err != nil {
		t.Fatalf("summary %q: %v", se.String(), err)
	}
	if sent != total {
		t.Errorf("the agent says it sent %d samples, the receiver got %d", sent, total)
	}
	// The fixture spins, but shares 2 CPUs with the host's (or the VM's)
	// other work, and the agent's start (the BPF verifier) takes seconds
	// of an emulated CPU: a floor well below 5 s × 99 Hz.
	if rcv.all[pid] < 20 {
		t.Fatalf("the receiver got %d samples of the fixture in 5 s at 99 Hz", rcv.all[pid])
	}
	if share := float64(rcv.named[pid]) / float64(rcv.all[pid]); share < 0.9 {
		t.Errorf("%.1f%% of the fixture's samples are named c←b←a←main, want ≥ 90%%", 100*share)
	}
}
