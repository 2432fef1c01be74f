package pprof

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// TestGzipWrite checks gzipWrite's bytes against compress/gzip's and that
// compress/gzip reads them back.
func TestGzipWrite(t *testing.T) {
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i*131 + i>>9)
	}
	for _, in := range [][]byte{nil, []byte("x"), []byte("profile.proto profile.proto profile.proto"), big} {
		var got, want bytes.Buffer
		if err := gzipWrite(&got, in); err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(&want)
		zw.Write(in)
		zw.Close()
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%d bytes: gzipWrite wrote %d bytes that differ from compress/gzip's %d", len(in), got.Len(), want.Len())
		}
		zr, err := gzip.NewReader(&got)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(in), err)
		}
		back, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(back, in) {
			t.Errorf("%d bytes: read back %d bytes, %v", len(in), len(back), err)
		}
	}
}
