package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
)

// The format scenario compares trace sizes whole file to whole file: the
// same deep-stack C workload recorded at 1000 Hz with frame pointers by
// `rawstack record --unwind fp` and by `perf record -g`, each file's size
// (headers, mappings, threads, stacks and samples: all a reader needs)
// over its own sample count. The samples perf recorded are also read back
// from perf's raw dump (absolute addresses) and encoded with rawstack's
// Writer, interning stacks as the tracer does: the Stack+Sample events
// alone, a row with no peer (perf.data has no part to set against it), and
// the data of the encode and decode figures.
func init() {
	register(&scenario{name: "format", order: 10, run: runFormat})
}

type perfSample struct {
	time     int64
	pid, tid uint32
	pcs      []uint64
}

func runFormat(cfg *config) ([]row, error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return absent("format", "bytes/sample", "perf not installed (apt-get install linux-perf): no peer")
	}
	bin, err := buildC(cfg, "deepstacks.c", "-O2", "-g", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	secs := "3"
	if cfg.short {
		secs = "1"
	}
	pdata := filepath.Join(cfg.work, "format.perf.data")
	rec := exec.Command("perf", "record", "-q", "-F", "1000", "-g", "-o", pdata, bin, secs)
	if out, err := rec.CombinedOutput(); err != nil {
		return absent("format", "bytes/sample", fmt.Sprintf("perf record failed (perf_event_paranoid?): %v %s", err, bytes.TrimSpace(out)))
	}
	perfBytes, perfN, err := perfSamples("perf", pdata)
	if err != nil {
		return nil, err
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	trace := filepath.Join(cfg.work, "format.rawstack")
	if out, err := exec.Command(cli, "record", "-q", "-F", "1000", "--unwind", "fp", "-o", trace, "--", bin, secs).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("rawstack record: %v: %s", err, bytes.TrimSpace(out))
	}
	rsBytes, rsN, err := countSamples(trace)
	if err != nil {
		return nil, err
	}
	if perfN == 0 || rsN == 0 {
		return nil, fmt.Errorf("no samples: perf.data %d, rawstack %d", perfN, rsN)
	}
	samples, err := readPerfSamples(pdata)
	if err != nil {
		return nil, err
	}
	if len(samples) < 100 {
		return nil, fmt.Errorf("perf recorded only %d samples", len(samples))
	}

	encode := func(w io.Writer) (int, error) {
		fw, err := format.NewWriter(w, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
		if err != nil {
			return 0, err
		}
		ids := map[string]uint64{}
		var key []byte
		for _, s := range samples {
			key = key[:0]
			for _, pc := range s.pcs {
				key = strconv.AppendUint(key, pc, 16)
				key = append(key, ',')
			}
			id, ok := ids[string(key)]
			if !ok {
				id = uint64(len(ids) + 1)
				ids[string(key)] = id
				fw.WriteStack(id, s.pcs)
			}
			fw.WriteSample(format.Sample{Time: s.time, Pid: s.pid, Tid: s.tid, CPU: format.NoCPU, Weight: 1, Stack: id})
		}
		return len(ids), fw.Close()
	}
	var enc bytes.Buffer
	distinct, err := encode(&enc)
	if err != nil {
		return nil, err
	}
	frames := 0
	for _, s := range samples {
		frames += len(s.pcs)
	}
	n := float64(len(samples))
	rows := []row{{
		Scenario: "format", Metric: "trace bytes/sample, whole file", Rawstack: float64(rsBytes) / float64(rsN),
		Peer: "perf.data -g", PeerVal: float64(perfBytes) / float64(perfN), Better: "lower",
		Note: fmt.Sprintf("same workload, %s s at 1000 Hz, frame pointers: rawstack %d samples in %d B, perf %d samples in %d B", secs, rsN, rsBytes, perfN, perfBytes),
	}, {
		Scenario: "format", Metric: "bytes/sample, Stack+Sample events of perf's samples", Rawstack: float64(enc.Len()) / n, Better: "lower",
		Note: fmt.Sprintf("perf's %d samples re-encoded, %d distinct stacks, %.1f frames avg; no headers, mappings or threads; target <= 16", len(samples), distinct, float64(frames)/n),
	}}

	// Encoding cost of a sample whose stack is interned, and decoding
	// throughput, measured on the same samples.
	w, _ := format.NewWriter(io.Discard, format.Header{}, nil)
	res := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s := &samples[i%len(samples)]
			w.WriteSample(format.Sample{Time: s.time, Pid: s.pid, Tid: s.tid, CPU: 0, Weight: 1, Stack: uint64(i%distinct + 1)})
		}
	})
	rows = append(rows, row{Scenario: "format", Metric: "encode ns/sample", Rawstack: float64(res.NsPerOp()), Note: fmt.Sprintf("%d allocs/op; target < 50 ns, 0 allocs", res.AllocsPerOp())})
	data := enc.Bytes()
	res = testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, _ := format.NewReader(bytes.NewReader(data))
			for {
				if _, err := r.Next(); err != nil {
					break
				}
			}
		}
	})
	evs := n + float64(distinct)
	rows = append(rows, row{Scenario: "format", Metric: "decode Mevents/s", Rawstack: evs / (float64(res.NsPerOp()) / 1e9) / 1e6, Better: "higher"})
	return rows, nil
}

// readPerfSamples reads the samples of a perf.data file with their
// absolute callchains from `perf report -D`.
func readPerfSamples(path string) ([]perfSample, error) {
	cmd := exec.Command("perf", "report", "-D", "-i", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var samples []perfSample
	var cur *perfSample
	want := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "PERF_RECORD_SAMPLE("):
			// "562582227856 0x8ae8 [0xf0]: PERF_RECORD_SAMPLE(IP, 0x2): 12040/12040: 0x55ca218511ea ..."
			f := strings.Fields(line)
			t, _ := strconv.ParseInt(f[0], 10, 64)
			var pid, tid uint32
			for i, x := range f {
				if strings.HasPrefix(x, "PERF_RECORD_SAMPLE") && i+2 < len(f) {
					p := strings.SplitN(strings.TrimSuffix(f[i+2], ":"), "/", 2)
					if len(p) == 2 {
						a, _ := strconv.ParseUint(p[0], 10, 32)
						b, _ := strconv.ParseUint(p[1], 10, 32)
						pid, tid = uint32(a), uint32(b)
					}
				}
			}
			samples = append(samples, perfSample{time: t, pid: pid, tid: tid})
			cur = &samples[len(samples)-1]
			want = 0
		case cur != nil && strings.Contains(line, "chain: nr:"):
			want, _ = strconv.Atoi(line[strings.LastIndex(line, ":")+1:])
		case cur != nil && want > 0 && strings.HasPrefix(line, "....."):
			f := strings.Fields(line)
			pc, err := strconv.ParseUint(f[len(f)-1], 16, 64)
			if err == nil && pc < 0xffffffffffffff80 { // skip PERF_CONTEXT_* markers
				cur.pcs = append(cur.pcs, pc)
			}
			want--
		default:
			if want == 0 {
				cur = nil
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("perf report -D %s: %w", path, err)
	}
	return samples, sc.Err()
}
