package format

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden files")

// sampleEvents returns one event of every kind, with field values that
// exercise negative deltas, large varints and empty/absent fields.
func sampleEvents() []Event {
	guid := [16]byte{0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8}
	return []Event{
		{Kind: KindProcess, Process: Process{Time: 1_000_000, Pid: 4242, Ppid: 1, Name: "prog", Cmdline: "prog\x00--flag"}},
		{Kind: KindProcess, Process: Process{Time: 1_000_050, Pid: 4244, Ppid: 4242, Name: "svc", Attrs: []Label{{"process.executable.path", "/srv/svc"}, {"container.id", "3f9a1c0b2e7d4a5b8c6f0e1d2c3b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f7"}, {"service.name", ""}}}},
		{Kind: KindClockSync, ClockSync: ClockSync{Time: 1_000_100, WallNano: 1_795_000_000_000_000_000}},
		{Kind: KindThreadStart, ThreadStart: ThreadStart{Time: 1_000_200, Pid: 4242, Tid: 4243}},
		{Kind: KindThreadName, ThreadName: ThreadName{Time: 1_000_300, Pid: 4242, Tid: 4243, Name: "worker-1"}},
		{Kind: KindModuleLoad, ModuleLoad: ModuleLoad{Time: 1_000_400, Pid: 4242, ID: 1, Base: 0x5555_5555_4000, Size: 0x2000, FileOffset: 0x1000, Kind: ModuleELF, Path: "/usr/bin/prog", BuildID: []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, GoBuildID: "abc/def/ghi/jkl"}},
		{Kind: KindModuleLoad, ModuleLoad: ModuleLoad{Time: 1_000_450, Pid: 4242, ID: 2, Base: 0x7ff6_0000_0000, Size: 0x10000, Kind: ModulePE, Path: `C:\app\prog.exe`, PDBGUID: guid, PDBAge: 3, PDBPath: `C:\build\prog.pdb`, TimeDateStamp: 0x6543_2100, SizeOfImage: 0x10000, BuildID: []byte{}}},
		{Kind: KindModuleLoad, ModuleLoad: ModuleLoad{Time: 1_000_460, ID: 3, Base: 0xffff_ffff_8100_0000, Size: 0x100_0000, Kind: ModuleKernel, Path: "[kernel.kallsyms]", BuildID: []byte{}}},
		{Kind: KindString, String: String{ID: 1, Value: "request"}},
		{Kind: KindString, String: String{ID: 2, Value: ""}},
		{Kind: KindStack, Stack: Stack{ID: 1, PCs: []uint64{0x5555_5555_5123, 0x5555_5555_5040, 0x7fff_f7a0_0100, 0x5555_5555_4f00}}},
		{Kind: KindStack, Stack: Stack{ID: 2, PCs: []uint64{}}},
		{Kind: KindSample, Sample: Sample{Time: 1_001_000, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1}},
		{Kind: KindSample, Sample: Sample{Time: 1_000_900, Pid: 4242, Tid: 4242, CPU: NoCPU, Weight: 1_000_000, Stack: 0, Flags: SampleOffCPU | SampleTruncated}},
		{Kind: KindRawStack, RawStack: RawStack{Time: 1_002_000, Pid: 4242, Tid: 4243, CPU: 0, Weight: 1, Flags: SampleKernel, RegMask: 1<<6 | 1<<7 | 1<<16, Regs: []uint64{0x7ffe_0000_1000, 0x7ffe_0000_0f00, 0x5555_5555_5123}, StackAddr: 0x7ffe_0000_0f00, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Kernel: 2}},
		{Kind: KindSpanBegin, SpanBegin: SpanBegin{Time: 1_003_000, Tid: 4243, ID: 7, Parent: 0, Name: 1, Stack: 1}},
		{Kind: KindSpanEnd, SpanEnd: SpanEnd{Time: 1_004_000, Tid: 4243, ID: 7}},
		{Kind: KindMarker, Marker: Marker{Time: 1_004_500, Tid: 4242, Name: 1}},
		{Kind: KindCounter, Counter: Counter{Time: 1_005_000, Name: 1, Value: -3.25}},
		{Kind: KindCounter, Counter: Counter{Time: 1_005_001, Name: 1, Value: math.Inf(1)}},
		{Kind: KindLost, Lost: Lost{Time: 1_006_000, Pid: 4242, Count: 17, Reason: LostRingOverflow}},
		{Kind: KindModuleUnload, ModuleUnload: ModuleUnload{Time: 1_007_000, Pid: 4242, ID: 2}},
		{Kind: KindThreadEnd, ThreadEnd: ThreadEnd{Time: 1_008_000, Pid: 4242, Tid: 4243}},
		{Kind: KindProcessEnd, ProcessEnd: ProcessEnd{Time: 1_009_000, Pid: 4242, ExitCode: -11}},
		{Kind: KindString, String: String{ID: 3, Value: "JS:*fibJit /srv/app.js:1:16"}},
		{Kind: KindString, String: String{ID: 4, Value: "/srv/app.js"}},
		{Kind: KindJITCode, JITCode: JITCode{Time: 1_000_700, Pid: 4242, Addr: 0x7f1c_ae7c_6180, Size: 0x180, Name: 3, Source: JITSourcePerfMap}},
		{Kind: KindJITCode, JITCode: JITCode{Time: 1_000_800, Pid: 4242, Addr: 0x7f1c_ae7c_7000, Size: 0x40, Name: 3, Source: JITSourceJitdump,
			Code: []byte{0x55, 0x48, 0x89, 0xe5, 0xc3}, Lines: []JITLine{{Offset: 0x40, Line: 1, Column: 16, File: 4}, {Offset: 0x3a, Line: 2, File: 4}, {Offset: 0x1000, Line: 300, Column: 1, File: 0}}}},
		{Kind: KindJITCode, JITCode: JITCode{Time: 1_000_900, Pid: 4242, Addr: 0x7f1c_ae7c_8000, Size: 0, Name: 0, Code: []byte{}}},
		{Kind: KindJITUnload, JITUnload: JITUnload{Time: 1_000_850, Pid: 4242, Addr: 0x7f1c_ae7c_6180, Size: 0x180}},
		{Kind: KindLabelSet, LabelSet: LabelSet{ID: 1, Labels: []Label{{"request", "GET /"}, {"tenant", ""}}}},
		{Kind: KindLabelSet, LabelSet: LabelSet{ID: 2, Labels: []Label{}}},
		{Kind: KindSample, Sample: Sample{Time: 1_010_000, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1, Goroutine: 18, Labels: 1}},
		{Kind: KindSample, Sample: Sample{Time: 1_010_100, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1, Goroutine: 1 << 40}},
		{Kind: KindAlloc, Alloc: Alloc{Time: 1_011_000, Pid: 4242, Tid: 4243, Stack: 1, Addr: 0x7f00_1234_5000, Bytes: 1 << 40, Objects: 1}},
		{Kind: KindAlloc, Alloc: Alloc{Time: 1_010_900, Pid: 4242, Stack: 1, Bytes: 524288, Objects: 8192}},
		{Kind: KindFree, Free: Free{Time: 1_011_100, Pid: 4242, Tid: 4243, Addr: 0x7f00_1234_5000}},
		{Kind: KindFree, Free: Free{Time: 1_011_200, Pid: 4242, Stack: 1, Bytes: 65536, Objects: 1024}},
		{Kind: KindPyCode, PyCode: PyCode{ID: 1, Name: "gamma_py", File: "/srv/app.py", FirstLine: 3, Table: PyLineTableLocations, Lines: []byte{0x80, 0x00, 0xd8, 0x08, 0x0c}}},
		{Kind: KindPyCode, PyCode: PyCode{ID: 2, Name: "Outer.<locals>.inner", File: "", FirstLine: 1 << 20, Table: PyLineTableNone, Lines: []byte{}}},
		{Kind: KindPyStack, PyStack: PyStack{ID: 1, Frames: []PyFrame{{Code: 1, Offset: 0x2a}, {Code: 2, Offset: 0, Entry: true}, {Code: 1 << 33, Offset: 1<<32 - 1, Entry: true}}}},
		{Kind: KindPyStack, PyStack: PyStack{ID: 2, Frames: []PyFrame{}}},
		{Kind: KindPyStack, PyStack: PyStack{ID: 3, Frames: []PyFrame{{Code: 1, Offset: 4, Entry: true}}, GIL: PyGILHeld}},
		{Kind: KindPyStack, PyStack: PyStack{ID: 4, Frames: []PyFrame{}, GIL: PyGILWaiting}},
		{Kind: KindJITFunc, JITFunc: JITFunc{ID: 1, Runtime: JITRuntimeV8, Name: "mix", File: "/srv/shop.js"}},
		{Kind: KindJITFunc, JITFunc: JITFunc{ID: 2, Runtime: JITRuntimeHotSpot, Name: "Shop.handle", File: ""}},
		{Kind: KindPyStack, PyStack: PyStack{ID: 5, Frames: []PyFrame{}, JIT: []JITFrame{
			{PC: 0x7f0000001234, Func: 1, Line: 9, Tier: JITTierOptimized, Inlined: true},
			{PC: 0x7f0000001234, Func: 2, Line: 1 << 31, Tier: JITTierOptimized},
			{PC: 0x400000, Func: 1, Tier: JITTierInterpreted},
			{PC: ^uint64(0), Func: 0, Line: 0, Tier: JITTierStub}}}},
		{Kind: KindSample, Sample: Sample{Time: 1_010_200, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1, Python: 1}},
		{Kind: KindSample, Sample: Sample{Time: 1_010_300, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1, Goroutine: 3, Labels: 2, Python: 2}},
		{Kind: KindRawStack, RawStack: RawStack{Time: 1_010_400, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1_000_000, RegMask: 1 << 7, Regs: []uint64{0x7ffe_0000_0f00}, StackAddr: 0x7ffe_0000_0f00, Data: []byte{9}, Python: 1}},
		{Kind: KindSample, Sample: Sample{Time: 1_010_200, Pid: 4242, Tid: 4243, CPU: 1, Weight: 1, Stack: 1,
			Link: SpanLink{TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}, SpanID: [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}}}},
	}
}

var testHeader = Header{PointerSize: 8, OS: OSLinux, Arch: ArchAMD64, Clock: ClockMonotonic}

func encode(t testing.TB, evs []Event, opts *WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := w.WriteEvent(&evs[i]); err != nil {
			t.Fatalf("event %d (%v): %v", i, evs[i].Kind, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll decodes every event, deep-copying each, and collects ChunkErrors.
func readAll(t testing.TB, data []byte) ([]Event, []*ChunkError, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	var evs []Event
	var cerrs []*ChunkError
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, cerrs, nil
		}
		var ce *ChunkError
		if errors.As(err, &ce) {
			cerrs = append(cerrs, ce)
			continue
		}
		if err != nil {
			return evs, cerrs, err
		}
		evs = append(evs, cloneEvent(ev))
	}
}

// cloneEvent keeps only the active field, deep-copied, so events compare
// with reflect.DeepEqual against the written ones.
func cloneEvent(ev *Event) Event {
	out := Event{Kind: ev.Kind}
	switch ev.Kind {
	case KindProcess:
		out.Process = ev.Process
		out.Process.Attrs = append([]Label(nil), ev.Process.Attrs...)
		if len(out.Process.Attrs) == 0 {
			out.Process.Attrs = nil
		}
	case KindProcessEnd:
		out.ProcessEnd = ev.ProcessEnd
	case KindClockSync:
		out.ClockSync = ev.ClockSync
	case KindThreadStart:
		out.ThreadStart = ev.ThreadStart
	case KindThreadName:
		out.ThreadName = ev.ThreadName
	case KindThreadEnd:
		out.ThreadEnd = ev.ThreadEnd
	case KindModuleLoad:
		out.ModuleLoad = ev.ModuleLoad
		out.ModuleLoad.BuildID = append([]byte{}, ev.ModuleLoad.BuildID...)
	case KindModuleUnload:
		out.ModuleUnload = ev.ModuleUnload
	case KindString:
		out.String = ev.String
	case KindStack:
		out.Stack = Stack{ID: ev.Stack.ID, PCs: append([]uint64{}, ev.Stack.PCs...)}
	case KindSample:
		out.Sample = ev.Sample
	case KindRawStack:
		out.RawStack = ev.RawStack
		out.RawStack.Regs = append([]uint64{}, ev.RawStack.Regs...)
		out.RawStack.Data = append([]byte{}, ev.RawStack.Data...)
	case KindSpanBegin:
		out.SpanBegin = ev.SpanBegin
	case KindSpanEnd:
		out.SpanEnd = ev.SpanEnd
	case KindMarker:
		out.Marker = ev.Marker
	case KindCounter:
		out.Counter = ev.Counter
	case KindLost:
		out.Lost = ev.Lost
	case KindJITCode:
		out.JITCode = ev.JITCode
		if ev.JITCode.Code != nil {
			out.JITCode.Code = append([]byte{}, ev.JITCode.Code...)
		}
		if ev.JITCode.Lines != nil {
			out.JITCode.Lines = append([]JITLine{}, ev.JITCode.Lines...)
		}
	case KindJITUnload:
		out.JITUnload = ev.JITUnload
	case KindAlloc:
		out.Alloc = ev.Alloc
	case KindFree:
		out.Free = ev.Free
	case KindLabelSet:
		out.LabelSet = LabelSet{ID: ev.LabelSet.ID, Labels: append([]Label{}, ev.LabelSet.Labels...)}
	case KindPyCode:
		out.PyCode = ev.PyCode
		out.PyCode.Lines = append([]byte{}, ev.PyCode.Lines...)
	case KindPyStack:
		out.PyStack = PyStack{ID: ev.PyStack.ID, Frames: append([]PyFrame{}, ev.PyStack.Frames...), GIL: ev.PyStack.GIL}
		if ev.PyStack.JIT != nil {
			out.PyStack.JIT = append([]JITFrame{}, ev.PyStack.JIT...)
		}
	case KindJITFunc:
		out.JITFunc = ev.JITFunc
	case KindUnknown:
		out.Code = ev.Code
		out.Unknown = append([]byte{}, ev.Unknown...)
	}
	return out
}

func TestRoundTripEveryKind(t *testing.T) {
	want := sampleEvents()
	seen := map[Kind]bool{}
	for _, e := range want {
		seen[e.Kind] = true
	}
	for k := Kind(1); int(k) < NumKinds; k++ {
		if int(k) < len(kindNames) && kindNames[k] == "" {
			continue // reserved, not defined
		}
		if !seen[k] {
			t.Errorf("sampleEvents has no %v event", k)
		}
	}
	for _, cs := range []int{0, 1, 7, 64} { // 1 and 7: a chunk per event or so
		t.Run(fmt.Sprintf("chunk%d", cs), func(t *testing.T) {
			data := encode(t, want, &WriterOptions{ChunkSize: cs})
			got, cerrs, err := readAll(t, data)
			if err != nil || len(cerrs) > 0 {
				t.Fatalf("read: %v %v", err, cerrs)
			}
			if len(got) != len(want) {
				t.Fatalf("read %d events, wrote %d", len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestRoundTripRandom writes random samples and stacks with random chunk
// sizes and checks every field survives, including the per-chunk deltas.
func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 50; iter++ {
		var want []Event
		tm := rng.Int63n(1 << 40)
		for i := 0; i < 500; i++ {
			tm += rng.Int63n(2_000_000) - 100_000
			switch rng.Intn(4) {
			case 0:
				pcs := make([]uint64, rng.Intn(40))
				for j := range pcs {
					pcs[j] = rng.Uint64() >> uint(rng.Intn(64))
				}
				want = append(want, Event{Kind: KindStack, Stack: Stack{ID: uint64(i + 1), PCs: pcs}})
			case 1:
				data := make([]byte, rng.Intn(300))
				rng.Read(data)
				want = append(want, Event{Kind: KindRawStack, RawStack: RawStack{Time: tm, Pid: rng.Uint32(), Tid: rng.Uint32(), CPU: rng.Uint32(), Weight: rng.Uint64(), RegMask: 0b101, Regs: []uint64{rng.Uint64(), rng.Uint64()}, StackAddr: rng.Uint64(), Data: data}})
			default:
				s := Sample{Time: tm, Pid: rng.Uint32() % 4, Tid: rng.Uint32(), CPU: rng.Uint32(), Weight: rng.Uint64() >> uint(rng.Intn(64)), Stack: rng.Uint64() >> uint(rng.Intn(64)), Flags: SampleFlags(rng.Intn(8))}
				if rng.Intn(2) == 0 {
					s.Goroutine, s.Labels = rng.Uint64()>>uint(rng.Intn(64)), uint64(rng.Intn(3))
				}
				want = append(want, Event{Kind: KindSample, Sample: s})
			}
		}
		data := encode(t, want, &WriterOptions{ChunkSize: 1 + rng.Intn(4096)})
		got, cerrs, err := readAll(t, data)
		if err != nil || len(cerrs) > 0 {
			t.Fatalf("iteration %d: %v %v", iter, err, cerrs)
		}
		if !reflect.DeepEqual(got, want) {
			for i := range want {
				if i >= len(got) || !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("iteration %d event %d differs:\n got %+v\nwant %+v", iter, i, got[min(i, len(got)-1)], want[i])
				}
			}
			t.Fatalf("iteration %d: %d events read, %d written", iter, len(got), len(want))
		}
	}
}

func TestUnknownEventsSkipped(t *testing.T) {
	evs := []Event{
		{Kind: KindString, String: String{ID: 1, Value: "a"}},
		{Kind: KindUnknown, Code: 200, Unknown: []byte{9, 8, 7}},
		{Kind: KindUnknown, Code: 19, Unknown: bytes.Repeat([]byte{0xff}, 300)},
		{Kind: KindString, String: String{ID: 2, Value: "b"}},
	}
	got, cerrs, err := readAll(t, encode(t, evs, nil))
	if err != nil || len(cerrs) > 0 {
		t.Fatal(err, cerrs)
	}
	if !reflect.DeepEqual(got, evs) {
		t.Fatalf("got %+v", got)
	}
}

// TestTrailingFieldsIgnored: a newer writer may append fields to an event;
// this reader must read the fields it knows and ignore the rest.
func TestTrailingFieldsIgnored(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, testHeader, nil)
	// A ThreadName with an extra field the reader does not know.
	body := []byte{}
	body = appendZigzag(body, 5)            // time
	body = append(body, 1, 2, 1, 'x')       // pid, tid, name "x"
	body = append(body, 0xAA, 0xBB, 0x01)   // future fields
	w.writeRaw(uint8(KindThreadName), body) //nolint:errcheck
	w.Close()
	got, cerrs, err := readAll(t, b.Bytes())
	if err != nil || len(cerrs) > 0 {
		t.Fatal(err, cerrs)
	}
	want := ThreadName{Time: 5, Pid: 1, Tid: 2, Name: "x"}
	if len(got) != 1 || got[0].ThreadName != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestHeaderErrors(t *testing.T) {
	good := encode(t, nil, nil)
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "too short"},
		{"magic", append([]byte("NOTRAWST"), good[8:]...), "bad magic"},
		{"version", append(append([]byte{}, good[:8]...), append([]byte{9, 0}, good[10:]...)...), "unsupported version 9"},
		{"ptrsize", append(append([]byte{}, good[:13]...), append([]byte{3}, good[14:]...)...), "pointer size 3"},
	} {
		_, err := NewReader(bytes.NewReader(tc.data))
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want FormatError containing %q", tc.name, err, tc.msg)
		}
	}
}

// chunkedStream writes n chunks of 10 events each and returns the stream
// and the offset of each chunk.
func chunkedStream(t *testing.T, nchunks int) ([]byte, []int64, [][]Event) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader, nil)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	var per [][]Event
	for c := 0; c < nchunks; c++ {
		offs = append(offs, w.BytesWritten())
		var evs []Event
		for i := 0; i < 10; i++ {
			e := Event{Kind: KindSample, Sample: Sample{Time: int64(c*1000 + i), Pid: 1, Tid: uint32(c), CPU: 0, Weight: 1, Stack: uint64(i)}}
			evs = append(evs, e)
			if err := w.WriteEvent(&e); err != nil {
				t.Fatal(err)
			}
		}
		per = append(per, evs)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), offs, per
}

// TestTruncated cuts a stream at every byte: every chunk that is complete
// must be read, and the partial one reported with its offset.
func TestTruncated(t *testing.T) {
	data, offs, per := chunkedStream(t, 4)
	for cut := HeaderSize; cut < len(data); cut++ {
		got, cerrs, err := readAll(t, data[:cut])
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		complete := 0
		for complete < len(offs) && (complete+1 == len(offs) && int64(len(data)) <= int64(cut) || complete+1 < len(offs) && offs[complete+1] <= int64(cut)) {
			complete++
		}
		var want []Event
		for c := 0; c < complete; c++ {
			want = append(want, per[c]...)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("cut %d: read %d events, want the %d of %d complete chunks", cut, len(got), len(want), complete)
		}
		partial := int64(cut) > offs[complete]
		if partial != (len(cerrs) == 1) || len(cerrs) > 1 {
			t.Fatalf("cut %d: chunk errors %v, partial chunk %v", cut, cerrs, partial)
		}
		if partial && cerrs[0].Offset != offs[complete] {
			t.Fatalf("cut %d: error at offset %d, want %d: %v", cut, cerrs[0].Offset, offs[complete], cerrs[0])
		}
	}
}

// TestBitFlips flips every bit of a stream's chunks in turn: exactly the
// hit chunk is lost, the error names its offset, and every other chunk is
// read intact.
func TestBitFlips(t *testing.T) {
	data, offs, per := chunkedStream(t, 3)
	chunkOf := func(pos int) int {
		c := 0
		for c+1 < len(offs) && offs[c+1] <= int64(pos) {
			c++
		}
		return c
	}
	for pos := HeaderSize; pos < len(data); pos++ {
		for bit := 0; bit < 8; bit++ {
			bad := append([]byte{}, data...)
			bad[pos] ^= 1 << bit
			got, cerrs, err := readAll(t, bad)
			if err != nil {
				t.Fatalf("flip %d.%d: %v", pos, bit, err)
			}
			hit := chunkOf(pos)
			var want []Event
			for c := range per {
				if c != hit {
					want = append(want, per[c]...)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("flip %d.%d in chunk %d: read %d events, want %d", pos, bit, hit, len(got), len(want))
			}
			if len(cerrs) != 1 || cerrs[0].Offset != offs[hit] {
				t.Fatalf("flip %d.%d in chunk %d at %d: errors %v", pos, bit, hit, offs[hit], cerrs)
			}
		}
	}
}

// TestGarbageBetweenChunks: bytes inserted between chunks are skipped and
// reported; the chunks on both sides are read.
func TestGarbageBetweenChunks(t *testing.T) {
	data, offs, per := chunkedStream(t, 2)
	junk := []byte("garbage RSC junk")
	bad := append(append(append([]byte{}, data[:offs[1]]...), junk...), data[offs[1]:]...)
	got, cerrs, err := readAll(t, bad)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]Event{}, per[0]...), per[1]...); !reflect.DeepEqual(got, want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	if len(cerrs) != 1 || cerrs[0].Offset != offs[1] || cerrs[0].Skipped != int64(len(junk)) {
		t.Fatalf("errors %v, want one at %d skipping %d", cerrs, offs[1], len(junk))
	}
}

func TestGolden(t *testing.T) {
	data := encode(t, sampleEvents(), nil)
	path := filepath.Join("testdata", "every_kind.rawstack")
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(data, want) {
		t.Fatalf("encoding of sampleEvents changed; if intended, the format version or SPEC.md must say so (go test -update)")
	}
	// The dump is the human-readable golden: one line per event.
	var dump strings.Builder
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&dump, "%6d %s\n", ev.Offset, DumpEvent(ev))
	}
	gpath := filepath.Join("testdata", "every_kind.golden")
	if *update {
		if err := os.WriteFile(gpath, []byte(dump.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gwant, err := os.ReadFile(gpath)
	if err != nil {
		t.Fatal(err)
	}
	if dump.String() != string(gwant) {
		t.Fatalf("dump differs from %s (go test -update):\n%s", gpath, dump.String())
	}
}

// TestWriterAllocs pins the capture path: encoding a sample or an
// interned stack allocates nothing once the chunk buffer is warm.
func TestWriterAllocs(t *testing.T) {
	w, err := NewWriter(io.Discard, testHeader, nil)
	if err != nil {
		t.Fatal(err)
	}
	pcs := make([]uint64, 32)
	for i := range pcs {
		pcs[i] = 0x40_0000 + uint64(i)*0x1234
	}
	raw := &RawStack{RegMask: 7, Regs: []uint64{1, 2, 3}, Data: make([]byte, 512)}
	jit := &JITCode{Pid: 1, Addr: 0x7f00_0000_1000, Size: 0x180, Name: 3, Source: JITSourceJitdump,
		Code: make([]byte, 64), Lines: []JITLine{{Offset: 0x10, Line: 1, File: 4}, {Offset: 0x30, Line: 2, File: 4}}}
	var tm int64
	allocs := testing.AllocsPerRun(10000, func() {
		tm += 1_000_000
		w.WriteSample(Sample{Time: tm, Pid: 1, Tid: 2, CPU: 1, Weight: 1, Stack: uint64(tm % 1000)})
		w.WriteSample(Sample{Time: tm, Pid: 1, Tid: 2, CPU: 1, Weight: 1, Stack: uint64(tm % 1000), Goroutine: uint64(tm % 5000), Labels: 3})
		w.WriteStack(uint64(tm), pcs)
		raw.Time = tm
		w.WriteRawStack(raw)
		jit.Time = tm
		w.WriteJITCode(jit)
		w.WriteJITUnload(JITUnload{Time: tm, Pid: 1, Addr: jit.Addr, Size: jit.Size})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event, want 0", allocs)
	}
}

// TestReaderAllocs: decoding samples and stacks reuses the Reader's buffers.
func TestReaderAllocs(t *testing.T) {
	data := benchStream(t, 1000, 20000)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ { // warm up
		r.Next()
	}
	allocs := testing.AllocsPerRun(10000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event, want 0", allocs)
	}
}
