package pdb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// msfMagic opens every MSF 7.00 ("big MSF") file, the container of PDB 7.
var msfMagic = []byte("Microsoft C/C++ MSF 7.00\r\n\x1aDS\x00\x00\x00")

// maxStreams caps the stream count read from the directory.
const maxStreams = 1 << 20

// msf is the multi-stream file: a set of numbered streams, each a list of
// fixed-size blocks scattered through the file.
type msf struct {
	r         io.ReaderAt
	name      string
	size      int64
	blockSize uint32
	numBlocks uint32
	sizes     []uint32   // stream sizes; nilStream streams have size 0
	blocks    [][]uint32 // per stream, its block numbers
}

const nilStream = 0xFFFFFFFF

func (m *msf) errorf(off int64, format string, args ...any) error {
	return &FormatError{File: m.name, Stream: -1, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func openMSF(r io.ReaderAt, name string, size int64) (*msf, error) {
	m := &msf{r: r, name: name, size: size}
	var sb [56]byte
	if _, err := r.ReadAt(sb[:], 0); err != nil {
		return nil, m.errorf(0, "reading superblock: %v", err)
	}
	if !bytes.Equal(sb[:32], msfMagic) {
		return nil, m.errorf(0, "not an MSF 7.00 file (bad magic)")
	}
	le := binary.LittleEndian
	m.blockSize = le.Uint32(sb[32:])
	m.numBlocks = le.Uint32(sb[40:])
	dirBytes := le.Uint32(sb[44:])
	blockMapAddr := le.Uint32(sb[52:])
	switch m.blockSize {
	case 512, 1024, 2048, 4096, 8192, 16384, 32768:
	default:
		return nil, m.errorf(32, "bad block size %d", m.blockSize)
	}
	if uint64(m.numBlocks)*uint64(m.blockSize) > uint64(size)+uint64(m.blockSize) {
		// Files are always whole blocks, but tolerate a short last block.
		return nil, m.errorf(40, "%d blocks of %d bytes exceed the file size %d", m.numBlocks, m.blockSize, size)
	}
	if uint64(dirBytes) > uint64(size) {
		return nil, m.errorf(44, "directory size %d exceeds the file size %d", dirBytes, size)
	}
	nDirBlocks := (dirBytes + m.blockSize - 1) / m.blockSize
	if uint64(nDirBlocks)*4 > uint64(m.blockSize) {
		return nil, m.errorf(44, "directory of %d bytes needs more than one block map block", dirBytes)
	}
	mapBlock, err := m.readBlock(blockMapAddr)
	if err != nil {
		return nil, err
	}
	dirBlocks := make([]uint32, nDirBlocks)
	for i := range dirBlocks {
		dirBlocks[i] = le.Uint32(mapBlock[i*4:])
	}
	dir, err := m.readBlocks(dirBlocks, dirBytes)
	if err != nil {
		return nil, err
	}
	d := newReader(dir, m.name, -2)
	n := d.u32()
	if n > maxStreams || uint64(n)*4 > uint64(len(dir)) {
		return nil, m.errorf(0, "stream directory: %d streams do not fit in %d bytes", n, len(dir))
	}
	m.sizes = make([]uint32, n)
	for i := range m.sizes {
		m.sizes[i] = d.u32()
	}
	m.blocks = make([][]uint32, n)
	for i, sz := range m.sizes {
		if sz == nilStream {
			m.sizes[i] = 0
			continue
		}
		if uint64(sz) > uint64(size) {
			return nil, m.errorf(0, "stream directory: stream %d size %d exceeds the file size", i, sz)
		}
		nb := (sz + m.blockSize - 1) / m.blockSize
		if uint64(nb)*4 > uint64(d.remaining()) {
			return nil, m.errorf(0, "stream directory: truncated block list of stream %d", i)
		}
		bl := make([]uint32, nb)
		for j := range bl {
			bl[j] = d.u32()
			if bl[j] >= m.numBlocks {
				return nil, m.errorf(0, "stream directory: stream %d block %d is %d, beyond %d blocks", i, j, bl[j], m.numBlocks)
			}
		}
		m.blocks[i] = bl
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}

func (m *msf) readBlock(b uint32) ([]byte, error) {
	if b >= m.numBlocks {
		return nil, m.errorf(52, "block %d beyond %d blocks", b, m.numBlocks)
	}
	p := make([]byte, m.blockSize)
	off := int64(b) * int64(m.blockSize)
	n, err := m.r.ReadAt(p, off)
	if n < len(p) && err != nil && !(err == io.EOF && n > 0) {
		return nil, m.errorf(off, "reading block %d: %v", b, err)
	}
	return p, nil
}

func (m *msf) readBlocks(blocks []uint32, size uint32) ([]byte, error) {
	out := make([]byte, size)
	bs := m.blockSize
	for i, b := range blocks {
		start := uint32(i) * bs
		if start >= size {
			break
		}
		end := min(start+bs, size)
		off := int64(b) * int64(bs)
		n, err := m.r.ReadAt(out[start:end], off)
		if n < int(end-start) {
			return nil, m.errorf(off, "reading block %d: %v", b, err)
		}
	}
	return out, nil
}

// numStreams returns how many streams the directory lists.
func (m *msf) numStreams() int { return len(m.sizes) }

// stream reads stream i whole. Stream sizes were checked against the file
// size when the directory was read.
func (m *msf) stream(i int) ([]byte, error) {
	if i < 0 || i >= len(m.sizes) {
		return nil, &FormatError{File: m.name, Stream: i, Msg: fmt.Sprintf("stream %d does not exist (%d streams)", i, len(m.sizes))}
	}
	return m.readBlocks(m.blocks[i], m.sizes[i])
}

// streamReader reads parts of one stream without reading all of it.
type streamReader struct {
	m      *msf
	index  int
	size   int64
	blocks []uint32
}

func (m *msf) open(i int) (*streamReader, error) {
	if i < 0 || i >= len(m.sizes) {
		return nil, &FormatError{File: m.name, Stream: i, Msg: fmt.Sprintf("stream %d does not exist (%d streams)", i, len(m.sizes))}
	}
	return &streamReader{m: m, index: i, size: int64(m.sizes[i]), blocks: m.blocks[i]}, nil
}

// ReadAt reads len(p) bytes at offset off of the stream.
func (s *streamReader) ReadAt(p []byte, off int64) error {
	if off < 0 || off > s.size || int64(len(p)) > s.size-off {
		return &FormatError{File: s.m.name, Stream: s.index, Offset: off, Msg: fmt.Sprintf("read of %d bytes past the end of the stream (%d bytes)", len(p), s.size)}
	}
	bs := int64(s.m.blockSize)
	for len(p) > 0 {
		b := s.blocks[off/bs]
		in := off % bs
		n := min(int64(len(p)), bs-in)
		fo := int64(b)*bs + in
		if k, err := s.m.r.ReadAt(p[:n], fo); int64(k) < n {
			return &FormatError{File: s.m.name, Stream: s.index, Offset: off, Msg: fmt.Sprintf("reading block %d: %v", b, err)}
		}
		p = p[n:]
		off += n
	}
	return nil
}
