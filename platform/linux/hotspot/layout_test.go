package hotspot

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// A VM's tables as a test builds them: the entries the reader needs, laid
// out as vmStructs.cpp lays them out (pointers to names, then numbers),
// with the description variables the VM fills at start-up.

const tablesBase = 0x100000

type tableEntry struct {
	typ, name string
	static    bool
	value     uint64
}

// vmRequired are the table entries readLayout needs, with made-up
// offsets (distinct, inside a structure's first bytes).
func vmRequired() (fields, types, consts []tableEntry) {
	names := []string{
		"GrowableArrayBase::_len", "GrowableArray<int>::_data", "CodeHeap::_memory", "CodeHeap::_segmap",
		"CodeHeap::_log2_segment_size", "VirtualSpace::_low", "VirtualSpace::_high_boundary", "HeapBlock::_header",
		"HeapBlock::Header::_length", "HeapBlock::Header::_used", "CodeBlob::_name", "CodeBlob::_size",
		"CodeBlob::_frame_size", "CodeBlob::_frame_complete_offset", "CodeBlob::_code_begin", "CodeBlob::_code_end",
		"CompiledMethod::_method", "CompiledMethod::_scopes_data_begin", "nmethod::_metadata_offset",
		"nmethod::_scopes_pcs_offset", "nmethod::_dependencies_offset", "nmethod::_comp_level", "PcDesc::_pc_offset",
		"PcDesc::_scope_decode_offset", "Method::_constMethod", "ConstMethod::_constants", "ConstMethod::_flags",
		"ConstMethod::_code_size", "ConstMethod::_name_index", "ConstantPool::_pool_holder", "Klass::_name",
		"ConstantPool::_source_file_name_index", "Symbol::_length", "Symbol::_body",
	}
	for i, n := range names {
		typ, name, _ := strings.Cut(n, "::")
		fields = append(fields, tableEntry{typ: typ, name: name, value: uint64(8 * (i % 4))})
	}
	fields = append(fields, tableEntry{typ: "CodeCache", name: "_heaps", static: true, value: tablesBase})
	types = []tableEntry{{typ: "HeapBlock", value: 16}, {typ: "PcDesc", value: 32}, {typ: "ConstMethod", value: 48}, {typ: "ConstantPool", value: 80}}
	consts = []tableEntry{{name: "ConstMethod::_has_linenumber_table", value: 1}, {name: "frame::interpreter_frame_last_sp_offset", value: ^uint64(1)}}
	return
}

// buildTables returns the memory of tables holding fields, types and
// consts (int constants), with the VM release "17.0.99-test", and the
// symbols that find them.
func buildTables(fields, types, consts []tableEntry) (Symbols, []byte) {
	mem := make([]byte, 8<<10)
	put := func(at, v uint64) { binary.LittleEndian.PutUint64(mem[at-tablesBase:], v) }
	put32 := func(at uint64, v uint32) { binary.LittleEndian.PutUint32(mem[at-tablesBase:], v) }
	strs := uint64(tablesBase + 4096)
	str := func(s string) uint64 {
		at := strs
		copy(mem[at-tablesBase:], s)
		strs += uint64(len(s)) + 1
		return at
	}
	var syms Symbols
	// The description variables, a word each, from tablesBase+8.
	for i, n := range symbolNames {
		*n.at(&syms) = tablesBase + 8 + 8*uint64(i)
	}
	arrays := uint64(tablesBase + 1024)
	structs, typesAt, ints, longs := arrays, arrays+2048, arrays+2560, arrays+2880
	vals := map[*uint64]uint64{
		&syms.Structs: structs, &syms.Types: typesAt, &syms.IntConsts: ints, &syms.LongConsts: longs,
		&syms.SType: 0, &syms.SField: 8, &syms.SIsStatic: 24, &syms.SOffset: 32, &syms.SAddress: 40, &syms.SStride: 48,
		&syms.TName: 0, &syms.TSize: 32, &syms.TStride: 40,
		&syms.IName: 0, &syms.IValue: 8, &syms.IStride: 16,
		&syms.LName: 0, &syms.LValue: 8, &syms.LStride: 16,
	}
	for p, v := range vals {
		put(*p, v)
	}
	release := uint64(tablesBase + 512)
	put(release, str("17.0.99-test"))
	fields = append(fields, tableEntry{typ: "Abstract_VM_Version", name: "_s_vm_release", static: true, value: release})
	for i, e := range fields {
		at := structs + 48*uint64(i)
		put(at, str(e.typ))
		put(at+8, str(e.name))
		put(at+16, str("int"))
		if e.static {
			put32(at+24, 1)
			put(at+40, e.value)
		} else {
			put(at+32, e.value)
		}
	}
	for i, e := range types {
		at := typesAt + 40*uint64(i)
		put(at, str(e.typ))
		put(at+32, e.value)
	}
	for i, e := range consts {
		at := ints + 16*uint64(i)
		put(at, str(e.name))
		put32(at+8, uint32(e.value))
	}
	return syms, mem
}

func memRead(mem []byte) func(addr uint64, b []byte) bool {
	return func(addr uint64, b []byte) bool {
		if addr < tablesBase || addr-tablesBase > uint64(len(mem)) || uint64(len(b)) > uint64(len(mem))-(addr-tablesBase) {
			return false
		}
		copy(b, mem[addr-tablesBase:])
		return true
	}
}

func TestReadLayout(t *testing.T) {
	fields, types, consts := vmRequired()
	syms, mem := buildTables(fields, types, consts)
	l, err := readLayout(memRead(mem), syms)
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != "17.0.99-test" || !l.srcInPool || l.fpMethod != -24 || l.fpBcp != -64 || l.codeHeaps != tablesBase {
		t.Errorf("layout %+v", l)
	}

	// A VM whose tables lack a field: refused, naming the version and the field.
	syms, mem = buildTables(fields[1:], types, consts)
	_, err = readLayout(memRead(mem), syms)
	if !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "17.0.99-test") || !strings.Contains(err.Error(), "GrowableArrayBase::_len") {
		t.Errorf("without a field: %v", err)
	}

	// A VM still starting: its strides are not filled yet.
	syms, mem = buildTables(fields, types, consts)
	binary.LittleEndian.PutUint64(mem[syms.SStride-tablesBase:], 0)
	if _, err = readLayout(memRead(mem), syms); err != errNotReady {
		t.Errorf("strides not filled: %v, want errNotReady", err)
	}

	// An interpreter frame laid out otherwise: refused, not guessed.
	syms, mem = buildTables(fields, types, consts[:1])
	if _, err = readLayout(memRead(mem), syms); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("without the interpreter's frame slots: %v", err)
	}
}

// TestFileSymbolsStripped: an ELF file without the tables' symbols (a
// libjvm stripped of its exports; here the test binary) is refused,
// naming the file.
func TestFileSymbolsStripped(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("the test binary is not ELF: %v", err)
	}
	defer f.Close()
	_, err = FileSymbols(f, "/opt/jdk/lib/server/libjvm.so")
	if err == nil || !strings.Contains(err.Error(), "/opt/jdk/lib/server/libjvm.so") || !strings.Contains(err.Error(), "stripped") || !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("FileSymbols of a binary without them: %v", err)
	}
}

// FuzzTables reads a layout from hostile tables: it must not panic, loop
// or read without bounds, and a layout it accepts must pass its check.
func FuzzTables(f *testing.F) {
	fields, types, consts := vmRequired()
	_, mem := buildTables(fields, types, consts)
	f.Add(mem)
	f.Fuzz(func(t *testing.T, data []byte) {
		var syms Symbols
		for i, n := range symbolNames {
			*n.at(&syms) = tablesBase + 8 + 8*uint64(i)
		}
		l, err := readLayout(memRead(data), syms)
		if err == nil && l.check() != nil {
			t.Fatalf("accepted a layout its check refuses: %v", l.check())
		}
	})
}

// TestLayoutReadAgainSoon: the tables of a VM still starting are read
// again at a sample a few milliseconds later, whatever the sampling rate
// (waiting 256 samples cost 2.6 s at 99 Hz: a 4 s program recorded on
// the whole host was named in 35% of its samples), and not at every
// sample before that.
func TestLayoutReadAgainSoon(t *testing.T) {
	fields, types, consts := vmRequired()
	syms, mem := buildTables(fields, types, consts)
	stride := append([]byte(nil), mem[syms.SStride-tablesBase:][:8]...)
	binary.LittleEndian.PutUint64(mem[syms.SStride-tablesBase:], 0)
	reads := 0
	read := memRead(mem)
	r := NewReader(func(_ uint32, addr uint64, b []byte) bool { reads++; return read(addr, b) })
	r.Attach(1, "/opt/jdk/lib/server/libjvm.so", syms, nil)
	r.Frames(1, Regs{}, Stack{}, nil)
	if r.procs[1].layout != nil {
		t.Fatal("a layout read from unfilled tables")
	}
	copy(mem[syms.SStride-tablesBase:], stride) // the VM has filled them
	n := reads
	r.Frames(1, Regs{}, Stack{}, nil)
	if reads != n {
		t.Errorf("the tables were read again at the very next sample (%d reads)", reads-n)
	}
	time.Sleep(2 * firstRetry)
	r.Frames(1, Regs{}, Stack{}, nil)
	if r.procs[1].layout == nil {
		t.Errorf("the tables not read again %v after the miss: %v", 2*firstRetry, r.Err(1))
	}
}
