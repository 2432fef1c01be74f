package pprof

import (
	"compress/flate"
	"encoding/binary"
	"io"

	"github.com/rawstack/rawstack/internal/crc"
)

// gzipWrite writes b to w as one gzip member (RFC 1952): the bytes
// compress/gzip's Writer writes at the default level (no name, no time,
// OS unknown). compress/gzip links hash/crc32, whose package init every
// rawstack command paid at start (TestGzipWrite compares the two).
func gzipWrite(w io.Writer, b []byte) error {
	header := [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}
	if _, err := w.Write(header[:]); err != nil {
		return err
	}
	zw, err := flate.NewWriter(w, flate.DefaultCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc.IEEE(0, b))
	binary.LittleEndian.PutUint32(trailer[4:], uint32(len(b)))
	_, err = w.Write(trailer[:])
	return err
}
