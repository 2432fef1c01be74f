package v8

import (
	"encoding/binary"
	"testing"
)

// node20 is the layout Node.js 20's V8 (11.3.244) describes, as Find reads
// it from /usr/bin/node (TestFindNode checks it against the file when
// there is one): the fuzz test needs no node.
func node20() *Layout {
	l := &Layout{Version: [3]uint32{11, 3, 244},
		fpContext: -8, fpFunction: -16, fpBytecodeArray: -32, fpBytecodeOffset: -40,
		typeJSFunctionFirst: 2066, typeJSFunctionLast: 2066, typeSFI: 262, typeScript: 167, typeScopeInfo: 261,
		typeCode: 245, typeIS: 252, typeBytecodeArray: 191, typeByteArray: 190, typeFixedArray: 175, typeWeakFixedArray: 240,
		firstNonString: 128, mapOff: 0, instanceType: 12, arrayLength: 8, arrayData: 16,
		jsfShared: 24, sfiFunctionData: 8, sfiNameOrScope: 16, sfiScript: 32, scopeFirstVars: 3, scopeNContext: 2,
		scriptName: 16, scriptSource: 8, scriptLineEnds: 56, bcData: 54,
		codeDeopt: 16, codePositions: 24, isHeader: 16, kindMask: 15, kindBaseline: 11, kindInterpreted: 10,
		deoptInlinedCount: 1, deoptLiterals: 2, deoptSFI: 6, deoptInlining: 7,
		strLength: 12, strEncodingMask: 8, strReprMask: 7, strCons: 1, strExternal: 2, strSliced: 3, strThin: 5, strOneByte: 8,
		seqChars: 16, consFirst: 16, consSecond: 24, thinActual: 16, slicedParent: 16, slicedOff: 24, externalResource: 16,
		bytecodeSizes: make([]byte, 3*200)}
	for i := range l.bytecodeSizes {
		l.bytecodeSizes[i] = byte(1 + i%5)
	}
	if err := l.derive(); err != nil {
		panic(err)
	}
	return l
}

// FuzzFrames walks stacks through a target whose memory is the fuzz
// input (mapped at base): whatever it holds, Frames must not panic, loop
// or read without bound, and every frame it gives must name a function
// it defined.
func FuzzFrames(f *testing.F) {
	const base = 0x10000000
	// A seed shaped like a V8 frame: fp slots pointing at objects in the
	// image, a map word whose instance type is SharedFunctionInfo.
	seed := make([]byte, 4096)
	le := binary.LittleEndian
	le.PutUint64(seed[0x100:], base+0x200+1)    // frame slot: function
	le.PutUint64(seed[0x110:], base+0x300+1)    // context
	le.PutUint64(seed[0x200+24:], base+0x400+1) // JSFunction.shared
	le.PutUint64(seed[0x400:], base+0x500+1)    // SFI map
	le.PutUint16(seed[0x500+12:], 262)          // map: instance type SFI
	le.PutUint64(seed[0x118:], base+0x800)      // saved fp
	le.PutUint64(seed[0x120:], base+0x40)       // return address
	f.Add(seed, uint16(0x118), uint16(0x40), uint16(0x1000))
	f.Add(make([]byte, 64), uint16(8), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, mem []byte, fp, pc, sp uint16) {
		if len(mem) > 1<<16 {
			return
		}
		reads := 0
		read := func(pid uint32, addr uint64, b []byte) bool {
			reads++
			if addr < base || addr-base+uint64(len(b)) > uint64(len(mem)) || addr+uint64(len(b)) < addr {
				return false
			}
			copy(b, mem[addr-base:])
			return true
		}
		r := NewReader(read)
		r.Attach(1, node20(), func(a uint64) bool { return a >= base && a < base+0x80 })
		r.AddText(1, base+0x80, base+0x100)
		regs := Regs{PC: base + uint64(pc), SP: base + uint64(sp), FP: base + uint64(fp)}
		st := Stack{Addr: base, Data: mem}
		defined := map[uint64]bool{}
		for _, pcs := range [][]uint64{nil, {regs.PC, base + 0x40, base + 0x90, 0xffffffff81000000}} {
			frames, fresh := r.Frames(1, regs, st, pcs)
			for _, fn := range fresh {
				defined[fn.ID] = true
			}
			for _, fr := range frames {
				if !defined[fr.Func] && r.ids[""] != fr.Func {
					found := false
					for _, id := range r.ids {
						found = found || id == fr.Func
					}
					if !found {
						t.Fatalf("frame %+v names an undefined function", fr)
					}
				}
			}
		}
		if reads > 1<<16 {
			t.Fatalf("%d reads for one stack", reads)
		}
	})
}
