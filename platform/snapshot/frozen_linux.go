package snapshot

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/rawstack/rawstack/internal/unix"
)

// Frozen runs f while every thread of the live process pid is stopped, as
// [Process] and [Dump] stop them (PTRACE_SEIZE + PTRACE_INTERRUPT, no
// signal sent, detached on every path), and lets them go when f returns.
// f gets each stopped thread's general registers (the main thread first)
// and read, which fills a batch of reads of the process's memory with as
// few system calls as it can (process_vm_readv, 1024 pieces a call). It
// returns the CLOCK_MONOTONIC time the threads were stopped at and how
// long they stayed stopped.
//
// Frozen is for readers that know what they need: `rawstack snapshot
// --goroutines` copies the goroutines' g's and stacks, a few MB, where
// [Dump] copies every touched page.
func Frozen(pid int, f func(threads []ImageThread, read func([]MemRead)) error) (at int64, stopped time.Duration, err error) {
	if err := checkTarget("frozen read", pid); err != nil {
		return 0, 0, err
	}
	dir := "/proc/" + strconv.Itoa(pid)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, fmt.Errorf("snapshot: no process %d", pid)
		}
		return 0, 0, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := &stopper{pid: pid, dir: dir}
	defer st.release()
	start := time.Now()
	if err := st.stopAll(); err != nil {
		return 0, 0, err
	}
	at = unix.Monotonic()
	var threads []ImageThread
	for _, tr := range st.tracees {
		if tr.state != stateStopped || tr.gregs == nil {
			continue
		}
		t := ImageThread{Tid: tr.tid, Gregs: tr.gregs}
		if tr.tid == pid {
			threads = append([]ImageThread{t}, threads...)
		} else {
			threads = append(threads, t)
		}
	}
	if len(threads) == 0 {
		return 0, 0, fmt.Errorf("snapshot: pid %d: no thread could be stopped", pid)
	}
	lm := newLiveMem(pid, nil)
	defer lm.close()
	var r0, r1 batchReader
	r0.pid, r0.lm = pid, lm
	r1.pid, r1.lm = pid, newLiveMem(pid, nil)
	defer r1.lm.close()
	read := func(rs []MemRead) {
		// Large batches are split over two threads: process_vm_readv
		// takes the target's memory map lock shared, so both proceed,
		// and the target's stop is what this shortens.
		if len(rs) < 2*frozenSplit || runtime.NumCPU() < 2 {
			r0.read(rs)
			return
		}
		half := len(rs) / 2
		done := make(chan struct{})
		go func() {
			r1.read(rs[half:])
			close(done)
		}()
		r0.read(rs[:half])
		<-done
	}
	err = f(threads, read)
	st.release()
	return at, time.Since(start), err
}

// ReadLive reads the memory of the process pid, without stopping it,
// as Frozen's reader does (process_vm_readv, /proc/PID/mem where that is
// refused): what it reads may be changing while it reads. It suits a
// look before a stop, such as planning what to read while stopped.
func ReadLive(pid int, rs []MemRead) {
	b := batchReader{pid: pid, lm: newLiveMem(pid, nil)}
	defer b.lm.close()
	b.read(rs)
}

// frozenSplit is the batch size above which Frozen's reads are split over
// two threads (half each).
const frozenSplit = 1024

// batchReader reads batches of MemRead with process_vm_readv, 1024
// pieces a call (IOV_MAX), or /proc/PID/mem where that call is refused.
type batchReader struct {
	pid   int
	lm    *liveMem
	vr    unix.VMReader
	iov   []unix.RemoteIovec
	bufs  [][]byte
	local []byte
}

func (b *batchReader) read(rs []MemRead) {
	for len(rs) > 0 {
		k := min(len(rs), 1024) // IOV_MAX
		b.iov, b.bufs = b.iov[:0], b.bufs[:0]
		for i := range rs[:k] {
			rs[i].OK = len(rs[i].Buf) == 0
			if len(rs[i].Buf) > 0 {
				b.iov = append(b.iov, unix.RemoteIovec{Base: uintptr(rs[i].Addr), Len: len(rs[i].Buf)})
				b.bufs = append(b.bufs, rs[i].Buf)
			}
		}
		n, err := b.vr.Read(b.pid, b.bufs, b.iov)
		if err == unix.ENOSYS || err == unix.EPERM {
			// No process_vm_readv here: /proc/PID/mem, through a buffer.
			b.local = b.local[:0]
			for _, buf := range b.bufs {
				b.local = append(b.local, buf...)
			}
			n = b.lm.read(b.local, b.iov)
			pos := 0
			for _, buf := range b.bufs {
				if n-pos < len(buf) {
					break
				}
				copy(buf, b.local[pos:])
				pos += len(buf)
			}
		} else if err != nil {
			n = 0
		}
		pos, done := 0, 0
		for i := range rs[:k] { // the reads before the first that failed
			l := len(rs[i].Buf)
			if n-pos < l {
				break
			}
			rs[i].OK = true
			pos += l
			done++
		}
		if done < k { // rs[done] failed: leave it out, go on
			done++
		}
		rs = rs[done:]
	}
}
