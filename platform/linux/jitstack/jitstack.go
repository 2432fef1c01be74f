// Package jitstack is what the JIT runtimes' frame readers
// (platform/linux/v8, platform/linux/hotspot) share of a sampled thread's
// stack: the registers a walk starts from, the stack as the sample copied
// it, and the search for a return address in it.
package jitstack

import "encoding/binary"

// Regs are the registers a walk starts from: the sampled pc, stack
// pointer and frame pointer (rbp).
type Regs struct{ PC, SP, FP uint64 }

// Stack is the thread's stack as the sample copied it: Data holds the
// bytes from Addr on. Live says the stack may also be read from the
// process (its threads are stopped: a snapshot); otherwise a frame
// outside the copy ends the walk, as the thread has moved on since.
type Stack struct {
	Addr uint64
	Data []byte
	Live bool
}

// ReadFunc reads process pid's memory at addr into b, reporting whether
// all of it could be read.
type ReadFunc func(pid uint32, addr uint64, b []byte) bool

// Read reads the stack at addr into b: from the copy, or from process pid
// when st.Live.
func (st Stack) Read(read ReadFunc, pid uint32, addr uint64, b []byte) bool {
	if addr >= st.Addr && addr+uint64(len(b)) <= st.Addr+uint64(len(st.Data)) && addr+uint64(len(b)) > addr {
		copy(b, st.Data[addr-st.Addr:])
		return true
	}
	return st.Live && read(pid, addr, b)
}

// Find returns the address, at or above from and below from+limit, of the
// first stack word holding ret: where the call that returns to ret saved
// its return address. Live stacks are read through scan, a block at a
// time, never across a multiple of its length (a page, if it is one).
func (st Stack) Find(read ReadFunc, pid uint32, scan []byte, from, ret, limit uint64) (uint64, bool) {
	from = (from + 7) &^ 7
	end := from + limit
	for at := from; at < end; {
		var blk []byte
		if at >= st.Addr && at < st.Addr+uint64(len(st.Data)) {
			blk = st.Data[at-st.Addr:]
			blk = blk[:len(blk)&^7]
		} else if st.Live {
			n := uint64(len(scan)) - at%uint64(len(scan))
			blk = scan[:n]
			if !read(pid, at, blk) {
				return 0, false
			}
		} else {
			return 0, false
		}
		if len(blk) == 0 {
			return 0, false
		}
		for off := 0; off+8 <= len(blk); off += 8 {
			if binary.LittleEndian.Uint64(blk[off:]) == ret {
				return at + uint64(off), true
			}
		}
		at += uint64(len(blk))
	}
	return 0, false
}
