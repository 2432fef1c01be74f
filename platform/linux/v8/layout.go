package v8

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownVersion says a V8 build's metadata does not describe what the
// reader needs: its samples keep anonymous frames, and the session says so
// once, naming the version.
var ErrUnknownVersion = errors.New("v8: layout not read")

// errNotV8 says a file has no V8 post-mortem metadata.
var errNotV8 = errors.New("v8: no v8dbg_ metadata")

// IsNotV8 reports whether err says a file holds no V8 (as opposed to a V8
// rawstack cannot read).
func IsNotV8(err error) bool { return err == errNotV8 }

// Layout is what a V8 build tells of its heap objects and frames, read
// from its post-mortem metadata: the v8dbg_ symbols that
// tools/gen-postmortem-metadata.py emits into every Node.js binary (class
// field offsets, instance types, frame slots, tags). It is read once per
// binary and shared by every process that maps it.
//
// A few fields the generator lost in V8 11 (Code's instruction start, size
// and kind; BytecodeArray's source position table) have no symbol: they
// are placed from their neighbours that do (see derive), and every use
// checks what it reads against another field (a Code's instruction start
// must be its InstructionStream's body), so a build that moved them gives
// anonymous frames, never wrong ones.
type Layout struct {
	Version [3]uint32 // major, minor, build

	// frame slots, relative to the frame pointer
	fpContext, fpFunction, fpBytecodeArray, fpBytecodeOffset int64

	typeJSFunctionFirst, typeJSFunctionLast            uint16
	typeSFI, typeScript, typeScopeInfo, typeCode       uint16
	typeIS, typeBytecodeArray, typeByteArray           uint16
	typeFixedArray, typeWeakFixedArray, firstNonString uint16

	mapOff, instanceType uint64 // HeapObject.map, Map.instance_type
	arrayLength          uint64 // FixedArrayBase.length (a SMI)
	arrayData            uint64 // FixedArray's (and ByteArray's) first element

	jsfShared                       uint64 // JSFunction.shared
	sfiFunctionData, sfiNameOrScope uint64
	sfiScript                       uint64
	scopeFirstVars, scopeNContext   uint64 // ScopeInfo slot indexes
	scriptName, scriptSource        uint64
	scriptLineEnds                  uint64

	bcData, bcPositions uint64 // BytecodeArray: first bytecode, source position table

	codeDeopt, codePositions      uint64 // Code: deoptimization data (bytecode for baseline), source position table
	codeStream, codeStart         uint64 // Code: its InstructionStream (tagged), instruction start (raw)
	codeFlags, codeSize           uint64 // Code: flags (the kind in kindMask), instruction size (int32)
	kindMask                      uint32
	kindShift                     uint32
	kindBaseline, kindInterpreted uint32
	isHeader, isCode              uint64 // InstructionStream: header size (body start), back pointer to its Code

	deoptInlinedCount, deoptLiterals, deoptSFI, deoptInlining uint64

	strLength                           uint64
	strEncodingMask, strReprMask        uint16
	strSeq, strCons, strExternal        uint16
	strSliced, strThin, strOneByte      uint16
	seqChars, consFirst, consSecond     uint64
	thinActual, slicedParent, slicedOff uint64
	externalResource                    uint64

	// bytecodeSizes is kBytecodeSizes[3][count] (operand scales 1, 2, 4):
	// a baseline frame's pc is mapped to its bytecode by walking them.
	bytecodeSizes []byte
}

// VersionString returns "11.3.244".
func (l *Layout) VersionString() string {
	return fmt.Sprintf("%d.%d.%d", l.Version[0], l.Version[1], l.Version[2])
}

// MaybeV8 says whether the file at path may hold V8 with its metadata: a
// node (or nodejs, nsolid) executable or a libnode. Other files are not
// opened.
func MaybeV8(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	if strings.HasPrefix(base, "libnode.so") {
		return true
	}
	for _, p := range []string{"node", "nodejs", "nsolid"} {
		if rest, ok := strings.CutPrefix(base, p); ok && strings.Trim(rest, "0123456789.-") == "" {
			return true
		}
	}
	return false
}

// Load reads the V8 layout of the ELF file at file, which the target
// names path.
func Load(file, path string) (*Layout, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("v8: %w", err)
	}
	defer f.Close()
	return Find(f, path)
}

// symbols reads the values of a file's metadata symbols.
type symbols struct {
	f    *elf.File
	vals map[string]uint64 // symbol → address
	size map[string]uint64
}

// int32 returns the 32-bit value the symbol name holds, and false when
// there is no such symbol or its bytes cannot be read.
func (s *symbols) int32(name string) (int64, bool) {
	addr, ok := s.vals[name]
	if !ok {
		return 0, false
	}
	var b [4]byte
	if !readVaddr(s.f, addr, b[:]) {
		return 0, false
	}
	return int64(int32(binary.LittleEndian.Uint32(b[:]))), true
}

// readVaddr reads the file's bytes at virtual address addr; bytes of a
// segment past its file size (.bss) read as zero.
func readVaddr(f *elf.File, addr uint64, b []byte) bool {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr+uint64(len(b)) > p.Vaddr+p.Memsz {
			continue
		}
		off := addr - p.Vaddr
		for i := range b {
			b[i] = 0
		}
		if off >= p.Filesz {
			return true
		}
		n := min(uint64(len(b)), p.Filesz-off)
		_, err := p.ReadAt(b[:n], int64(off))
		return err == nil
	}
	return false
}

// Find reads the V8 layout of f (named path, for errors). It returns
// errNotV8 for a file with no v8dbg_ symbols and an error wrapping
// ErrUnknownVersion for a V8 whose metadata lacks what the reader needs.
func Find(f *elf.File, path string) (*Layout, error) {
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian || f.Machine != elf.EM_X86_64 {
		return nil, errNotV8 // frame slots and tags below are read for x86-64
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		return nil, errNotV8
	}
	s := &symbols{f: f, vals: map[string]uint64{}, size: map[string]uint64{}}
	for _, sym := range dyn {
		if strings.HasPrefix(sym.Name, "v8dbg_") || strings.HasPrefix(sym.Name, "_ZN2v88internal") {
			s.vals[sym.Name], s.size[sym.Name] = sym.Value, sym.Size
		}
	}
	if _, ok := s.vals["v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"]; !ok {
		return nil, errNotV8
	}
	l := &Layout{}
	for i, n := range []string{"major", "minor", "build"} {
		v, ok := s.int32("_ZN2v88internal7Version6" + n + "_E")
		if !ok {
			return nil, fmt.Errorf("%s: no v8::internal::Version::%s_: %w", path, n, ErrUnknownVersion)
		}
		l.Version[i] = uint32(v)
	}
	if err := l.read(s); err != nil {
		return nil, fmt.Errorf("%s: V8 %s: %w", path, l.VersionString(), err)
	}
	if addr, ok := s.vals["_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE"]; ok {
		n := s.size["_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE"]
		if n > 0 && n%3 == 0 && n <= 3*256 {
			b := make([]byte, n)
			if readVaddr(f, addr, b) && validSizes(b) {
				l.bytecodeSizes = b
			}
		}
	}
	return l, nil
}

func validSizes(b []byte) bool {
	for _, n := range b {
		if n == 0 || n > 32 {
			return false
		}
	}
	return true
}

// read fills l from the metadata symbols, failing with the first one
// missing (wrapping ErrUnknownVersion).
func (l *Layout) read(s *symbols) error {
	var missing string
	get := func(name string) int64 {
		v, ok := s.int32("v8dbg_" + name)
		if !ok && missing == "" {
			missing = name
		}
		return v
	}
	opt := func(name string, def int64) int64 {
		if v, ok := s.int32("v8dbg_" + name); ok {
			return v
		}
		return def
	}
	// The tagging scheme the reader is written for: 64-bit words, no
	// pointer compression, heap objects tagged 01, SMIs in the upper half.
	if get("HeapObjectTag") != 1 || get("HeapObjectTagMask") != 3 || get("SmiTagMask") != 1 || opt("SmiTag", 0) != 0 ||
		get("SmiShiftSize") != 31 || opt("TaggedSize", 8) != 8 || opt("SystemPointerSize", 8) != 8 {
		if missing != "" {
			return fmt.Errorf("no v8dbg_%s: %w", missing, ErrUnknownVersion)
		}
		return fmt.Errorf("tagging other than 64-bit uncompressed pointers: %w", ErrUnknownVersion)
	}
	l.fpContext = opt("off_fp_context_or_frame_type", opt("off_fp_context", 0))
	l.fpFunction = get("off_fp_function")
	l.fpBytecodeArray = opt("off_fp_bytecode_array", l.fpFunction-16)
	l.fpBytecodeOffset = opt("off_fp_bytecode_offset", l.fpBytecodeArray-8)

	t := func(name string) uint16 { return uint16(get("type_" + name)) }
	l.typeJSFunctionFirst = t("JSFunction__JS_FUNCTION_TYPE")
	l.typeJSFunctionLast = l.typeJSFunctionFirst
	l.typeSFI = t("SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")
	l.typeScript = t("Script__SCRIPT_TYPE")
	l.typeScopeInfo = t("ScopeInfo__SCOPE_INFO_TYPE")
	l.typeCode = t("Code__CODE_TYPE")
	l.typeIS = t("InstructionStream__INSTRUCTION_STREAM_TYPE")
	l.typeBytecodeArray = t("BytecodeArray__BYTECODE_ARRAY_TYPE")
	l.typeByteArray = t("ByteArray__BYTE_ARRAY_TYPE")
	l.typeFixedArray = t("FixedArray__FIXED_ARRAY_TYPE")
	l.typeWeakFixedArray = uint16(opt("type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE", 0))
	l.firstNonString = uint16(get("FirstNonstringType"))

	c := func(name string) uint64 { return uint64(get("class_" + name)) }
	l.mapOff = uint64(opt("class_HeapObject__map__Map", 0))
	l.instanceType = c("Map__instance_type__uint16_t")
	l.arrayLength = c("FixedArrayBase__length__SMI")
	l.arrayData = c("FixedArray__data__uintptr_t")
	l.jsfShared = c("JSFunction__shared__SharedFunctionInfo")
	l.sfiFunctionData = c("SharedFunctionInfo__function_data__Object")
	l.sfiNameOrScope = c("SharedFunctionInfo__name_or_scope_info__Object")
	l.sfiScript = c("SharedFunctionInfo__script_or_debug_info__HeapObject")
	l.scopeFirstVars = uint64(get("scopeinfo_idx_first_vars"))
	l.scopeNContext = uint64(get("scopeinfo_idx_ncontextlocals"))
	l.scriptName = c("Script__name__Object")
	l.scriptSource = uint64(opt("class_Script__source__Object", int64(l.scriptName)-8))
	l.scriptLineEnds = c("Script__line_ends__Object")
	l.bcData = c("BytecodeArray__data__uintptr_t")
	l.codeDeopt = c("Code__deoptimization_data__FixedArray")
	l.codePositions = c("Code__source_position_table__ByteArray")
	l.isHeader = c("InstructionStream__instruction_start__uintptr_t")
	l.kindMask = uint32(get("CodeKindFieldMask"))
	l.kindShift = uint32(opt("CodeKindFieldShift", 0))
	l.kindBaseline = uint32(get("CodeKindBaseline"))
	l.kindInterpreted = uint32(opt("CodeKindInterpretedFunction", int64(l.kindBaseline)-1))
	l.deoptInlinedCount = uint64(get("DeoptimizationDataInlinedFunctionCountIndex"))
	l.deoptLiterals = uint64(get("DeoptimizationDataLiteralArrayIndex"))
	l.deoptSFI = uint64(get("DeoptimizationDataSharedFunctionInfoIndex"))
	l.deoptInlining = uint64(get("DeoptimizationDataInliningPositionsIndex"))

	l.strLength = c("String__length__int32_t")
	l.strEncodingMask = uint16(get("StringEncodingMask"))
	l.strReprMask = uint16(get("StringRepresentationMask"))
	l.strSeq = uint16(opt("SeqStringTag", 0))
	l.strCons = uint16(get("ConsStringTag"))
	l.strExternal = uint16(get("ExternalStringTag"))
	l.strSliced = uint16(get("SlicedStringTag"))
	l.strThin = uint16(get("ThinStringTag"))
	l.strOneByte = uint16(get("OneByteStringTag"))
	l.seqChars = c("SeqOneByteString__chars__char")
	l.consFirst = c("ConsString__first__String")
	l.consSecond = c("ConsString__second__String")
	l.thinActual = c("ThinString__actual__String")
	l.slicedParent = c("SlicedString__parent__String")
	l.slicedOff = c("SlicedString__offset__SMI")
	l.externalResource = c("ExternalString__resource__Object")
	if missing != "" {
		return fmt.Errorf("no v8dbg_%s: %w", missing, ErrUnknownVersion)
	}
	return l.derive()
}

// derive places the fields V8 11's metadata lost, from their neighbours
// (V8's code.h and bytecode-array.h of 11.1–11.3, where Node.js 20 is):
//
//   - Code (the V8 11 data object; its instructions are in an
//     InstructionStream): deoptimization_data, source_position_table,
//     instruction_stream, instruction_start, flags, builtin_id and
//     kind_specific_flags (until 11.4), instruction_size, one after the
//     other from the source position table that has a symbol;
//   - InstructionStream: the map, then the back pointer to its Code;
//   - BytecodeArray: length, constant_pool, handler_table,
//     source_position_table.
//
// Builds outside the versions these were read from fail here with the
// version named, and the checks at each use catch a neighbour that moved.
func (l *Layout) derive() error {
	v := l.Version
	if v[0] != 11 || v[1] > 3 || l.typeIS == 0 {
		return fmt.Errorf("Code's instruction range has no metadata and is placed for V8 11.1–11.3 only: %w", ErrUnknownVersion)
	}
	l.codeStream = l.codePositions + 8
	l.codeStart = l.codePositions + 16
	l.codeFlags = l.codeStart + 8
	l.codeSize = l.codeFlags + 8 // after builtin_id (int16) and kind_specific_flags (uint16)
	l.isCode = l.mapOff + 8
	l.bcPositions = l.arrayLength + 24
	if l.bcPositions+8 > l.bcData || l.codeDeopt >= l.codePositions || l.isHeader < l.isCode+8 {
		return fmt.Errorf("unexpected Code or BytecodeArray layout: %w", ErrUnknownVersion)
	}
	return nil
}
