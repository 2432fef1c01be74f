package otlpcheck

import (
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// valid builds a small conforming request: one profile of two samples
// over a stack of two locations (one with a line), a mapping with an
// attribute, a link.
func valid() pprofile.Profiles {
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	st := d.StringTable()
	for _, s := range []string{"", "cpu", "nanoseconds", "main", "main.c", "/bin/x", "thread.id", "profile.frame.type"} {
		st.Append(s)
	}
	d.AttributeTable().AppendEmpty()
	a := d.AttributeTable().AppendEmpty() // 1: thread.id=7
	a.SetKeyStrindex(6)
	a.Value().SetInt(7)
	a = d.AttributeTable().AppendEmpty() // 2: frame type
	a.SetKeyStrindex(7)
	a.Value().SetStr("native")
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(0x1000)
	m.SetMemoryLimit(0x2000)
	m.SetFilenameStrindex(5)
	d.FunctionTable().AppendEmpty()
	f := d.FunctionTable().AppendEmpty()
	f.SetNameStrindex(3)
	f.SetSystemNameStrindex(3)
	f.SetFilenameStrindex(4)
	d.LocationTable().AppendEmpty()
	for i, addr := range []uint64{0x1010, 0x1020} {
		l := d.LocationTable().AppendEmpty()
		l.SetMappingIndex(1)
		l.SetAddress(addr)
		l.AttributeIndices().Append(2)
		if i == 1 {
			ln := l.Lines().AppendEmpty()
			ln.SetFunctionIndex(1)
			ln.SetLine(3)
		}
	}
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().FromRaw([]int32{1, 2})
	d.LinkTable().AppendEmpty()
	lk := d.LinkTable().AppendEmpty()
	lk.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	lk.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", 1)
	pr := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	pr.SampleType().SetTypeStrindex(1)
	pr.SampleType().SetUnitStrindex(2)
	pr.SetTime(1000)
	pr.SetDurationNano(100)
	for _, ts := range []uint64{1000, 1099} {
		s := pr.Samples().AppendEmpty()
		s.SetStackIndex(1)
		s.AttributeIndices().Append(1)
		s.TimestampsUnixNano().Append(ts)
		s.Values().Append(10)
		if ts == 1099 {
			s.SetLinkIndex(1)
		}
	}
	return p
}

func profile0(p pprofile.Profiles) pprofile.Profile {
	return p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
}

func TestCheck(t *testing.T) {
	if err := Check(valid()); err != nil {
		t.Fatalf("a conforming request: %v", err)
	}
	for _, c := range []struct {
		name   string
		break_ func(p pprofile.Profiles)
		want   string
	}{
		{"empty", func(p pprofile.Profiles) {
			p.ResourceProfiles().RemoveIf(func(pprofile.ResourceProfiles) bool { return true })
		}, "no resource profiles"},
		{"no profiles", func(p pprofile.Profiles) {
			p.ResourceProfiles().At(0).ScopeProfiles().AppendEmpty()
		}, "no profiles"},
		{"end of range", func(p pprofile.Profiles) { profile0(p).SetDurationNano(99) }, "outside the profile's"},
		{"before range", func(p pprofile.Profiles) { profile0(p).SetTime(1001); profile0(p).SetDurationNano(1000) }, "outside the profile's"},
		{"lengths", func(p pprofile.Profiles) { profile0(p).Samples().At(0).Values().Append(1) }, "2 values for 1 timestamps"},
		{"values only", func(p pprofile.Profiles) {
			s := profile0(p).Samples().At(0)
			s.TimestampsUnixNano().FromRaw(nil)
			s.Values().Append(2)
		}, "without timestamps"},
		{"shapes", func(p pprofile.Profiles) { profile0(p).Samples().At(1).Values().FromRaw(nil) }, "shape"},
		{"nothing", func(p pprofile.Profiles) {
			s := profile0(p).Samples().At(0)
			s.TimestampsUnixNano().FromRaw(nil)
			s.Values().FromRaw(nil)
		}, "neither values nor timestamps"},
		{"string 0", func(p pprofile.Profiles) { p.Dictionary().StringTable().SetAt(0, "x") }, "index 0 must be"},
		{"attribute 0", func(p pprofile.Profiles) { p.Dictionary().AttributeTable().At(0).Value().SetInt(0) }, "attribute_table: index 0"},
		{"mapping 0", func(p pprofile.Profiles) { p.Dictionary().MappingTable().At(0).SetFileOffset(1) }, "mapping_table: index 0"},
		{"location 0", func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(0).SetAddress(1) }, "location_table: index 0"},
		{"function 0", func(p pprofile.Profiles) { p.Dictionary().FunctionTable().At(0).SetStartLine(1) }, "function_table: index 0"},
		{"stack 0", func(p pprofile.Profiles) { p.Dictionary().StackTable().At(0).LocationIndices().Append(1) }, "stack_table: index 0"},
		{"link 0", func(p pprofile.Profiles) { p.Dictionary().LinkTable().At(0).SetSpanID(pcommon.SpanID{1}) }, "link_table: index 0"},
		{"stack index", func(p pprofile.Profiles) { profile0(p).Samples().At(0).SetStackIndex(2) }, "stack_index: index 2 out of range"},
		{"negative", func(p pprofile.Profiles) { profile0(p).Samples().At(0).SetLinkIndex(-1) }, "index -1 out of range"},
		{"location index", func(p pprofile.Profiles) { p.Dictionary().StackTable().At(1).LocationIndices().Append(9) }, "location: index 9"},
		{"function index", func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(2).Lines().At(0).SetFunctionIndex(5) }, "function: index 5"},
		{"mapping index", func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(2).SetMappingIndex(7) }, "mapping: index 7"},
		{"string index", func(p pprofile.Profiles) { p.Dictionary().FunctionTable().At(1).SetFilenameStrindex(99) }, "filename: index 99"},
		{"attribute index", func(p pprofile.Profiles) { profile0(p).AttributeIndices().Append(3) }, "attribute: index 3"},
		{"duplicate string", func(p pprofile.Profiles) { p.Dictionary().StringTable().Append("main") }, "string_table: entries 3 and 8"},
		{"duplicate location", func(p pprofile.Profiles) {
			p.Dictionary().LocationTable().At(1).SetAddress(0x1020)
			p.Dictionary().LocationTable().At(1).Lines().AppendEmpty().SetFunctionIndex(1)
			p.Dictionary().LocationTable().At(1).Lines().At(0).SetLine(3)
		}, "location_table: entries 1 and 2"},
		{"duplicate function", func(p pprofile.Profiles) {
			p.Dictionary().FunctionTable().At(1).CopyTo(p.Dictionary().FunctionTable().AppendEmpty())
		}, "function_table: entries 1 and 2"},
		{"duplicate stack", func(p pprofile.Profiles) {
			p.Dictionary().StackTable().AppendEmpty().LocationIndices().FromRaw([]int32{1, 2})
		}, "stack_table: entries 1 and 2"},
		{"orphan string", func(p pprofile.Profiles) { p.Dictionary().StringTable().Append("unused") }, "string_table: entry 8 is referenced by nothing"},
		{"orphan mapping", func(p pprofile.Profiles) { p.Dictionary().MappingTable().AppendEmpty().SetMemoryLimit(5) }, "mapping_table: entry 2 is referenced by nothing"},
		{"orphan link", func(p pprofile.Profiles) { profile0(p).Samples().At(1).SetLinkIndex(0) }, "link_table: entry 1 is referenced by nothing"},
		{"duplicate key", func(p pprofile.Profiles) {
			a := p.Dictionary().AttributeTable().AppendEmpty()
			a.SetKeyStrindex(6)
			a.Value().SetInt(8)
			profile0(p).Samples().At(0).AttributeIndices().Append(3)
		}, "duplicate attribute key \"thread.id\""},
		{"mapping range", func(p pprofile.Profiles) { p.Dictionary().MappingTable().At(1).SetMemoryLimit(0x1000) }, "want start < limit"},
		{"negative line", func(p pprofile.Profiles) { p.Dictionary().LocationTable().At(2).Lines().At(0).SetLine(-3) }, "must not be negative"},
		{"empty trace id", func(p pprofile.Profiles) { p.Dictionary().LinkTable().At(1).SetTraceID(pcommon.TraceID{}) }, "want 16 and 8 bytes"},
	} {
		p := valid()
		c.break_(p)
		err := Check(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestCheckBytes: a request as otlp.Marshal writes it passes; as pdata's
// encoder writes it (resource attributes as references into the string
// table, whose strings profcheck counts as orphans) it does not; a
// truncated request does not decode.
func TestCheckBytes(t *testing.T) {
	p := valid()
	p.ResourceProfiles().At(0).Resource().Attributes().PutStr("service.name", "checked")
	b, err := otlp.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBytes(b); err != nil {
		t.Fatal(err)
	}
	if err := CheckBytes(b[:len(b)-3]); err == nil {
		t.Error("a truncated request passes")
	}
	var m pprofile.ProtoMarshaler
	if b, err = m.MarshalProfiles(p); err != nil {
		t.Fatal(err)
	}
	if err := CheckBytes(b); err == nil || !strings.Contains(err.Error(), "refers to the string table") || !strings.Contains(err.Error(), "referenced by nothing") {
		t.Errorf("pdata's encoding: got %v, want the attribute's reference and its orphaned strings", err)
	}
	// Decoded, it is valid OTLP: its attributes hold their strings.
	var u pprofile.ProtoUnmarshaler
	if q, err := u.UnmarshalProfiles(b); err != nil {
		t.Fatal(err)
	} else if err := Check(q); err != nil {
		t.Errorf("pdata's encoding, decoded: %v", err)
	}
}
