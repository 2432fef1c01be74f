package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/format"
)

// The jit scenario (issue 15): node --perf-basic-prof running one hot
// JIT-compiled function, recorded by `rawstack record` and by `perf record
// -g`, interleaved A B A B. It reports the share of samples each names the
// hot function in (rawstack from the trace alone, after the perf map is
// deleted; perf from the map at report time), the bytes the JIT events
// add to the trace against the map file perf needs beside perf.data, and
// trace bytes per sample.
func init() {
	register(&scenario{name: "jit", order: 150, run: runJIT})
}

type jitRun struct {
	share             float64
	jitBytes, mapSize int64
	bytesPerSample    float64
}

func runJIT(cfg *config) ([]row, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return absent("jit", "hot function share", "node not installed")
	}
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	app := filepath.Join("cmd", "rawstack", "testdata", "jit", "app.js")
	if _, err := os.Stat(app); err != nil {
		app = filepath.Join("..", app) // run from inside benchmarks/
	}
	src, err := os.ReadFile(app)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "jit")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "app.js"), src, 0o644); err != nil {
		return nil, err
	}
	rounds, pairs := "3000", 11
	if cfg.short {
		rounds, pairs = "1500", 3
	}
	perf, perfErr := exec.LookPath("perf")
	if perfErr != nil {
		if err := needPeer("perf not installed"); err != nil {
			return nil, err
		}
	}
	argv := []string{node, "--perf-basic-prof", "app.js", rounds}
	var rs, pf []jitRun
	for i := 0; i < pairs; i++ {
		err := inTurn(i, func() error {
			r, err := jitRawstack(rawstack, dir, argv)
			rs = append(rs, r)
			return err
		}, func() error {
			if perfErr != nil {
				return nil
			}
			r, err := jitPerf(perf, dir, argv)
			if err != nil {
				return fmt.Errorf("perf record: %w", err)
			}
			pf = append(pf, r)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	med := func(rs []jitRun, f func(jitRun) float64) float64 {
		return medianBy(rs, f)
	}
	share := func(r jitRun) float64 { return 100 * r.share }
	bps := func(r jitRun) float64 { return r.bytesPerSample }
	jitB := func(r jitRun) float64 { return float64(r.jitBytes) }
	mapB := func(r jitRun) float64 { return float64(r.mapSize) }
	note := fmt.Sprintf("median of %d interleaved pairs", pairs)
	if perfErr != nil {
		n := "perf not installed"
		return []row{
			{Scenario: "jit", Metric: "samples naming fibJit (%)", Rawstack: med(rs, share), Better: "higher", Note: n},
			{Scenario: "jit", Metric: "JIT bytes in the trace", Rawstack: med(rs, jitB), Better: "lower", Note: n},
		}, nil
	}
	return []row{
		{Scenario: "jit", Metric: "samples naming fibJit (%)", Rawstack: med(rs, share), Peer: "perf record -g", PeerVal: med(pf, share), Better: "higher", Note: note},
		{Scenario: "jit", Metric: "JIT names: trace bytes vs map file", Rawstack: med(rs, jitB), Peer: "/tmp/perf-PID.map", PeerVal: med(rs, mapB), Better: "lower", Note: "perf needs the map file beside perf.data"},
		{Scenario: "jit", Metric: "trace bytes/sample", Rawstack: med(rs, bps), Peer: "perf.data", PeerVal: med(pf, bps), Better: "lower"},
	}, nil
}

func jitRawstack(rawstack, dir string, argv []string) (jitRun, error) {
	out := filepath.Join(dir, "jit.rawstack")
	cmd := exec.Command(rawstack, append([]string{"record", "-q", "-F", "999", "-o", out, "--"}, argv...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return jitRun{}, fmt.Errorf("rawstack record: %v: %s", err, b)
	}
	var r jitRun
	pid, jitBytes, samples, err := jitTraceBytes(out)
	if err != nil {
		return r, err
	}
	r.jitBytes = jitBytes
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", pid)
	if fi, err := os.Stat(mapPath); err == nil {
		r.mapSize = fi.Size()
	}
	os.Remove(mapPath) // symbolize from the trace alone
	fi, err := os.Stat(out)
	if err != nil {
		return r, err
	}
	r.bytesPerSample = float64(fi.Size()) / float64(max(samples, 1))
	folded, err := exec.Command(rawstack, "convert", out, "--to", "folded", "--no-debuginfod").Output()
	if err != nil {
		return r, fmt.Errorf("rawstack convert: %w", err)
	}
	var all, hit int64
	for _, line := range strings.Split(string(folded), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		n, _ := strconv.ParseInt(line[sp+1:], 10, 64)
		all += n
		if strings.Contains(line[:sp], "fibJit") {
			hit += n
		}
	}
	r.share = float64(hit) / float64(max(all, 1))
	return r, nil
}

func jitPerf(perf, dir string, argv []string) (jitRun, error) {
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command(perf, append([]string{"record", "-q", "-F", "999", "-g", "-o", data, "--"}, argv...)...)
	rec.Dir = dir
	if b, err := rec.CombinedOutput(); err != nil {
		return jitRun{}, fmt.Errorf("perf record: %v: %s", err, b)
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "comm,tid,ip,sym").Output()
	if err != nil {
		return jitRun{}, fmt.Errorf("perf script: %w", err)
	}
	// Remove the map node wrote (perf's child: its pid is in the headers).
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "node" {
			os.Remove("/tmp/perf-" + f[1] + ".map")
		}
	}
	var all, hit int
	for _, block := range bytes.Split(out, []byte("\n\n")) {
		if len(bytes.TrimSpace(block)) == 0 {
			continue
		}
		all++
		if bytes.Contains(block, []byte("fibJit")) {
			hit++
		}
	}
	fi, err := os.Stat(data)
	if err != nil {
		return jitRun{}, err
	}
	return jitRun{share: float64(hit) / float64(max(all, 1)), bytesPerSample: float64(fi.Size()) / float64(max(all, 1))}, nil
}

// jitTraceBytes returns the recorded pid, the bytes of the trace's JIT
// events and of the strings only they reference, and the sample count.
func jitTraceBytes(path string) (pid uint32, jitBytes, samples int64, err error) {
	r, err := format.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer r.Close()
	strSize := map[uint64]int64{}
	jitStr := map[uint64]bool{}
	var prevOff int64
	var prevKind format.Kind
	var prevID uint64
	account := func(end int64) {
		switch n := end - prevOff; prevKind {
		case format.KindJITCode, format.KindJITUnload:
			jitBytes += n
		case format.KindString:
			strSize[prevID] = n
		}
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if ev.Offset > prevOff && ev.Offset-prevOff < 1<<20 { // within a chunk, or across one chunk header
			account(ev.Offset)
		}
		prevOff, prevKind, prevID = ev.Offset, ev.Kind, ev.String.ID
		switch ev.Kind {
		case format.KindProcess:
			if pid == 0 {
				pid = ev.Process.Pid
			}
		case format.KindJITCode:
			jitStr[ev.JITCode.Name] = true
		case format.KindSample, format.KindRawStack:
			samples++
		}
	}
	for id := range jitStr {
		jitBytes += strSize[id]
	}
	return pid, jitBytes, samples, nil
}
