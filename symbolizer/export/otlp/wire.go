package otlp

import (
	"fmt"
	"math"

	"github.com/rawstack/rawstack/internal/protofields"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages Marshal rewrites (opentelemetry-proto:
// collector/profiles/v1development, profiles/v1development, resource/v1,
// common/v1).
const (
	fieldRequestResourceProfiles  = 1 // ExportProfilesServiceRequest.resource_profiles
	fieldResourceProfilesResource = 1 // ResourceProfiles.resource
	fieldResourceProfilesScopes   = 2 // ResourceProfiles.scope_profiles
	fieldResourceAttributes       = 1 // Resource.attributes
	fieldScopeProfilesScope       = 1 // ScopeProfiles.scope
	fieldScopeAttributes          = 3 // InstrumentationScope.attributes
	fieldKeyValueKey              = 1 // KeyValue.key
	fieldKeyValueValue            = 2 // KeyValue.value
	fieldValueString              = 1 // AnyValue.string_value
	fieldValueBool                = 2
	fieldValueInt                 = 3
	fieldValueDouble              = 4
	fieldValueArray               = 5
	fieldValueKvlist              = 6
	fieldValueBytes               = 7
	fieldListValues               = 1 // ArrayValue.values, KeyValueList.values
)

// Marshal encodes p as a protobuf ExportProfilesServiceRequest (which has
// the wire format of ProfilesData) and leaves p as it was.
//
// Resource and scope attributes are written inline (KeyValue.key,
// AnyValue.string_value), not as references into the dictionary's string
// table (key_strindex, string_value_strindex: opentelemetry-proto 1.10),
// which pdata's encoder writes, adding their strings to the table. Both
// are valid on the wire; the inline form is read by receivers built on
// older protos too, and it leaves the string table holding only what
// the dictionary and profiles refer to: the profiling SIG's profcheck
// counts the strings only attributes use as unreferenced (orphans).
func Marshal(p pprofile.Profiles) ([]byte, error) {
	if p.IsReadOnly() {
		c := pprofile.NewProfiles()
		p.CopyTo(c)
		p = c
	}
	// The attributes leave p while pdata encodes it, and are written
	// into each resource and scope of its encoding.
	var res, scopes []pcommon.Map
	for _, rp := range p.ResourceProfiles().All() {
		m := pcommon.NewMap()
		rp.Resource().Attributes().MoveTo(m)
		res = append(res, m)
		for _, sp := range rp.ScopeProfiles().All() {
			m := pcommon.NewMap()
			sp.Scope().Attributes().MoveTo(m)
			scopes = append(scopes, m)
		}
	}
	var pm pprofile.ProtoMarshaler
	b, err := pm.MarshalProfiles(p)
	if err == nil {
		b, err = inlineAttrs(b, res, scopes)
	}
	i, j := 0, 0
	for _, rp := range p.ResourceProfiles().All() {
		res[i].MoveTo(rp.Resource().Attributes())
		i++
		for _, sp := range rp.ScopeProfiles().All() {
			scopes[j].MoveTo(sp.Scope().Attributes())
			j++
		}
	}
	return b, err
}

// inlineAttrs writes res and scopes, in order, as the attributes of the
// resources and scopes of an encoded request (whose own have none).
func inlineAttrs(req []byte, res, scopes []pcommon.Map) ([]byte, error) {
	out := make([]byte, 0, len(req)+64*len(res))
	ri, si := 0, 0
	err := protofields.Each(req, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		if num != fieldRequestResourceProfiles || typ != protowire.BytesType || ri >= len(res) {
			out = append(out, raw...)
			return nil
		}
		// A message's fields may come in any order and repeat: the
		// resource written first merges with the one pdata wrote.
		rp := appendMessage(nil, fieldResourceProfilesResource, appendKeyValues(nil, fieldResourceAttributes, res[ri]))
		ri++
		err := protofields.Each(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
			if num != fieldResourceProfilesScopes || typ != protowire.BytesType || si >= len(scopes) {
				rp = append(rp, raw...)
				return nil
			}
			sp := appendMessage(nil, fieldScopeProfilesScope, appendKeyValues(nil, fieldScopeAttributes, scopes[si]))
			si++
			rp = appendMessage(rp, fieldResourceProfilesScopes, append(sp, v...))
			return nil
		})
		out = appendMessage(out, fieldRequestResourceProfiles, rp)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("otlp: writing the request's attributes: %w", err)
	}
	return out, nil
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// appendKeyValues appends m's entries as KeyValue fields num.
func appendKeyValues(b []byte, num protowire.Number, m pcommon.Map) []byte {
	for k, v := range m.All() {
		kv := protowire.AppendTag(nil, fieldKeyValueKey, protowire.BytesType)
		kv = protowire.AppendString(kv, k)
		kv = appendMessage(kv, fieldKeyValueValue, appendValue(nil, v))
		b = appendMessage(b, num, kv)
	}
	return b
}

// appendValue appends the fields of an AnyValue.
func appendValue(b []byte, v pcommon.Value) []byte {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		b = protowire.AppendTag(b, fieldValueString, protowire.BytesType)
		b = protowire.AppendString(b, v.Str())
	case pcommon.ValueTypeBool:
		b = protowire.AppendTag(b, fieldValueBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.Bool()))
	case pcommon.ValueTypeInt:
		b = protowire.AppendTag(b, fieldValueInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.Int()))
	case pcommon.ValueTypeDouble:
		b = protowire.AppendTag(b, fieldValueDouble, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.Double()))
	case pcommon.ValueTypeBytes:
		b = protowire.AppendTag(b, fieldValueBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.Bytes().AsRaw())
	case pcommon.ValueTypeSlice:
		var list []byte
		for _, e := range v.Slice().All() {
			list = appendMessage(list, fieldListValues, appendValue(nil, e))
		}
		b = appendMessage(b, fieldValueArray, list)
	case pcommon.ValueTypeMap:
		b = appendMessage(b, fieldValueKvlist, appendKeyValues(nil, fieldListValues, v.Map()))
	}
	return b
}
