package kallsyms

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"time"
)

// BenchmarkParseProc parses the running kernel's /proc/kallsyms (read
// once, before the loop) and reports what the table keeps on the heap
// (kept-B) and one lookup's time (lookup-ns).
func BenchmarkParseProc(b *testing.B) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil || len(data) == 0 {
		b.Skipf("no /proc/kallsyms: %v", err)
	}
	var tab *Table
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		if tab, err = parse(bytes.NewReader(data), "/proc/kallsyms", procLines); err != nil {
			b.Skip(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "kept-B") // the last table
	n := min(tab.Len(), 1000)
	t0 := time.Now()
	for i := range n {
		if fr, err := tab.Symbolize(tab.addrs.at(i*tab.Len()/n)+1, nil); err != nil || len(fr) != 1 {
			b.Fatalf("lookup %d: %v %v", i, fr, err)
		}
	}
	b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(n), "lookup-ns")
	runtime.KeepAlive(tab)
	runtime.KeepAlive(data)
}
