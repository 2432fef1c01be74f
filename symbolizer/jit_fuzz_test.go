package symbolizer_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
)

// FuzzJITNaming drives the JIT naming with arbitrary JITCode, JITUnload
// and Sample events (each 13 bytes of the input: kind, time, address,
// size, name): Build must not panic, must keep every sample, and a named
// JIT frame must lie in the range of an entry of its process.
func FuzzJITNaming(f *testing.F) {
	seed := func(evs ...[]byte) []byte { return bytes.Join(evs, nil) }
	ev := func(kind byte, tm uint16, addr uint32, size uint16, name byte) []byte {
		b := []byte{kind}
		b = binary.LittleEndian.AppendUint16(b, tm)
		b = binary.LittleEndian.AppendUint32(b, addr)
		b = binary.LittleEndian.AppendUint16(b, size)
		b = append(b, name, 0, 0, 0, 0)
		return b
	}
	f.Add(seed(ev(0, 10, 0x1000, 0x100, 1), ev(2, 20, 0x1010, 0, 0), ev(0, 30, 0x1000, 0x80, 2), ev(1, 40, 0x1000, 0x100, 0), ev(2, 50, 0x1010, 0, 0)))
	f.Add(seed(ev(2, 5, 0x2000, 0, 0), ev(0, 900, 0x2000, 0x10, 3)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 13*2000 {
			return
		}
		var buf bytes.Buffer
		w, _ := format.NewWriter(&buf, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic, PointerSize: 8}, nil)
		w.WriteProcess(format.Process{Pid: 7, Name: "node"})
		w.WriteModuleLoad(&format.ModuleLoad{Pid: 7, ID: 1, Base: 0x1000, Size: 0x10000, Kind: format.ModuleAnon})
		for i := uint64(1); i <= 4; i++ {
			w.WriteString(i, string(rune('a'+i)))
		}
		samples := 0
		var stack uint64
		for ; len(data) >= 13; data = data[13:] {
			tm := int64(binary.LittleEndian.Uint16(data[1:]))
			addr := uint64(binary.LittleEndian.Uint32(data[3:]))
			size := uint64(binary.LittleEndian.Uint16(data[7:]))
			switch data[0] % 3 {
			case 0:
				w.WriteJITCode(&format.JITCode{Time: tm, Pid: 7, Addr: addr, Size: size, Name: uint64(data[9] % 5),
					Lines: []format.JITLine{{Offset: uint64(data[10]), Line: uint32(data[11]), File: uint64(data[12] % 5)}}})
			case 1:
				w.WriteJITUnload(format.JITUnload{Time: tm, Pid: 7, Addr: addr, Size: size})
			case 2:
				stack++
				w.WriteStack(stack, []uint64{addr, addr + size})
				w.WriteSample(format.Sample{Time: tm, Pid: 7, Tid: 7, Weight: 1, Stack: stack})
				samples++
			}
		}
		w.Close()
		r, err := format.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		p, err := symbolizer.Build(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.TotalCount(); got != int64(samples) {
			t.Fatalf("%d samples in the profile, %d written", got, samples)
		}
		for _, l := range p.Locations {
			if l.Module != nil && l.Module.Kind == format.ModuleJIT && (l.Abs < l.Module.Base || l.Abs-l.Module.Base > l.Module.Size) {
				t.Fatalf("JIT location %#x outside its module %#x+%#x", l.Abs, l.Module.Base, l.Module.Size)
			}
		}
	})
}
