package protofields

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzEach: any bytes either walk into fields whose raw bytes are the
// message, in order, or end with an error; never a panic. Seeded from
// the OTLP requests of the Collector processor's tests.
func FuzzEach(f *testing.F) {
	seeds, _ := filepath.Glob("../../otelcol/rawstackprocessor/testdata/*.pb")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, "key")
	m = protowire.AppendTag(m, 3, protowire.VarintType)
	m = protowire.AppendVarint(m, 7)
	f.Add(m)
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := Each(b, func(_ protowire.Number, typ protowire.Type, v, raw []byte) error {
			if &raw[0] != &b[n] || typ == protowire.BytesType && len(v) > len(raw) {
				t.Fatalf("field at %d: raw bytes not the message's", n)
			}
			n += len(raw)
			return nil
		})
		if err == nil && n != len(b) {
			t.Fatalf("walked %d of %d bytes without an error", n, len(b))
		}
	})
}
