package otlp_test

import (
	"bytes"
	"testing"

	"github.com/rawstack/rawstack/format"
)

// TestMemoryProfiles: Alloc and Free events become the four heap sample
// types, alloc_* with the batch's allocations and inuse_* with what the
// sampled allocations hold at its end.
func TestMemoryProfiles(t *testing.T) {
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const pid = 7
	w.WriteStack(1, []uint64{0x1000, 0x2000})
	w.WriteStack(2, []uint64{0x3000, 0x2000})
	w.WriteAlloc(format.Alloc{Time: 20, Pid: pid, Tid: pid, Stack: 1, Addr: 0xa000, Bytes: 1000, Objects: 2})
	w.WriteAlloc(format.Alloc{Time: 30, Pid: pid, Tid: pid, Stack: 1, Addr: 0xb000, Bytes: 500, Objects: 1})
	w.WriteFree(format.Free{Time: 40, Pid: pid, Tid: pid, Addr: 0xa000})
	w.WriteFree(format.Free{Time: 50, Pid: pid, Tid: pid, Addr: 0xc000}) // never sampled
	w.WriteAlloc(format.Alloc{Time: 60, Pid: pid, Stack: 2, Bytes: 4096, Objects: 4})
	w.WriteFree(format.Free{Time: 70, Pid: pid, Stack: 2, Bytes: 1024, Objects: 1})
	w.Close()
	p := roundTrip(t, convert(t, buf.Bytes(), true))
	if p.ResourceProfiles().Len() != 1 {
		t.Fatalf("%d resources, want 1", p.ResourceProfiles().Len())
	}
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	prs := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	// type → leaf address → summed values
	got := map[string]map[uint64]int64{}
	for i := 0; i < prs.Len(); i++ {
		pr := prs.At(i)
		typ := str(pr.SampleType().TypeStrindex()) + "/" + str(pr.SampleType().UnitStrindex())
		got[typ] = map[uint64]int64{}
		for j := 0; j < pr.Samples().Len(); j++ {
			s := pr.Samples().At(j)
			leaf := d.LocationTable().At(int(d.StackTable().At(int(s.StackIndex())).LocationIndices().At(0))).Address()
			for k := 0; k < s.Values().Len(); k++ {
				got[typ][leaf] += s.Values().At(k)
			}
		}
	}
	want := map[string]map[uint64]int64{
		"alloc_objects/count": {0x1000: 3, 0x3000: 4},
		"alloc_space/bytes":   {0x1000: 1500, 0x3000: 4096},
		"inuse_objects/count": {0x1000: 1, 0x3000: 3},
		"inuse_space/bytes":   {0x1000: 500, 0x3000: 3072},
	}
	if len(got) != len(want) {
		t.Errorf("profiles %v, want %v", got, want)
	}
	for typ, w := range want {
		for leaf, v := range w {
			if got[typ][leaf] != v {
				t.Errorf("%s at %#x = %d, want %d", typ, leaf, got[typ][leaf], v)
			}
		}
	}
}
