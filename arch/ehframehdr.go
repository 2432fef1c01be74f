package arch

import (
	"debug/elf"
	"fmt"
	"io"
)

// EHFrameHdr is the parsed header of .eh_frame_hdr (LSB 5.0 "Exception
// Frame Header"): where .eh_frame is and how many FDEs its binary search
// table lists.
type EHFrameHdr struct {
	EHFrameAddr uint64
	FDECount    uint64

	tableEnc byte // encoding of the search table's values
	tableOff int  // offset of the search table in the data
}

// ParseEHFrameHdr parses .eh_frame_hdr bytes loaded at addr.
func ParseEHFrameHdr(file string, data []byte, addr uint64) (EHFrameHdr, error) {
	r := &reader{data: data, file: file, sect: ".eh_frame_hdr"}
	version := r.u8()
	ptrEnc := r.u8()
	countEnc := r.u8()
	tableEnc := r.u8()
	if r.err != nil {
		return EHFrameHdr{}, r.err
	}
	if version != 1 {
		return EHFrameHdr{}, &FormatError{File: file, Section: ".eh_frame_hdr", Msg: fmt.Sprintf("version %d", version)}
	}
	var h EHFrameHdr
	h.EHFrameAddr = r.encoded(ptrEnc, 8, addr, addr)
	if countEnc != peOmit {
		h.FDECount = r.encoded(countEnc, 8, addr, addr)
	}
	if r.err != nil {
		return EHFrameHdr{}, r.err
	}
	// Each table entry is two values of tableEnc; check the table fits
	// rather than trusting the count.
	if countEnc != peOmit && tableEnc == peDatarel|peSdata4 && h.FDECount > uint64(len(data)-r.off)/8 {
		return EHFrameHdr{}, &FormatError{File: file, Section: ".eh_frame_hdr", Off: int64(r.off), Msg: fmt.Sprintf("%d FDEs do not fit in %d bytes", h.FDECount, len(data)-r.off)}
	}
	h.tableEnc, h.tableOff = tableEnc, r.off
	if countEnc == peOmit {
		h.tableEnc = peOmit
	}
	return h, nil
}

// ehFrameFromSegments finds .eh_frame through PT_GNU_EH_FRAME when the
// file has no section headers (stripped with sstrip, or an image read
// from memory): the header gives .eh_frame's address, and .eh_frame runs
// to its terminator, at most to the end of its PT_LOAD segment.
func ehFrameFromSegments(f *elf.File, path string) (data []byte, addr, hdrAddr uint64, err error) {
	var hdr *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			hdr = p
		}
	}
	if hdr == nil {
		return nil, 0, 0, nil
	}
	if hdr.Filesz > maxSection {
		return nil, 0, 0, fmt.Errorf("arch: %s: PT_GNU_EH_FRAME of %d bytes", path, hdr.Filesz)
	}
	hd := make([]byte, hdr.Filesz)
	if _, err := io.ReadFull(hdr.Open(), hd); err != nil {
		return nil, 0, 0, fmt.Errorf("arch: %s: reading PT_GNU_EH_FRAME: %w", path, err)
	}
	h, err := ParseEHFrameHdr(path, hd, hdr.Vaddr)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || h.EHFrameAddr < p.Vaddr || h.EHFrameAddr >= p.Vaddr+p.Filesz {
			continue
		}
		n := min(p.Vaddr+p.Filesz-h.EHFrameAddr, maxSection)
		data = make([]byte, n)
		if _, err := p.ReadAt(data, int64(h.EHFrameAddr-p.Vaddr)); err != nil && err != io.EOF {
			return nil, 0, 0, fmt.Errorf("arch: %s: reading .eh_frame at %#x: %w", path, h.EHFrameAddr, err)
		}
		return data, h.EHFrameAddr, hdr.Vaddr, nil
	}
	return nil, 0, 0, fmt.Errorf("arch: %s: .eh_frame_hdr points at %#x, in no PT_LOAD segment", path, h.EHFrameAddr)
}
