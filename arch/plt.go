package arch

import (
	"debug/elf"
	"encoding/binary"
)

// PLT stubs jump; they do not call, so their frame is the caller's call
// site: the return address is in lr (arm64) or at [rsp] (amd64). The lazy
// binding header (PLT0) pushes before jumping to the dynamic linker.
var (
	// arm64: CFA = sp, return address still in x30.
	ruleARM64Leaf = Rule{CFA: CFAReg, CFAReg: ARM64SP, RA: RegSame, FP: RegSame}
	// arm64 PLT0 after "stp x16, x30, [sp, #-16]!": x30 at CFA-8.
	ruleARM64PLT0 = Rule{CFA: CFAReg, CFAReg: ARM64SP, CFAOff: 16, RA: RegOffset, RAOff: -8, FP: RegSame}
	// amd64: CFA = rsp+8, return address at CFA-8; after PLT0's push, +16.
	ruleAMD64Stub  = Rule{CFA: CFAReg, CFAReg: AMD64RSP, CFAOff: 8, RA: RegOffset, RAOff: -8, FP: RegSame}
	ruleAMD64Push1 = Rule{CFA: CFAReg, CFAReg: AMD64RSP, CFAOff: 16, RA: RegOffset, RAOff: -8, FP: RegSame}
)

const (
	insnSTPx16x30 = 0xa9bf7bf0 // stp x16, x30, [sp, #-16]!
	insnBTIc      = 0xd503245f // bti c
	amd64PushRel  = 0x35ff     // ff 35: push qword ptr [rip+disp32]
)

// pltStubs returns stub rules for f's PLT sections. NewTable applies them
// only where no FDE covers the address.
func pltStubs(f *elf.File, a Arch) []Stub {
	var out []Stub
	for _, name := range []string{".plt", ".plt.sec", ".plt.got", ".iplt"} {
		sec := f.Section(name)
		if sec == nil || sec.Type != elf.SHT_PROGBITS || sec.Size == 0 || sec.Size > maxSection {
			continue
		}
		start, end := sec.Addr, sec.Addr+sec.Size
		head := make([]byte, 8)
		if name != ".plt" || sec.Size < 32 {
			head = nil
		} else if _, err := sec.ReadAt(head, 0); err != nil {
			head = nil
		}
		switch a {
		case ARM64:
			// PLT0: [bti c;] stp x16, x30, [sp, #-16]!; ... 32 bytes.
			if stp := plt0Push(head); stp >= 0 {
				pushed := start + uint64(stp) + 4
				out = append(out, Stub{start, pushed, ruleARM64Leaf}, Stub{pushed, start + 32, ruleARM64PLT0})
				start += 32
			}
			out = append(out, Stub{start, end, ruleARM64Leaf})
		case AMD64:
			// PLT0: push GOT+8(%rip) (6 bytes); jmp *GOT+16(%rip); 16 bytes.
			if len(head) >= 2 && binary.LittleEndian.Uint16(head) == amd64PushRel {
				out = append(out, Stub{start, start + 6, ruleAMD64Stub}, Stub{start + 6, start + 16, ruleAMD64Push1})
				start += 16
			}
			out = append(out, Stub{start, end, ruleAMD64Stub})
		}
	}
	return out
}

// plt0Push returns the offset of the aarch64 PLT0 push in head, or -1.
func plt0Push(head []byte) int {
	for off := 0; off+4 <= len(head); off += 4 {
		switch binary.LittleEndian.Uint32(head[off:]) {
		case insnSTPx16x30:
			return off
		case insnBTIc:
		default:
			return -1
		}
	}
	return -1
}
