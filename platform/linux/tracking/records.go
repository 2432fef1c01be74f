package tracking

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kernel record types (include/uapi/linux/perf_event.h).
const (
	recMmap        = 1
	recLost        = 2
	recComm        = 3
	recExit        = 4
	recThrottle    = 5
	recUnthrottle  = 6
	recFork        = 7
	recSample      = 9
	recMmap2       = 10
	recLostSamples = 13
)

// Misc bits.
const (
	miscCommExec     = 1 << 13
	miscMmapBuildID  = 1 << 14
	miscCPUModeMask  = 7
	miscCPUModeKern  = 1
	miscCPUModeUser  = 2
	perfContextMax   = ^uint64(4095) + 1 // values >= this (as uint64) are PERF_CONTEXT_* markers
	perfContextKern  = ^uint64(128) + 1  // (u64)-128
	perfContextUser  = ^uint64(512) + 1  // (u64)-512
	maxCallchain     = 1024              // cap on the callchain length taken from a record
	maxFilenameBytes = 4096
)

// sampleIDSize is the size of the sample_id trailer of non-sample records
// for our sample_type (TID, TIME, CPU).
const sampleIDSize = 24

// errRecord is wrapped by every record decoding error.
var errRecord = errors.New("malformed perf record")

// record is the package's name for Record.
type record = Record

// Record is one decoded kernel record. Byte slices alias the record bytes
// and PCs alias the decoder's buffer: valid until the next decode.
type Record struct {
	Type uint32
	Misc uint16

	// sample_id (samples, and every other record through sample_id_all)
	Pid, Tid uint32
	Time     uint64
	CPU      uint32

	// PERF_RECORD_SAMPLE
	IP     uint64
	Period uint64
	PCs    []uint64 // markers stripped, leaf first
	Kernel bool     // the leaf frame is in the kernel
	// UserAt is where the user frames start in PCs (len(PCs) when
	// there are none): after the kernel's, which a user callchain
	// follows.
	UserAt int

	// PERF_RECORD_MMAP2
	Addr, Len, Pgoff uint64
	Maj, Min         uint32
	Ino              uint64
	BuildID          []byte
	Prot, Flags      uint32
	Filename         []byte

	// PERF_RECORD_COMM
	Comm []byte

	// PERF_RECORD_FORK / EXIT
	Ppid, Ptid uint32

	// PERF_RECORD_LOST / LOST_SAMPLES
	Lost uint64

	// PERF_RECORD_THROTTLE / UNTHROTTLE: the event id (Time is set too)
	ID uint64

	userStack // PERF_SAMPLE_REGS_USER and STACK_USER, when asked for

	// Python frames a sampler read at the sample (the eBPF back end):
	// PyRead says it read them (Py holds cpython.RawWords words a
	// frame, leaf first; PyCut that it stopped at its depth cap), PyGIL
	// that the thread held the GIL.
	Py                   []uint64
	PyRead, PyGIL, PyCut bool
}

// decodeRecord decodes rec (one whole record, header included) into r,
// reusing r.PCs' storage. Records of types it does not know are returned
// with only Type and Misc set.
func decodeRecord(rec []byte, r *record) error {
	if len(rec) < 8 {
		return fmt.Errorf("%w: %d bytes", errRecord, len(rec))
	}
	le := binary.LittleEndian
	r.Type = le.Uint32(rec)
	r.Misc = le.Uint16(rec[4:])
	size := int(le.Uint16(rec[6:]))
	if size < 8 || size > len(rec) {
		return fmt.Errorf("%w: type %d: size %d of %d bytes", errRecord, r.Type, size, len(rec))
	}
	b := rec[8:size]
	switch r.Type {
	case recSample:
		return decodeSample(b, r)
	case recMmap2, recComm, recExit, recFork, recLost, recLostSamples, recThrottle, recUnthrottle:
	default:
		return nil
	}
	// sample_id trailer
	if len(b) < sampleIDSize {
		return fmt.Errorf("%w: type %d: %d bytes", errRecord, r.Type, len(b))
	}
	id := b[len(b)-sampleIDSize:]
	r.Pid, r.Tid = le.Uint32(id), le.Uint32(id[4:])
	r.Time = le.Uint64(id[8:])
	r.CPU = le.Uint32(id[16:])
	b = b[:len(b)-sampleIDSize]
	switch r.Type {
	case recMmap2:
		// pid, tid, addr, len, pgoff, (maj, min, ino, ino_gen | bid size, bid), prot, flags, filename
		if len(b) < 8+24+24+8 {
			return fmt.Errorf("%w: mmap2: %d bytes", errRecord, len(b))
		}
		r.Pid, r.Tid = le.Uint32(b), le.Uint32(b[4:])
		r.Addr, r.Len, r.Pgoff = le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])
		r.BuildID = nil
		r.Maj, r.Min, r.Ino = 0, 0, 0
		if r.Misc&miscMmapBuildID != 0 {
			n := int(b[32])
			if n > 20 {
				n = 20
			}
			r.BuildID = b[36 : 36+n]
		} else {
			r.Maj, r.Min = le.Uint32(b[32:]), le.Uint32(b[36:])
			r.Ino = le.Uint64(b[40:])
		}
		r.Prot, r.Flags = le.Uint32(b[56:]), le.Uint32(b[60:])
		r.Filename = cstring(b[64:], maxFilenameBytes)
	case recComm:
		if len(b) < 8 {
			return fmt.Errorf("%w: comm: %d bytes", errRecord, len(b))
		}
		r.Pid, r.Tid = le.Uint32(b), le.Uint32(b[4:])
		r.Comm = cstring(b[8:], 16)
	case recFork, recExit:
		if len(b) < 24 {
			return fmt.Errorf("%w: fork/exit: %d bytes", errRecord, len(b))
		}
		r.Pid, r.Ppid, r.Tid, r.Ptid = le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
		r.Time = le.Uint64(b[16:])
	case recLost:
		if len(b) < 16 {
			return fmt.Errorf("%w: lost: %d bytes", errRecord, len(b))
		}
		r.Lost = le.Uint64(b[8:])
	case recThrottle, recUnthrottle:
		if len(b) < 24 {
			return fmt.Errorf("%w: throttle: %d bytes", errRecord, len(b))
		}
		r.Time, r.ID = le.Uint64(b), le.Uint64(b[8:])
	case recLostSamples:
		if len(b) < 8 {
			return fmt.Errorf("%w: lost samples: %d bytes", errRecord, len(b))
		}
		r.Lost = le.Uint64(b)
	}
	return nil
}

// decodeSample decodes a PERF_RECORD_SAMPLE body for sample_type
// IP|TID|TIME|CPU|PERIOD|CALLCHAIN.
func decodeSample(b []byte, r *record) error {
	le := binary.LittleEndian
	if len(b) < 48 {
		return fmt.Errorf("%w: sample: %d bytes", errRecord, len(b))
	}
	r.IP = le.Uint64(b)
	r.Pid, r.Tid = le.Uint32(b[8:]), le.Uint32(b[12:])
	r.Time = le.Uint64(b[16:])
	r.CPU = le.Uint32(b[24:])
	r.Period = le.Uint64(b[32:])
	nr := le.Uint64(b[40:])
	b = b[48:]
	if nr > uint64(len(b)/8) {
		return fmt.Errorf("%w: sample: callchain of %d in %d bytes", errRecord, nr, len(b))
	}
	rest := b[8*nr:]
	if nr > maxCallchain {
		nr = maxCallchain
	}
	pcs := r.PCs[:0]
	r.Kernel = r.Misc&miscCPUModeMask == miscCPUModeKern
	r.UserAt = -1
	first := true
	for i := 0; i < int(nr); i++ {
		pc := le.Uint64(b[i*8:])
		if pc >= perfContextMax {
			if first {
				r.Kernel = pc == perfContextKern
			}
			if pc == perfContextUser && r.UserAt < 0 {
				r.UserAt = len(pcs)
			}
			first = false
			continue
		}
		first = false
		pcs = append(pcs, pc)
	}
	if len(pcs) == 0 {
		pcs = append(pcs, r.IP)
	}
	r.PCs = pcs
	switch {
	case r.UserAt >= 0:
	case r.Kernel:
		r.UserAt = len(pcs)
	default: // no markers: a user leaf's chain
		r.UserAt = 0
	}
	if r.NUserRegs > 0 {
		return decodeUserStack(rest, r)
	}
	return nil
}

// cstring returns b up to its first NUL, at most max bytes.
func cstring(b []byte, max int) []byte {
	if len(b) > max {
		b = b[:max]
	}
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// recordTime returns the time stamp of a record (header included) for
// ordering, or 0 when it has none we know of.
func recordTime(rec []byte) uint64 {
	if len(rec) < 8 {
		return 0
	}
	size := int(binary.LittleEndian.Uint16(rec[6:]))
	if size > len(rec) {
		return 0
	}
	switch binary.LittleEndian.Uint32(rec) {
	case recSample:
		if size >= 8+24 {
			return binary.LittleEndian.Uint64(rec[8+16:])
		}
	case recMmap2, recComm, recExit, recFork, recLost, recLostSamples, recThrottle, recUnthrottle:
		if size >= 8+sampleIDSize {
			return binary.LittleEndian.Uint64(rec[size-sampleIDSize+8:])
		}
	}
	return 0
}
