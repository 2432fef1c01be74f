// Package protofields walks the fields of an encoded protobuf message
// without its schema: the OTLP encoder's attribute rewrite (package
// symbolizer/export/otlp) and the conformance check's (internal/otlpcheck)
// read requests with it.
package protofields

import "google.golang.org/protobuf/encoding/protowire"

// Each calls f with each field of message b: its number, type, payload
// (of a length-delimited field; nil for another) and raw bytes (tag
// included). A malformed field ends the walk with its parse error.
func Each(b []byte, f func(num protowire.Number, typ protowire.Type, v, raw []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		var v []byte
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(b[n:])
		}
		if err := f(num, typ, v, b[:n+m]); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
