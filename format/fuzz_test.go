package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the Reader: it must never panic,
// must end (EOF or a final error) and must never hold a buffer larger than
// the largest chunk the format allows.
func FuzzReader(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.rawstack"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	var small bytes.Buffer
	w, _ := NewWriter(&small, testHeader, &WriterOptions{ChunkSize: 16})
	for i := range sampleEvents() {
		w.WriteEvent(&sampleEvents()[i])
	}
	w.Close()
	f.Add(small.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("header error of type %T: %v", err, err)
			}
			return
		}
		for i := 0; ; i++ {
			if i > len(data)+10 {
				t.Fatalf("more results (%d) than input bytes (%d)", i, len(data))
			}
			ev, err := r.Next()
			if cap(r.buf) > MaxChunkSize+ChunkHeaderSize+64<<10 {
				t.Fatalf("reader buffer grew to %d bytes", cap(r.buf))
			}
			if err == io.EOF {
				return
			}
			var ce *ChunkError
			if errors.As(err, &ce) {
				if ce.Offset < HeaderSize || ce.Offset > int64(len(data)) {
					t.Fatalf("chunk error offset %d outside the data (%d bytes)", ce.Offset, len(data))
				}
				continue
			}
			if err != nil {
				t.Fatalf("unexpected error %T: %v", err, err)
			}
			_ = DumpEvent(ev)
		}
	})
}

// FuzzChunkPayload fuzzes event decoding: the input becomes the payload of
// one chunk with a correct CRC, so the fuzzer reaches the event decoders
// instead of stopping at the checksum.
func FuzzChunkPayload(f *testing.F) {
	evs := sampleEvents()
	for i := range evs {
		var b bytes.Buffer
		w, _ := NewWriter(&b, testHeader, nil)
		w.WriteEvent(&evs[i])
		w.Close()
		f.Add(b.Bytes()[HeaderSize+ChunkHeaderSize:])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) > MaxChunkSize {
			return
		}
		stream := AppendHeader(nil, testHeader)
		stream = append(stream, ChunkMagic...)
		stream = binary.LittleEndian.AppendUint32(stream, uint32(len(payload)))
		stream = binary.LittleEndian.AppendUint32(stream, crc32c(payload))
		stream = append(stream, payload...)
		r, err := NewReader(bytes.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		w, _ := NewWriter(&out, testHeader, nil)
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			var ce *ChunkError
			if errors.As(err, &ce) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = DumpEvent(ev)
			// Whatever decodes must encode again.
			if err := w.WriteEvent(ev); err != nil && ev.Kind != KindUnknown {
				t.Fatalf("re-encoding %v: %v", ev.Kind, err)
			}
		}
	})
}
