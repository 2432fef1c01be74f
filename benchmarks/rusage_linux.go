package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// rssWatch follows the peak resident set of a recorder: its own process
// and those of its descendants that run another program (rawstack's
// rawstack-ebpf companion), but not the program it traces. ru_maxrss
// cannot: Linux carries the high-water mark across fork and exec, so a
// child of this (large) benchmark process reports at least the
// benchmark's own RSS whatever it uses itself, and a reaped child's
// ru_maxrss is the largest of it and its own children (the traced
// program). VmHWM in /proc/PID/status belongs to the image the process
// runs now.
type rssWatch struct {
	stop   chan struct{}
	finish chan struct{}
	done   chan int64
}

// watchRSS polls the VmHWM of pid, and of its descendants whose
// executable is neither pid's own (a child between fork and exec shares
// pid's memory) nor notExe (the traced program), every 20 ms until
// peakKiB is called; after finishing, every 2 ms.
func watchRSS(pid int, notExe string) *rssWatch {
	w := &rssWatch{stop: make(chan struct{}), finish: make(chan struct{}), done: make(chan int64, 1)}
	if notExe != "" {
		if p, err := filepath.EvalSymlinks(notExe); err == nil {
			notExe = p
		}
	}
	go func() {
		peak := map[int]int64{}
		rootExe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		finish := w.finish
		for {
			for _, p := range processTree(pid) {
				if p != pid {
					exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
					if err != nil || exe == rootExe || exe == notExe {
						continue
					}
				}
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
			case <-finish:
				finish = nil
				tk.Reset(2 * time.Millisecond)
			case <-tk.C:
			}
		}
	}()
	return w
}

// finishing says the recorder was asked to stop: poll faster, so that
// what its shutdown takes is seen before it exits.
func (w *rssWatch) finishing() { close(w.finish) }

// peakKiB stops watching and returns the sum over the recorder's
// processes of each one's peak RSS, in KiB: an upper bound of its peak.
// Called once the recorder exited, it covers the recorder's whole life,
// the window of its rusage.
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
