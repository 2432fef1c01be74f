// Package format is rawstack's one event format: the stream a tracer writes
// on the host and the symbolizer reads offline. SPEC.md in this directory is
// the normative specification; this package implements it.
//
// A stream is a header followed by CRC-checked chunks of varint- and
// delta-encoded events. Writing an event appends to a caller-owned buffer
// and does not allocate:
//
//	w, err := format.NewWriter(f, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
//	w.WriteStack(1, []uint64{0x401136, 0x401182, 0x4011c0})
//	w.WriteSample(format.Sample{Time: t, Pid: pid, Tid: tid, CPU: 0, Weight: 10_101_010, Stack: 1}) // ns of CPU: 99 Hz
//	err = w.Close()
//
// Reading is a loop over [Reader.Next]; a damaged chunk is reported as a
// [*ChunkError] and skipped, and reading goes on:
//
//	r, err := format.Open("trace.rawstack")
//	defer r.Close()
//	for {
//		ev, err := r.Next()
//		if err == io.EOF {
//			break
//		}
//		var ce *format.ChunkError
//		if errors.As(err, &ce) {
//			log.Print(ce) // names the byte offset; the rest is still read
//			continue
//		}
//		if err != nil {
//			return err
//		}
//		switch ev.Kind {
//		case format.KindSample:
//			use(ev.Sample)
//		}
//	}
package format
