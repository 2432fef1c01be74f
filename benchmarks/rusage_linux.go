package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// rssWatch follows the peak resident set of a process and its
// descendants. ru_maxrss cannot: Linux carries the high-water mark across
// fork and exec, so a child of this (large) benchmark process reports at
// least the benchmark's own RSS whatever it uses itself. VmHWM in
// /proc/PID/status belongs to the image the process runs now.
type rssWatch struct {
	stop chan struct{}
	done chan int64
}

// watchRSS polls pid's process tree every 20 ms until peakKiB is called.
func watchRSS(pid int) *rssWatch {
	w := &rssWatch{stop: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		peak := map[int]int64{}
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			for _, p := range processTree(pid) {
				if kb := vmHWM(p); kb > peak[p] {
					peak[p] = kb
				}
			}
			select {
			case <-w.stop:
				var sum int64
				for _, kb := range peak {
					sum += kb
				}
				w.done <- sum
				return
			case <-tk.C:
			}
		}
	}()
	return w
}

// peakKiB stops watching and returns the sum over the tree's processes of
// each one's peak RSS, in KiB: an upper bound of the tree's peak.
func (w *rssWatch) peakKiB() int64 {
	close(w.stop)
	return <-w.done
}

// processTree returns pid and its descendants.
func processTree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
