package hotspot

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
)

// ErrUnknownVersion says a HotSpot build's tables do not describe what the
// reader needs: its samples keep anonymous frames, and the session says so
// once, naming the version.
var ErrUnknownVersion = errors.New("hotspot: layout not read")

// errNotReady says the VM has not filled its tables yet (a JVM still
// starting): the layout is read again later.
var errNotReady = errors.New("hotspot: tables not initialized yet")

// Symbols are the load addresses, in one process, of libjvm's exported
// serviceability tables and of the variables that describe their entries.
type Symbols struct {
	Structs, Types, IntConsts, LongConsts uint64 // gHotSpotVM*: pointers to the arrays

	// gHotSpotVMStructEntry*Offset, *ArrayStride
	SType, SField, SIsStatic, SOffset, SAddress, SStride uint64
	// gHotSpotVMTypeEntry*Offset, *ArrayStride
	TName, TSize, TStride uint64
	// gHotSpotVM{Int,Long}ConstantEntry*Offset, *ArrayStride
	IName, IValue, IStride, LName, LValue, LStride uint64
}

var symbolNames = []struct {
	name string
	at   func(*Symbols) *uint64
}{
	{"gHotSpotVMStructs", func(s *Symbols) *uint64 { return &s.Structs }},
	{"gHotSpotVMTypes", func(s *Symbols) *uint64 { return &s.Types }},
	{"gHotSpotVMIntConstants", func(s *Symbols) *uint64 { return &s.IntConsts }},
	{"gHotSpotVMLongConstants", func(s *Symbols) *uint64 { return &s.LongConsts }},
	{"gHotSpotVMStructEntryTypeNameOffset", func(s *Symbols) *uint64 { return &s.SType }},
	{"gHotSpotVMStructEntryFieldNameOffset", func(s *Symbols) *uint64 { return &s.SField }},
	{"gHotSpotVMStructEntryIsStaticOffset", func(s *Symbols) *uint64 { return &s.SIsStatic }},
	{"gHotSpotVMStructEntryOffsetOffset", func(s *Symbols) *uint64 { return &s.SOffset }},
	{"gHotSpotVMStructEntryAddressOffset", func(s *Symbols) *uint64 { return &s.SAddress }},
	{"gHotSpotVMStructEntryArrayStride", func(s *Symbols) *uint64 { return &s.SStride }},
	{"gHotSpotVMTypeEntryTypeNameOffset", func(s *Symbols) *uint64 { return &s.TName }},
	{"gHotSpotVMTypeEntrySizeOffset", func(s *Symbols) *uint64 { return &s.TSize }},
	{"gHotSpotVMTypeEntryArrayStride", func(s *Symbols) *uint64 { return &s.TStride }},
	{"gHotSpotVMIntConstantEntryNameOffset", func(s *Symbols) *uint64 { return &s.IName }},
	{"gHotSpotVMIntConstantEntryValueOffset", func(s *Symbols) *uint64 { return &s.IValue }},
	{"gHotSpotVMIntConstantEntryArrayStride", func(s *Symbols) *uint64 { return &s.IStride }},
	{"gHotSpotVMLongConstantEntryNameOffset", func(s *Symbols) *uint64 { return &s.LName }},
	{"gHotSpotVMLongConstantEntryValueOffset", func(s *Symbols) *uint64 { return &s.LValue }},
	{"gHotSpotVMLongConstantEntryArrayStride", func(s *Symbols) *uint64 { return &s.LStride }},
}

// FileSymbols reads the tables' symbols from libjvm's dynamic symbol table:
// addresses relative to the file's load bias. A libjvm without them
// (stripped of its exports, or not HotSpot) gives an error naming path.
func FileSymbols(f *elf.File, path string) (Symbols, error) {
	var s Symbols
	syms, err := f.DynamicSymbols()
	if err != nil {
		return s, fmt.Errorf("hotspot: %s: no dynamic symbols (stripped?): %v: %w", path, err, ErrUnknownVersion)
	}
	vals := make(map[string]uint64, len(symbolNames))
	for _, sym := range syms {
		vals[sym.Name] = sym.Value
	}
	for _, n := range symbolNames {
		v, ok := vals[n.name]
		if !ok || v == 0 {
			return s, fmt.Errorf("hotspot: %s: no %s (stripped?): %w", path, n.name, ErrUnknownVersion)
		}
		*n.at(&s) = v
	}
	return s, nil
}

// Rebase returns s moved by the load bias.
func (s Symbols) Rebase(bias uint64) Symbols {
	for _, n := range symbolNames {
		*n.at(&s) += bias
	}
	return s
}

// TextBias returns the load bias of f mapped with its executable segment
// at start.
func TextBias(f *elf.File, start uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return start - p.Vaddr&^0xfff, true
		}
	}
	return 0, false
}

// IsLibJVM reports whether path names HotSpot's shared library.
func IsLibJVM(path string) bool { return filepath.Base(path) == "libjvm.so" }

// Caps on what the tables may hold: a table longer, or a name longer, is
// not HotSpot's.
const (
	maxEntries = 20000
	maxName    = 256
	maxStride  = 256
)

// Layout is what one HotSpot build tells of its data structures, read from
// its serviceability tables (vmStructs.cpp: the tables the serviceability
// agent reads): field offsets, type sizes, constants and the addresses of
// the static fields the reader starts from. It is read once per libjvm,
// from the first process that runs it (the tables' description variables
// are filled by the VM at start-up, so the file alone does not have them).
type Layout struct {
	Version string // Abstract_VM_Version::_s_vm_release: "17.0.15+6-Debian-1deb12u1"

	codeHeaps uint64 // &CodeCache::_heaps (a GrowableArray<CodeHeap*>*)

	gaLen, gaData                   uint64 // GrowableArrayBase::_len, GrowableArray<int>::_data
	heapMemory, heapSegmap, heapLog uint64 // CodeHeap::_memory, _segmap, _log2_segment_size
	vsLow, vsHigh                   uint64 // VirtualSpace::_low, _high
	heapBlockSize                   uint64 // sizeof(HeapBlock): a blob follows its block's header
	blockLength, blockUsed          uint64 // HeapBlock::_header + Header::_length, _used

	blobName, blobSize, blobFrameSize  uint64 // CodeBlob::_name, _size, _frame_size
	blobFrameComplete                  uint64 // CodeBlob::_frame_complete_offset
	blobCodeBegin, blobCodeEnd         uint64 // CodeBlob::_code_begin, _code_end
	cmMethod, cmScopesData             uint64 // CompiledMethod::_method, _scopes_data_begin
	nmMetadata, nmScopesPcs, nmDepends uint64 // nmethod::_metadata_offset, _scopes_pcs_offset, _dependencies_offset
	nmCompLevel                        uint64 // nmethod::_comp_level
	pcDescSize, pcOffset, pcScope      uint64 // sizeof(PcDesc), PcDesc::_pc_offset, _scope_decode_offset

	methodConst                      uint64 // Method::_constMethod
	methodFlags, methodHidden        uint64 // Method::_flags (a u2) and its Method::_hidden bit; 0: not known
	constMethodSize                  uint64 // sizeof(ConstMethod): its bytecodes follow it
	cmConstants, cmFlags, cmCodeSize uint64 // ConstMethod::_constants, _flags, _code_size
	cmNameIndex                      uint64 // ConstMethod::_name_index
	hasLineTable                     uint64 // ConstMethod::_has_linenumber_table (a flag)
	cpSize, cpHolder                 uint64 // sizeof(ConstantPool), ConstantPool::_pool_holder
	klassName, ikSourceFile          uint64 // Klass::_name, {ConstantPool,InstanceKlass}::_source_file_name_index
	srcInPool                        bool   // the source file's index is the ConstantPool's
	symLength, symBody               uint64 // Symbol::_length, _body
	fpMethod, fpBcp                  int64  // interpreter frame slots, in bytes from the frame pointer
	blobHeader                       uint64 // bytes of a CodeBlob read to check it
}

// tables is what was read of one VM's tables.
type tables struct {
	fields map[string]uint64 // "Type::field" → offset, or address for a static field
	static map[string]bool
	types  map[string]uint64 // type → size
	consts map[string]int64
}

// readTables reads the four tables of the VM whose symbols are s.
func readTables(read func(addr uint64, b []byte) bool, s Symbols) (*tables, error) {
	var b [8]byte
	word := func(addr uint64) (uint64, bool) {
		if !read(addr, b[:]) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(b[:]), true
	}
	var desc [19]uint64
	for i, n := range symbolNames {
		v, ok := word(*n.at(&s))
		if !ok {
			return nil, fmt.Errorf("hotspot: reading %s at %#x", n.name, *n.at(&s))
		}
		desc[i] = v
	}
	var d Symbols
	for i, n := range symbolNames {
		*n.at(&d) = desc[i]
	}
	if d.SStride == 0 || d.TStride == 0 || d.IStride == 0 || d.LStride == 0 {
		return nil, errNotReady
	}
	for _, v := range []uint64{d.SStride, d.TStride, d.IStride, d.LStride} {
		if v > maxStride || v < 8 {
			return nil, fmt.Errorf("hotspot: table stride %d: %w", v, ErrUnknownVersion)
		}
	}
	// Every number an entry holds must lie inside the entry.
	for _, e := range [][2]uint64{{d.SType, d.SStride}, {d.SField, d.SStride}, {d.SIsStatic, d.SStride}, {d.SOffset, d.SStride},
		{d.SAddress, d.SStride}, {d.TName, d.TStride}, {d.TSize, d.TStride}, {d.IName, d.IStride}, {d.IValue, d.IStride},
		{d.LName, d.LStride}, {d.LValue, d.LStride}} {
		if e[0] > e[1]-8 {
			return nil, fmt.Errorf("hotspot: table entry offset %d in entries of %d bytes: %w", e[0], e[1], ErrUnknownVersion)
		}
	}
	t := &tables{fields: map[string]uint64{}, static: map[string]bool{}, types: map[string]uint64{}, consts: map[string]int64{}}
	var name [maxName]byte
	str := func(addr uint64) (string, bool) {
		// Read up to the end of addr's page first: a name near a page's
		// end must not fail for the next page.
		n := uint64(maxName)
		if rest := 4096 - addr%4096; rest < n {
			n = rest
		}
		if !read(addr, name[:n]) {
			return "", false
		}
		for i := uint64(0); i < n; i++ {
			if name[i] == 0 {
				return string(name[:i]), true
			}
		}
		if n < maxName && read(addr+n, name[n:]) {
			for i := n; i < maxName; i++ {
				if name[i] == 0 {
					return string(name[:i]), true
				}
			}
		}
		return "", false
	}
	each := func(base, stride uint64, what string, f func(e []byte) error) error {
		entry := make([]byte, stride)
		for i := uint64(0); ; i++ {
			if i == maxEntries {
				return fmt.Errorf("hotspot: %s table longer than %d entries: %w", what, maxEntries, ErrUnknownVersion)
			}
			if !read(base+i*stride, entry) {
				return fmt.Errorf("hotspot: reading %s table entry %d at %#x", what, i, base+i*stride)
			}
			if err := f(entry); err == errEnd {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	at := func(e []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(e[off:]) }
	err := each(d.Structs, d.SStride, "vmStructs", func(e []byte) error {
		tp := at(e, d.SType)
		if tp == 0 {
			return errEnd
		}
		tn, ok1 := str(tp)
		fn, ok2 := str(at(e, d.SField))
		if !ok1 || !ok2 {
			return errBadName
		}
		key := tn + "::" + fn
		if binary.LittleEndian.Uint32(e[d.SIsStatic:]) != 0 {
			t.fields[key], t.static[key] = at(e, d.SAddress), true
		} else {
			t.fields[key] = at(e, d.SOffset)
		}
		return nil
	})
	if err == nil {
		err = each(d.Types, d.TStride, "vmTypes", func(e []byte) error {
			tp := at(e, d.TName)
			if tp == 0 {
				return errEnd
			}
			tn, ok := str(tp)
			if !ok {
				return errBadName
			}
			t.types[tn] = at(e, d.TSize)
			return nil
		})
	}
	if err == nil {
		err = each(d.IntConsts, d.IStride, "int constants", func(e []byte) error {
			np := at(e, d.IName)
			if np == 0 {
				return errEnd
			}
			n, ok := str(np)
			if !ok {
				return errBadName
			}
			t.consts[n] = int64(int32(binary.LittleEndian.Uint32(e[d.IValue:])))
			return nil
		})
	}
	if err == nil {
		err = each(d.LongConsts, d.LStride, "long constants", func(e []byte) error {
			np := at(e, d.LName)
			if np == 0 {
				return errEnd
			}
			n, ok := str(np)
			if !ok {
				return errBadName
			}
			t.consts[n] = int64(at(e, d.LValue))
			return nil
		})
	}
	if err == errBadName {
		err = fmt.Errorf("hotspot: a table entry's name is unreadable: %w", ErrUnknownVersion)
	}
	return t, err
}

var (
	errEnd     = errors.New("end of table")
	errBadName = errors.New("bad name")
)

// readLayout reads the layout of the VM whose tables are at s.
func readLayout(read func(addr uint64, b []byte) bool, s Symbols) (*Layout, error) {
	t, err := readTables(read, s)
	if err != nil {
		return nil, err
	}
	l := &Layout{Version: "unknown version"}
	if a, ok := t.fields["Abstract_VM_Version::_s_vm_release"]; ok && t.static["Abstract_VM_Version::_s_vm_release"] {
		var b [8]byte
		if read(a, b[:]) {
			var v [64]byte
			if p := binary.LittleEndian.Uint64(b[:]); p != 0 && read(p, v[:]) {
				for i, c := range v {
					if c == 0 {
						l.Version = string(v[:i])
						break
					}
				}
			}
		}
	}
	var missing []string
	field := func(dst *uint64, name string, static bool) {
		v, ok := t.fields[name]
		if !ok || t.static[name] != static {
			missing = append(missing, name)
		}
		*dst = v
	}
	typ := func(dst *uint64, name string) {
		v, ok := t.types[name]
		if !ok || v == 0 || v > 1<<16 {
			missing = append(missing, "sizeof("+name+")")
		}
		*dst = v
	}
	field(&l.codeHeaps, "CodeCache::_heaps", true)
	field(&l.gaLen, "GrowableArrayBase::_len", false)
	field(&l.gaData, "GrowableArray<int>::_data", false)
	field(&l.heapMemory, "CodeHeap::_memory", false)
	field(&l.heapSegmap, "CodeHeap::_segmap", false)
	field(&l.heapLog, "CodeHeap::_log2_segment_size", false)
	field(&l.vsLow, "VirtualSpace::_low", false)
	field(&l.vsHigh, "VirtualSpace::_high_boundary", false)
	typ(&l.heapBlockSize, "HeapBlock")
	var hdr, hlen, hused uint64
	field(&hdr, "HeapBlock::_header", false)
	field(&hlen, "HeapBlock::Header::_length", false)
	field(&hused, "HeapBlock::Header::_used", false)
	l.blockLength, l.blockUsed = hdr+hlen, hdr+hused
	field(&l.blobName, "CodeBlob::_name", false)
	field(&l.blobSize, "CodeBlob::_size", false)
	field(&l.blobFrameSize, "CodeBlob::_frame_size", false)
	field(&l.blobFrameComplete, "CodeBlob::_frame_complete_offset", false)
	field(&l.blobCodeBegin, "CodeBlob::_code_begin", false)
	field(&l.blobCodeEnd, "CodeBlob::_code_end", false)
	field(&l.cmMethod, "CompiledMethod::_method", false)
	field(&l.cmScopesData, "CompiledMethod::_scopes_data_begin", false)
	field(&l.nmMetadata, "nmethod::_metadata_offset", false)
	field(&l.nmScopesPcs, "nmethod::_scopes_pcs_offset", false)
	field(&l.nmDepends, "nmethod::_dependencies_offset", false)
	field(&l.nmCompLevel, "nmethod::_comp_level", false)
	typ(&l.pcDescSize, "PcDesc")
	field(&l.pcOffset, "PcDesc::_pc_offset", false)
	field(&l.pcScope, "PcDesc::_scope_decode_offset", false)
	field(&l.methodConst, "Method::_constMethod", false)
	typ(&l.constMethodSize, "ConstMethod")
	field(&l.cmConstants, "ConstMethod::_constants", false)
	field(&l.cmFlags, "ConstMethod::_flags", false)
	field(&l.cmCodeSize, "ConstMethod::_code_size", false)
	field(&l.cmNameIndex, "ConstMethod::_name_index", false)
	typ(&l.cpSize, "ConstantPool")
	field(&l.cpHolder, "ConstantPool::_pool_holder", false)
	field(&l.klassName, "Klass::_name", false)
	// The source file's constant pool index moved from InstanceKlass to
	// ConstantPool in JDK 11.
	if v, ok := t.fields["ConstantPool::_source_file_name_index"]; ok {
		l.ikSourceFile, l.srcInPool = v, true
	} else {
		field(&l.ikSourceFile, "InstanceKlass::_source_file_name_index", false)
	}
	// A hidden method (of a hidden class, such as a lambda's proxy, or a
	// LambdaForm's) is left out, as jstack and JFR leave it out; a VM
	// that does not say which they are shows them.
	if off, ok := t.fields["Method::_flags"]; ok && !t.static["Method::_flags"] && t.types["u2"] == 2 {
		if v, ok := t.consts["Method::_hidden"]; ok && v > 0 && v < 1<<16 {
			l.methodFlags, l.methodHidden = off, uint64(v)
		}
	}
	field(&l.symLength, "Symbol::_length", false)
	field(&l.symBody, "Symbol::_body", false)
	if v, ok := t.consts["ConstMethod::_has_linenumber_table"]; ok && v > 0 && v < 1<<16 {
		l.hasLineTable = uint64(v)
	} else {
		missing = append(missing, "ConstMethod::_has_linenumber_table")
	}
	// The interpreter's frame slots (frame_x86.hpp) are exported only in
	// part: the last sp slot is, and the method and bytecode pointer
	// slots sit at fixed distances from it (method one word below, then
	// mirror, mdp, cache, locals, bcp). A VM whose last sp slot moved is
	// refused rather than guessed at.
	if v, ok := t.consts["frame::interpreter_frame_last_sp_offset"]; ok && v == -2 {
		l.fpMethod, l.fpBcp = (v-1)*8, (v-6)*8
	} else {
		missing = append(missing, "frame::interpreter_frame_last_sp_offset")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("hotspot: VM %s: its tables lack %v: %w", l.Version, missing, ErrUnknownVersion)
	}
	l.blobHeader = max(l.blobName, l.blobSize, l.blobFrameSize, l.blobFrameComplete, l.blobCodeBegin, l.blobCodeEnd) + 8
	if err := l.check(); err != nil {
		return nil, err
	}
	return l, nil
}

// check holds the layout to what the reader's reads assume: every field
// inside the bytes read of its structure.
func (l *Layout) check() error {
	for _, v := range []uint64{l.gaLen, l.gaData, l.heapMemory + l.vsLow, l.heapMemory + l.vsHigh, l.heapSegmap + l.vsLow, l.heapLog, l.blockLength, l.blockUsed,
		l.blobName, l.blobSize, l.blobFrameSize, l.blobFrameComplete, l.blobCodeBegin, l.blobCodeEnd, l.cmMethod, l.cmScopesData,
		l.nmMetadata, l.nmScopesPcs, l.nmDepends, l.nmCompLevel, l.pcOffset, l.pcScope, l.methodConst, l.cmConstants, l.cmFlags,
		l.cmCodeSize, l.cmNameIndex, l.cpHolder, l.klassName, l.ikSourceFile, l.symLength, l.symBody} {
		if v > maxObject-8 {
			return fmt.Errorf("hotspot: VM %s: a field offset %#x beyond %d: %w", l.Version, v, maxObject, ErrUnknownVersion)
		}
	}
	if l.blobHeader != max(l.blobName, l.blobSize, l.blobFrameSize, l.blobFrameComplete, l.blobCodeBegin, l.blobCodeEnd)+8 {
		return fmt.Errorf("hotspot: VM %s: CodeBlob header of %d bytes: %w", l.Version, l.blobHeader, ErrUnknownVersion)
	}
	if l.pcDescSize < l.pcScope+4 || l.pcDescSize < l.pcOffset+4 || l.pcDescSize > 64 {
		return fmt.Errorf("hotspot: VM %s: PcDesc of %d bytes: %w", l.Version, l.pcDescSize, ErrUnknownVersion)
	}
	if l.constMethodSize > maxObject || l.constMethodSize < l.cmConstants+8 || l.constMethodSize < max(l.cmFlags, l.cmCodeSize, l.cmNameIndex)+2 {
		return fmt.Errorf("hotspot: VM %s: ConstMethod of %d bytes: %w", l.Version, l.constMethodSize, ErrUnknownVersion)
	}
	if l.heapBlockSize > maxObject || l.cpSize > 1<<16 {
		return fmt.Errorf("hotspot: VM %s: HeapBlock of %d bytes, ConstantPool of %d: %w", l.Version, l.heapBlockSize, l.cpSize, ErrUnknownVersion)
	}
	return nil
}

// maxObject caps the bytes the reader reads of one VM structure.
const maxObject = 1024

// MaybeJava reports whether the executable at path may run HotSpot (the
// java launcher): its samples keep a full stack copy, which the walk
// reads.
func MaybeJava(path string) bool { return filepath.Base(path) == "java" }
