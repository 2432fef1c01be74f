// Package otlpcheck checks OTLP profiles against the rules of the OTLP
// profiles data model (opentelemetry-proto's profiles/v1development) and
// the OpenTelemetry profiling SIG's conformance checks (profcheck, in
// open-telemetry/sig-profiling), so that what rawstack writes and what
// its Collector processor passes on is what backends that validate
// accept. Every OTLP test runs [Check] on what it produces; the Collector
// processor refuses a request that fails it.
//
// The rules:
//
//   - every resource has scope profiles and every scope profiles
//     profiles; a request holds at least one resource;
//   - a sample's timestamps lie in its profile's half-open range
//     [time_unix_nano, time_unix_nano + duration_nano);
//   - a sample has as many values as timestamps, or one value and no
//     timestamps, or timestamps and no values; all samples of a profile
//     have the same of these shapes;
//   - index 0 of every dictionary table is its zero value, and index 0
//     of the string table is "";
//   - every index is in range (string, attribute, mapping, location,
//     function, stack and link indices, wherever they appear);
//   - no table holds the same entry twice, and every entry but index 0
//     is referenced (no orphans) by the dictionary or the profiles (in
//     memory, Check: or by resource and scope attributes);
//   - on the wire (CheckBytes), resource and scope attributes hold
//     their strings inline: references into the string table
//     (key_strindex, string_value_strindex, opentelemetry-proto 1.10)
//     are not counted by profcheck, whose orphan check then fails;
//   - the attribute keys of one entity (resource, scope, profile, sample,
//     mapping, location) are unique;
//   - a mapping's memory_start < memory_limit, or both are 0;
//   - lines, columns and start lines are not negative;
//   - a link's trace id is 16 bytes and its span id 8 (the data model
//     decodes other lengths as errors, and an empty id as all zero bytes,
//     which no span has).
//
// The rules are rawstack's own reading of the specification and of
// profcheck; the code is written here, not copied.
package otlpcheck

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/internal/protofields"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/protobuf/encoding/protowire"
)

// maxErrors caps the violations one Check reports: a broken request can
// break a rule in every entry.
const maxErrors = 32

// Check returns the violations of p, joined, or nil when p conforms.
//
// In memory, resource and scope attributes hold their strings whether
// they came inline or as references into the string table (pdata
// resolves references as it decodes, keeping the strings in the table,
// and writes them as references as it encodes: what a Collector
// forwards carries them so), so the strings they use count as
// referenced here. CheckBytes, for what rawstack itself encodes, does
// not count them and asks that the attributes be inline, as profcheck
// does.
func Check(p pprofile.Profiles) error {
	return check(p, true)
}

func check(p pprofile.Profiles, attrRefs bool) error {
	c := checker{d: p.Dictionary(), attrRefs: attrRefs}
	c.run(p)
	if c.n > len(c.errs) {
		c.errs = append(c.errs, fmt.Errorf("and %d more", c.n-len(c.errs)))
	}
	return errors.Join(c.errs...)
}

// CheckBytes decodes an ExportProfilesServiceRequest and checks it, and
// that its resource and scope attributes are inline.
func CheckBytes(b []byte) error {
	var u pprofile.ProtoUnmarshaler
	p, err := u.UnmarshalProfiles(b)
	if err != nil {
		return fmt.Errorf("otlpcheck: the request does not decode: %w", err)
	}
	return errors.Join(check(p, false), inlineAttrs(b))
}

// Field numbers (opentelemetry-proto: collector/profiles/v1development,
// profiles/v1development, resource/v1, common/v1).
const (
	fRequestResourceProfiles = 1 // ExportProfilesServiceRequest.resource_profiles
	fResourceProfilesRes     = 1 // ResourceProfiles.resource
	fResourceProfilesScopes  = 2 // ResourceProfiles.scope_profiles
	fResourceAttributes      = 1 // Resource.attributes
	fScopeProfilesScope      = 1 // ScopeProfiles.scope
	fScopeAttributes         = 3 // InstrumentationScope.attributes
	fKeyValueValue           = 2 // KeyValue.value
	fKeyValueKeyStrindex     = 3 // KeyValue.key_strindex
	fValueArray              = 5 // AnyValue.array_value
	fValueKvlist             = 6 // AnyValue.kvlist_value
	fValueStrindex           = 8 // AnyValue.string_value_strindex
)

var errAttrRef = errors.New("a resource or scope attribute refers to the string table (key_strindex or string_value_strindex) instead of holding its string")

// inlineAttrs reports a resource or scope attribute of request b that
// refers to the string table.
func inlineAttrs(b []byte) error {
	// path: the fields leading to attributes, then KeyValue's rules.
	var walk func(b []byte, path ...protowire.Number) error
	var kv, value func(b []byte) error
	kv = func(b []byte) error {
		return each(b, func(num protowire.Number, v []byte) error {
			switch num {
			case fKeyValueKeyStrindex:
				return errAttrRef
			case fKeyValueValue:
				return value(v)
			}
			return nil
		})
	}
	value = func(b []byte) error {
		return each(b, func(num protowire.Number, v []byte) error {
			switch num {
			case fValueStrindex:
				return errAttrRef
			case fValueArray:
				return each(v, func(_ protowire.Number, v []byte) error { return value(v) })
			case fValueKvlist:
				return each(v, func(_ protowire.Number, v []byte) error { return kv(v) })
			}
			return nil
		})
	}
	walk = func(b []byte, path ...protowire.Number) error {
		return each(b, func(num protowire.Number, v []byte) error {
			switch {
			case num != path[0]:
				return nil
			case len(path) == 1:
				return kv(v)
			}
			return walk(v, path[1:]...)
		})
	}
	return errors.Join(
		walk(b, fRequestResourceProfiles, fResourceProfilesRes, fResourceAttributes),
		walk(b, fRequestResourceProfiles, fResourceProfilesScopes, fScopeProfilesScope, fScopeAttributes))
}

// each calls f with the number and payload of each field of message b
// (nil for a field that is not length-delimited).
func each(b []byte, f func(num protowire.Number, v []byte) error) error {
	return protofields.Each(b, func(num protowire.Number, _ protowire.Type, v, _ []byte) error { return f(num, v) })
}

type checker struct {
	d pprofile.ProfilesDictionary
	// attrRefs: the strings resource and scope attributes use count as
	// referenced (Check, not CheckBytes).
	attrRefs bool
	strIndex map[string]int // string → first index, made on first use
	errs     []error
	n        int
	// references, per table, by index
	strRef, attrRef, mapRef, locRef, fnRef, stackRef, linkRef []bool
}

func (c *checker) fail(format string, args ...any) {
	c.n++
	if len(c.errs) < maxErrors {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// index checks that i indexes a table of n entries and marks it
// referenced in ref.
func (c *checker) index(what string, i int32, ref []bool) bool {
	if i < 0 || int(i) >= len(ref) {
		c.fail("%s: index %d out of range [0, %d)", what, i, len(ref))
		return false
	}
	ref[i] = true
	return true
}

func (c *checker) run(p pprofile.Profiles) {
	d := c.d
	c.strRef = make([]bool, d.StringTable().Len())
	c.attrRef = make([]bool, d.AttributeTable().Len())
	c.mapRef = make([]bool, d.MappingTable().Len())
	c.locRef = make([]bool, d.LocationTable().Len())
	c.fnRef = make([]bool, d.FunctionTable().Len())
	c.stackRef = make([]bool, d.StackTable().Len())
	c.linkRef = make([]bool, d.LinkTable().Len())
	c.zeroValues()
	if p.ResourceProfiles().Len() == 0 {
		c.fail("no resource profiles")
	}
	for i, rp := range p.ResourceProfiles().All() {
		where := "resource_profiles[" + strconv.Itoa(i) + "]"
		c.entityAttrs(where+".resource.attributes", rp.Resource().Attributes())
		if rp.ScopeProfiles().Len() == 0 {
			c.fail("%s: no scope profiles", where)
		}
		for j, sp := range rp.ScopeProfiles().All() {
			where := where + ".scope_profiles[" + strconv.Itoa(j) + "]"
			c.entityAttrs(where+".scope.attributes", sp.Scope().Attributes())
			if sp.Profiles().Len() == 0 {
				c.fail("%s: no profiles", where)
			}
			for k, pr := range sp.Profiles().All() {
				c.profile(where+".profiles["+strconv.Itoa(k)+"]", pr)
			}
		}
	}
	c.tables()
	c.duplicates()
	c.orphans()
}

// zeroValues: index 0 of every table is its zero value.
func (c *checker) zeroValues() {
	d := c.d
	if d.StringTable().Len() == 0 || d.StringTable().At(0) != "" {
		c.fail("string_table: index 0 must be \"\"")
	}
	for _, t := range []struct {
		name string
		n    int
		zero func() bool
	}{
		{"attribute_table", d.AttributeTable().Len(), func() bool {
			a := d.AttributeTable().At(0)
			return a.KeyStrindex() == 0 && a.UnitStrindex() == 0 && a.Value().Type() == pcommon.ValueTypeEmpty
		}},
		{"mapping_table", d.MappingTable().Len(), func() bool {
			m := d.MappingTable().At(0)
			return m.MemoryStart() == 0 && m.MemoryLimit() == 0 && m.FileOffset() == 0 && m.FilenameStrindex() == 0 && m.AttributeIndices().Len() == 0
		}},
		{"location_table", d.LocationTable().Len(), func() bool {
			l := d.LocationTable().At(0)
			return l.MappingIndex() == 0 && l.Address() == 0 && l.Lines().Len() == 0 && l.AttributeIndices().Len() == 0
		}},
		{"function_table", d.FunctionTable().Len(), func() bool {
			f := d.FunctionTable().At(0)
			return f.NameStrindex() == 0 && f.SystemNameStrindex() == 0 && f.FilenameStrindex() == 0 && f.StartLine() == 0
		}},
		{"stack_table", d.StackTable().Len(), func() bool { return d.StackTable().At(0).LocationIndices().Len() == 0 }},
		{"link_table", d.LinkTable().Len(), func() bool {
			l := d.LinkTable().At(0)
			return l.TraceID().IsEmpty() && l.SpanID().IsEmpty()
		}},
	} {
		if t.n == 0 {
			c.fail("%s: empty, must hold the zero value at index 0", t.name)
		} else if !t.zero() {
			c.fail("%s: index 0 is not the zero value", t.name)
		}
	}
}

// entityAttrs: a resource's or a scope's attributes have unique keys;
// with attrRefs, the strings they use are referenced.
func (c *checker) entityAttrs(where string, m pcommon.Map) {
	seen := make(map[string]bool, m.Len())
	for k, v := range m.All() {
		if seen[k] {
			c.fail("%s: duplicate key %q", where, k)
		}
		seen[k] = true
		if c.attrRefs {
			c.refString(k)
			c.refValue(v)
		}
	}
}

// refString marks s referenced if the string table holds it.
func (c *checker) refString(s string) {
	if c.strIndex == nil {
		c.strIndex = make(map[string]int, c.d.StringTable().Len())
		for i, t := range c.d.StringTable().All() {
			if _, ok := c.strIndex[t]; !ok {
				c.strIndex[t] = i
			}
		}
	}
	if i, ok := c.strIndex[s]; ok {
		c.strRef[i] = true
	}
}

func (c *checker) refValue(v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		c.refString(v.Str())
	case pcommon.ValueTypeSlice:
		for _, e := range v.Slice().All() {
			c.refValue(e)
		}
	case pcommon.ValueTypeMap:
		for k, e := range v.Map().All() {
			c.refString(k)
			c.refValue(e)
		}
	}
}

// attrs checks a list of attribute indices: in range, unique keys.
func (c *checker) attrs(where string, idx pcommon.Int32Slice) {
	if idx.Len() == 0 {
		return
	}
	keys := make(map[int32]bool, idx.Len())
	names := make(map[string]bool, idx.Len())
	for _, ai := range idx.All() {
		if !c.index(where+" attribute", ai, c.attrRef) {
			continue
		}
		k := c.d.AttributeTable().At(int(ai)).KeyStrindex()
		if k < 0 || int(k) >= len(c.strRef) {
			continue // reported with the table
		}
		name := c.d.StringTable().At(int(k))
		if keys[k] || names[name] {
			c.fail("%s: duplicate attribute key %q", where, name)
		}
		keys[k], names[name] = true, true
	}
}

type shape int

const (
	shapeNone shape = iota
	shapeValues
	shapeTimestamps
	shapeBoth
)

func (s shape) String() string {
	return [...]string{"none", "one value", "timestamps only", "values and timestamps"}[s]
}

func (c *checker) profile(where string, pr pprofile.Profile) {
	c.attrs(where, pr.AttributeIndices())
	for _, vt := range []struct {
		name string
		v    pprofile.ValueType
	}{{"sample_type", pr.SampleType()}, {"period_type", pr.PeriodType()}} {
		c.index(where+"."+vt.name+".type", vt.v.TypeStrindex(), c.strRef)
		c.index(where+"."+vt.name+".unit", vt.v.UnitStrindex(), c.strRef)
	}
	start := uint64(pr.Time())
	end := start + pr.DurationNano()
	if end < start {
		c.fail("%s: time %d + duration %d overflows", where, start, pr.DurationNano())
	}
	var want shape
	for i, s := range pr.Samples().All() {
		sw := where + ".samples[" + strconv.Itoa(i) + "]"
		c.index(sw+".stack_index", s.StackIndex(), c.stackRef)
		c.index(sw+".link_index", s.LinkIndex(), c.linkRef)
		c.attrs(sw, s.AttributeIndices())
		for j, ts := range s.TimestampsUnixNano().All() {
			if ts < start || ts >= end {
				c.fail("%s: timestamp[%d] %d outside the profile's [%d, %d)", sw, j, ts, start, end)
				break
			}
		}
		nv, nt := s.Values().Len(), s.TimestampsUnixNano().Len()
		var sh shape
		switch {
		case nv > 0 && nt > 0:
			sh = shapeBoth
			if nv != nt {
				c.fail("%s: %d values for %d timestamps", sw, nv, nt)
			}
		case nv > 0:
			sh = shapeValues
			if nv != 1 {
				c.fail("%s: %d values without timestamps, want one", sw, nv)
			}
		case nt > 0:
			sh = shapeTimestamps
		default:
			c.fail("%s: neither values nor timestamps", sw)
		}
		if want == shapeNone {
			want = sh
		} else if sh != shapeNone && sh != want {
			c.fail("%s: shape %s, the profile's first sample has %s", sw, sh, want)
		}
	}
}

// tables checks the references the dictionary's own entries make.
func (c *checker) tables() {
	d := c.d
	for i, a := range d.AttributeTable().All() {
		w := "attribute_table[" + strconv.Itoa(i) + "]"
		c.index(w+".key", a.KeyStrindex(), c.strRef)
		c.index(w+".unit", a.UnitStrindex(), c.strRef)
	}
	for i, m := range d.MappingTable().All() {
		w := "mapping_table[" + strconv.Itoa(i) + "]"
		c.index(w+".filename", m.FilenameStrindex(), c.strRef)
		c.attrs(w, m.AttributeIndices())
		if !(m.MemoryStart() == 0 && m.MemoryLimit() == 0) && m.MemoryStart() >= m.MemoryLimit() {
			c.fail("%s: memory_start %#x, memory_limit %#x: want start < limit, or both 0", w, m.MemoryStart(), m.MemoryLimit())
		}
	}
	for i, l := range d.LocationTable().All() {
		w := "location_table[" + strconv.Itoa(i) + "]"
		c.index(w+".mapping", l.MappingIndex(), c.mapRef)
		c.attrs(w, l.AttributeIndices())
		for j, ln := range l.Lines().All() {
			lw := w + ".lines[" + strconv.Itoa(j) + "]"
			c.index(lw+".function", ln.FunctionIndex(), c.fnRef)
			if ln.Line() < 0 || ln.Column() < 0 {
				c.fail("%s: line %d column %d, must not be negative", lw, ln.Line(), ln.Column())
			}
		}
	}
	for i, f := range d.FunctionTable().All() {
		w := "function_table[" + strconv.Itoa(i) + "]"
		c.index(w+".name", f.NameStrindex(), c.strRef)
		c.index(w+".system_name", f.SystemNameStrindex(), c.strRef)
		c.index(w+".filename", f.FilenameStrindex(), c.strRef)
		if f.StartLine() < 0 {
			c.fail("%s: start_line %d, must not be negative", w, f.StartLine())
		}
	}
	for i, s := range d.StackTable().All() {
		w := "stack_table[" + strconv.Itoa(i) + "]"
		for _, li := range s.LocationIndices().All() {
			c.index(w+".location", li, c.locRef)
		}
	}
	for i, l := range d.LinkTable().All() {
		if i > 0 && (l.TraceID().IsEmpty() || l.SpanID().IsEmpty()) {
			c.fail("link_table[%d]: trace id %s, span id %s: want 16 and 8 bytes, not empty", i, l.TraceID(), l.SpanID())
		}
	}
}

// duplicates: no table holds one entry twice.
func (c *checker) duplicates() {
	d := c.d
	var b strings.Builder
	dup := func(table string, seen map[string]int, i int, key string) {
		if j, ok := seen[key]; ok {
			c.fail("%s: entries %d and %d are the same", table, j, i)
			return
		}
		seen[key] = i
	}
	ints := func(s pcommon.Int32Slice, sorted bool) {
		v := s.AsRaw()
		if sorted {
			v = slices.Clone(v)
			slices.Sort(v)
		}
		for _, x := range v {
			b.WriteString(strconv.Itoa(int(x)))
			b.WriteByte(',')
		}
		b.WriteByte(';')
	}
	num := func(v ...uint64) {
		for _, x := range v {
			b.WriteString(strconv.FormatUint(x, 16))
			b.WriteByte(',')
		}
	}
	seen := map[string]int{}
	for i, s := range d.StringTable().All() {
		dup("string_table", seen, i, s)
	}
	seen = map[string]int{}
	for i, a := range d.AttributeTable().All() {
		b.Reset()
		num(uint64(a.KeyStrindex()), uint64(a.UnitStrindex()), uint64(a.Value().Type()))
		b.WriteString(a.Value().AsString())
		dup("attribute_table", seen, i, b.String())
	}
	seen = map[string]int{}
	for i, m := range d.MappingTable().All() {
		b.Reset()
		num(m.MemoryStart(), m.MemoryLimit(), m.FileOffset(), uint64(m.FilenameStrindex()))
		ints(m.AttributeIndices(), true)
		dup("mapping_table", seen, i, b.String())
	}
	seen = map[string]int{}
	for i, l := range d.LocationTable().All() {
		b.Reset()
		num(uint64(l.MappingIndex()), l.Address())
		for _, ln := range l.Lines().All() {
			num(uint64(ln.FunctionIndex()), uint64(ln.Line()), uint64(ln.Column()))
		}
		b.WriteByte(';')
		ints(l.AttributeIndices(), true)
		dup("location_table", seen, i, b.String())
	}
	seen = map[string]int{}
	for i, f := range d.FunctionTable().All() {
		b.Reset()
		num(uint64(f.NameStrindex()), uint64(f.SystemNameStrindex()), uint64(f.FilenameStrindex()), uint64(f.StartLine()))
		dup("function_table", seen, i, b.String())
	}
	seen = map[string]int{}
	for i, s := range d.StackTable().All() {
		b.Reset()
		ints(s.LocationIndices(), false)
		dup("stack_table", seen, i, b.String())
	}
	seen = map[string]int{}
	for i, l := range d.LinkTable().All() {
		tid, sid := l.TraceID(), l.SpanID()
		dup("link_table", seen, i, string(tid[:])+string(sid[:]))
	}
}

// orphans: every entry but index 0 is referenced. References from
// entries that are themselves orphans count: an unreferenced location
// reports itself, not its function too.
func (c *checker) orphans() {
	for _, t := range []struct {
		name string
		ref  []bool
	}{
		{"string_table", c.strRef}, {"attribute_table", c.attrRef}, {"mapping_table", c.mapRef},
		{"location_table", c.locRef}, {"function_table", c.fnRef}, {"stack_table", c.stackRef}, {"link_table", c.linkRef},
	} {
		for i := 1; i < len(t.ref); i++ {
			if !t.ref[i] {
				c.fail("%s: entry %d is referenced by nothing", t.name, i)
			}
		}
	}
}
