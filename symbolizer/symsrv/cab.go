package symsrv

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
)

// Caps on cabinet contents.
const (
	maxCabFile   = 4 << 30 // uncompressed size of the one file we extract
	maxCabBlocks = 1 << 20
)

// CabError reports a malformed cabinet at a byte offset.
type CabError struct {
	Offset int64
	Msg    string
}

func (e *CabError) Error() string {
	return fmt.Sprintf("symsrv: cabinet offset %#x: %s", e.Offset, e.Msg)
}

// extractCab writes the first file of a single-folder cabinet ("file.pd_"
// on symbol servers) to w. Only MSZIP and uncompressed folders are
// supported; LZX and Quantum are reported as errors.
func extractCab(r io.ReaderAt, size int64, w io.Writer) error {
	var hdr [36]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return &CabError{0, "short header"}
	}
	le := binary.LittleEndian
	if string(hdr[:4]) != "MSCF" {
		return &CabError{0, "not a cabinet (no MSCF signature)"}
	}
	coffFiles := le.Uint32(hdr[16:])
	nFolders := le.Uint16(hdr[26:])
	nFiles := le.Uint16(hdr[28:])
	flags := le.Uint16(hdr[30:])
	if nFolders == 0 || nFiles == 0 {
		return &CabError{26, "no folders or files"}
	}
	off := int64(36)
	var cbCFFolder, cbCFData int64
	if flags&4 != 0 { // cfhdrRESERVE_PRESENT
		var res [4]byte
		if _, err := r.ReadAt(res[:], off); err != nil {
			return &CabError{off, "short reserve header"}
		}
		off += 4 + int64(le.Uint16(res[:]))
		cbCFFolder = int64(res[2])
		cbCFData = int64(res[3])
	}
	if flags&1 != 0 || flags&2 != 0 {
		return &CabError{30, "multi-cabinet sets are not supported"}
	}
	var fold [8]byte
	if _, err := r.ReadAt(fold[:], off); err != nil {
		return &CabError{off, "short folder entry"}
	}
	_ = cbCFFolder
	dataOff := int64(le.Uint32(fold[:]))
	nBlocks := int(le.Uint16(fold[4:]))
	comp := le.Uint16(fold[6:]) & 0xF
	var file [16]byte
	if _, err := r.ReadAt(file[:], int64(coffFiles)); err != nil {
		return &CabError{int64(coffFiles), "short file entry"}
	}
	fileSize := int64(le.Uint32(file[:]))
	fileOff := int64(le.Uint32(file[4:]))
	if fileSize > maxCabFile || nBlocks > maxCabBlocks {
		return &CabError{int64(coffFiles), "file too large"}
	}
	if le.Uint16(file[8:]) != 0 {
		return &CabError{int64(coffFiles) + 8, "the first file is not in the first folder"}
	}
	switch comp {
	case 0, 1: // none, MSZIP
	case 2:
		return &CabError{off + 6, "Quantum compression is not supported"}
	default:
		return &CabError{off + 6, "LZX compression is not supported"}
	}

	var out int64 // uncompressed bytes produced so far
	var dict []byte
	for i := 0; i < nBlocks && out < fileOff+fileSize; i++ {
		var bh [8]byte
		if _, err := r.ReadAt(bh[:], dataOff); err != nil {
			return &CabError{dataOff, "short data block header"}
		}
		cb := int64(le.Uint16(bh[4:]))
		ucb := int64(le.Uint16(bh[6:]))
		dataOff += 8 + cbCFData
		if dataOff+cb > size {
			return &CabError{dataOff, "data block beyond the end of the cabinet"}
		}
		p := make([]byte, cb)
		if _, err := r.ReadAt(p, dataOff); err != nil {
			return &CabError{dataOff, err.Error()}
		}
		var block []byte
		if comp == 0 {
			block = p
		} else {
			if len(p) < 2 || p[0] != 'C' || p[1] != 'K' {
				return &CabError{dataOff, "MSZIP block without CK signature"}
			}
			// Each block is a deflate stream whose window continues
			// from the previous block's output.
			fr := flate.NewReaderDict(bytes.NewReader(p[2:]), dict)
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, io.LimitReader(fr, ucb+1)); err != nil {
				return &CabError{dataOff, "MSZIP: " + err.Error()}
			}
			block = buf.Bytes()
		}
		if int64(len(block)) != ucb {
			return &CabError{dataOff, fmt.Sprintf("block inflated to %d bytes, header says %d", len(block), ucb)}
		}
		dict = block
		dataOff += cb
		// Write the part of the block inside the file.
		lo := max(0, fileOff-out)
		hi := min(int64(len(block)), fileOff+fileSize-out)
		if lo < hi {
			if _, err := w.Write(block[lo:hi]); err != nil {
				return err
			}
		}
		out += int64(len(block))
	}
	if out < fileOff+fileSize {
		return &CabError{dataOff, "cabinet ends before its file"}
	}
	return nil
}
