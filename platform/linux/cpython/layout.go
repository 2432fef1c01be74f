package cpython

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
)

// layout is where an interpreter keeps what a sample's Python frames
// need: byte offsets of fields in its structures. One layout serves a
// CPython minor version (3.11, 3.12, 3.13).
type layout struct {
	version uint32 // PY_VERSION_HEX (0x030b07f0 = 3.11.7 final)

	interpretersHead uint64 // _PyRuntimeState.interpreters.head
	threadsHead      uint64 // PyInterpreterState.threads.head
	tsNext           uint64 // PyThreadState.next
	tsNativeID       uint64 // PyThreadState.native_thread_id
	tsFrame          uint64 // 3.13+: PyThreadState.current_frame; 3.11–3.12: PyThreadState.cframe
	cframeFrame      uint64 // 3.11–3.12: _PyCFrame.current_frame
	viaCFrame        bool   // 3.11–3.12: the current frame is reached through cframe

	frCode     uint64 // _PyInterpreterFrame.f_code (3.13: f_executable)
	frPrevious uint64
	frInstr    uint64 // prev_instr (3.11–3.12), instr_ptr (3.13)
	frOwner    uint64
	frIsEntry  uint64 // 3.11: is_entry; 0 when the version marks entries with a C-stack shim frame
	frSpan     uint64 // bytes of a frame read per frame

	coSize      uint64 // PyVarObject.ob_size: code units of co_code_adaptive
	coQualname  uint64
	coFilename  uint64
	coFirstLine uint64
	coLinetable uint64
	coCode      uint64 // co_code_adaptive: the first code unit
	coSpan      uint64

	uniLength      uint64 // PyASCIIObject.length
	uniState       uint64
	uniASCIISize   uint64 // sizeof(PyASCIIObject): where compact ASCII data starts
	uniCompactSize uint64 // sizeof(PyCompactUnicodeObject)
	bytesSize      uint64 // PyVarObject.ob_size
	bytesData      uint64 // PyBytesObject.ob_sval

	// 3.8–3.10: frames are PyFrameObjects, each run by its own
	// _PyEval_EvalFrameDefault call (every frame is an entry frame), and
	// a thread state knows its thread by pthread_t only.
	// The GIL (struct _gil_runtime_state): 3.8–3.11 keep it in
	// _PyRuntime.ceval.gil, 3.12+ point to it from each interpreter's
	// ceval.gil. A thread holds it when it is locked and its last holder
	// is the thread's state.
	rtGIL     uint64 // 3.8–3.11: offsetof(_PyRuntimeState, ceval.gil); 0 from 3.12
	interpGIL uint64 // 3.12+: offsetof(PyInterpreterState, ceval.gil), a pointer
	gilHolder uint64 // offsetof(struct _gil_runtime_state, last_holder)
	gilLocked uint64 // offsetof(struct _gil_runtime_state, locked), an int

	legacy     bool
	tsThreadID uint64 // PyThreadState.thread_id (pthread_self())
	frLasti    uint64 // PyFrameObject.f_lasti (int)
	lastiUnits bool   // 3.10: f_lasti counts code units, not bytes
	coCodeObj  uint64 // PyCodeObject.co_code (a bytes object)
	table      format.PyLineTable
}

// pthreadTidAMD64 is where glibc's struct pthread (what pthread_t points
// to) keeps the thread's kernel tid on x86-64: offsetof(struct pthread,
// tid), 0x2d0 in every glibc since 2.x. A thread state of 3.8–3.10 names
// its thread by pthread_t only; a libc with another layout (musl) makes no
// thread state match, and samples keep native stacks.
const pthreadTidAMD64 = 0x2d0

// Owners of an interpreter frame (pycore_frame.h): a frame owned by the C
// stack is the shim _PyEval_EvalFrameDefault pushes before the first
// Python frame it runs (3.12+); it runs no code.
const ownedByCStack = 3

// Tables for the versions whose interpreter does not describe itself
// (3.8 to 3.12). Every number is a field offset or a struct size of the
// x86-64 and arm64 (LP64) build of that minor version, as
// `offsetof`/`sizeof` give them when compiled against its headers
// (Include/internal/pycore_runtime.h, pycore_interp.h, pycore_frame.h,
// cpython/code.h, cpython/unicodeobject.h); TestTablesMatchHeaders
// recompiles them against the installed headers to check. CPython keeps
// these internal layouts fixed within a minor version, so a new patch
// release (3.12.9) uses its minor's table; the session then checks the
// table on the live process (a thread state whose native thread id is one
// of the process's threads, a code object of type code) and turns Python
// frames off, with one warning, when it fails.
//
// tableOf returns the table of a minor version (0x030c for 3.12). A
// function rather than a map, so that a program that links the package
// pays nothing at init.
func tableOf(minor uint32) (layout, bool) {
	switch minor {
	case 0x0308: // 3.8
		return legacyTable(104, 1152, false, format.PyLineTableLnotab), true
	case 0x0309: // 3.9
		return legacyTable(104, 352, false, format.PyLineTableLnotab), true
	case 0x030a: // 3.10
		return legacyTable(96, 352, true, format.PyLineTable310), true
	case 0x030b, 0x030c, 0x030d:
		return tables[minor-0x030b], true
	}
	return layout{}, false
}

// tables are 3.11, 3.12 and 3.13's.
var tables = [...]layout{
	{ // 3.11
		interpretersHead: 40, threadsHead: 16, tsNext: 8, tsNativeID: 160, tsFrame: 56, cframeFrame: 8, viaCFrame: true,
		frCode: 32, frPrevious: 48, frInstr: 56, frOwner: 69, frIsEntry: 68,
		coSize: 16, coQualname: 128, coFilename: 112, coFirstLine: 72, coLinetable: 136, coCode: 184,
		uniLength: 16, uniState: 32, uniASCIISize: 48, uniCompactSize: 72, bytesSize: 16, bytesData: 32,
		rtGIL: 360, gilHolder: 8, gilLocked: 16,
	},
	{ // 3.12
		interpretersHead: 40, threadsHead: 72, tsNext: 8, tsNativeID: 144, tsFrame: 56, cframeFrame: 0, viaCFrame: true,
		frCode: 0, frPrevious: 8, frInstr: 56, frOwner: 70,
		coSize: 16, coQualname: 128, coFilename: 112, coFirstLine: 68, coLinetable: 136, coCode: 192,
		uniLength: 16, uniState: 32, uniASCIISize: 40, uniCompactSize: 56, bytesSize: 16, bytesData: 32,
		interpGIL: 384, gilHolder: 8, gilLocked: 16,
	},
	// 3.13 publishes its offsets (_Py_DebugOffsets); this entry gives what
	// they leave out (the size of a compact non-ASCII string) and is
	// checked against them by the tests.
	{
		interpretersHead: 632, threadsHead: 7344, tsNext: 8, tsNativeID: 160, tsFrame: 72,
		frCode: 0, frPrevious: 8, frInstr: 56, frOwner: 70,
		coSize: 16, coQualname: 128, coFilename: 112, coFirstLine: 68, coLinetable: 136, coCode: 200,
		uniLength: 16, uniState: 32, uniASCIISize: 40, uniCompactSize: 56, bytesSize: 16, bytesData: 32,
		interpGIL: 16, gilHolder: 8, gilLocked: 16,
	},
}

// legacyTable is the layout of 3.8–3.10, which differ in where a frame
// keeps f_lasti, what it counts, the line table's encoding and where the
// runtime keeps the GIL.
func legacyTable(lasti, gil uint64, units bool, table format.PyLineTable) layout {
	return layout{legacy: true, rtGIL: gil, gilHolder: 8, gilLocked: 16,
		interpretersHead: 32, threadsHead: 8, tsNext: 8, tsThreadID: 176, tsFrame: 24,
		frCode: 32, frPrevious: 24, frLasti: lasti, lastiUnits: units,
		coQualname: 112, coFilename: 104, coFirstLine: 40, coLinetable: 120, coCodeObj: 48,
		uniLength: 16, uniState: 32, uniASCIISize: 48, uniCompactSize: 72, bytesSize: 16, bytesData: 32,
		table: table}
}

func (l *layout) finish() {
	l.frSpan = max(l.frCode, l.frPrevious, l.frInstr, l.frOwner, l.frIsEntry, l.frLasti) + 8
	l.coSpan = max(l.coSize, l.coQualname, l.coFilename, l.coFirstLine, l.coLinetable, l.coCodeObj) + 8
	if l.table == format.PyLineTableNone {
		l.table = format.PyLineTableLocations
	}
}

// ErrUnknownVersion says that an interpreter's version has no layout:
// its samples keep native-only stacks.
var ErrUnknownVersion = errors.New("cpython: version not supported")

// errNotPython says a module holds no CPython interpreter.
var errNotPython = errors.New("not a CPython interpreter")

// Interp is a CPython interpreter found in an ELF file (a python
// executable or libpython): the link-time addresses of _PyRuntime and
// PyCode_Type and the layout of its version.
type Interp struct {
	Version  uint32 // PY_VERSION_HEX
	runtime  uint64 // link-time address of _PyRuntime
	codeType uint64 // link-time address of PyCode_Type
	lay      layout
	progs    []elf.ProgHeader // PT_LOAD
	// takeGIL are the link-time ranges of the interpreter's take_gil
	// (and its compiler-made copies: take_gil.lto_priv.0, .cold), where
	// a thread waits for the GIL; none when the file and its debug file
	// have no symbol table.
	takeGIL [][2]uint64
}

// addTakeGIL records the ranges of the take_gil functions among syms.
func (in *Interp) addTakeGIL(syms []elf.Symbol) {
	for _, s := range syms {
		if s.Size > 0 && elf.ST_TYPE(s.Info) == elf.STT_FUNC && (s.Name == "take_gil" || strings.HasPrefix(s.Name, "take_gil.")) {
			in.takeGIL = append(in.takeGIL, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
}

// KnowsTakeGIL reports whether the interpreter's take_gil was found, so
// that a thread waiting for the GIL can be told.
func (in *Interp) KnowsTakeGIL() bool { return len(in.takeGIL) > 0 }

func loadSegments(f *elf.File) []elf.ProgHeader {
	var out []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			out = append(out, p.ProgHeader)
		}
	}
	return out
}

// Bias returns the load bias of the file given one of its executable
// mappings: the mapping at start maps the file from offset off
// (page-aligned). arch.LoadBias knows which segment that is when several
// start in the mapped page, as in lld's output.
func (in *Interp) Bias(start, off uint64) (uint64, bool) {
	f := &elf.File{}
	for i := range in.progs {
		f.Progs = append(f.Progs, &elf.Prog{ProgHeader: in.progs[i]})
	}
	b, err := arch.LoadBias(f, start, off)
	return b, err == nil
}

// VersionString returns "3.12.1" for the interpreter's version.
func (in *Interp) VersionString() string {
	v := in.Version
	return fmt.Sprintf("%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff)
}

// pyVersionOf returns the version a python executable's or libpython's
// file name gives ("python3.10", "libpython3.8.so.1.0": 3 and 10, 3 and
// 8), and false for any other name.
func pyVersionOf(path string) (major, minor int, ok bool) {
	base := path[strings.LastIndexByte(path, '/')+1:]
	rest, found := strings.CutPrefix(strings.TrimPrefix(base, "lib"), "python")
	if !found {
		return 0, 0, false
	}
	maj, rest, found := strings.Cut(rest, ".")
	if !found || len(maj) != 1 || maj[0] < '0' || maj[0] > '9' {
		return 0, 0, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	mnr, err := strconv.Atoi(rest[:n])
	if err != nil {
		return 0, 0, false
	}
	return int(maj[0] - '0'), mnr, true
}

// MaybePython says whether a module path names a python executable or
// a libpython, the only files [Find] looks into.
func MaybePython(path string) bool {
	_, _, ok := pyVersionOf(path)
	return ok
}

// Find reads the interpreter in the ELF file f (named path, for errors).
// It returns errNotPython when f has no _PyRuntime, and an error wrapping
// ErrUnknownVersion for a CPython whose layout rawstack does not know
// (before 3.8, after 3.13, or a 3.13+ whose debug offsets do not
// describe themselves as expected).
func Find(f *elf.File, path string) (*Interp, error) {
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil, fmt.Errorf("%s: %w: only 64-bit little-endian builds are read", path, ErrUnknownVersion)
	}
	syms, _ := f.DynamicSymbols()
	if more, err := f.Symbols(); err == nil {
		syms = append(syms, more...)
	}
	in := &Interp{}
	var pyVersion uint64
	for _, s := range syms {
		switch s.Name {
		case "_PyRuntime":
			in.runtime = s.Value
		case "PyCode_Type":
			in.codeType = s.Value
		case "Py_Version":
			pyVersion = s.Value
		}
	}
	if in.runtime == 0 {
		return nil, errNotPython
	}
	in.addTakeGIL(syms)
	if in.codeType == 0 {
		return nil, fmt.Errorf("%s: no PyCode_Type symbol: %w", path, ErrUnknownVersion)
	}
	if pyVersion != 0 {
		var b [4]byte
		if readVA(f, pyVersion, b[:]) {
			in.Version = binary.LittleEndian.Uint32(b[:])
		}
	}
	if in.Version == 0 { // before 3.11 there is no Py_Version: the file name says
		if maj, mnr, ok := pyVersionOf(path); ok {
			in.Version = uint32(maj)<<24 | uint32(mnr)<<16
		}
	}
	minor := in.Version >> 16
	lay, ok := tableOf(minor)
	if !ok {
		return nil, fmt.Errorf("%s: CPython %s: %w (rawstack reads 3.8 to 3.13)", path, in.VersionString(), ErrUnknownVersion)
	}
	if lay.legacy && f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: CPython %s on %v: %w (3.8–3.10 are read on x86-64 only, where glibc's pthread layout is known)", path, in.VersionString(), f.Machine, ErrUnknownVersion)
	}
	if minor >= 0x030d {
		var raw [debugOffsetsSize]byte
		if !readVA(f, in.runtime, raw[:]) {
			return nil, fmt.Errorf("%s: _PyRuntime at %#x: cannot read its debug offsets: %w", path, in.runtime, ErrUnknownVersion)
		}
		if err := lay.fromDebugOffsets(raw[:], in.Version); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", path, err, ErrUnknownVersion)
		}
	}
	lay.version = in.Version
	lay.finish()
	in.lay = lay
	return in, nil
}

// readVA reads the initialised bytes at link-time address va of f.
func readVA(f *elf.File, va uint64, b []byte) bool {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || va < p.Vaddr || va+uint64(len(b)) > p.Vaddr+p.Filesz {
			continue
		}
		_, err := p.ReadAt(b, int64(va-p.Vaddr))
		return err == nil
	}
	return false
}

// The 3.13 _Py_DebugOffsets (Include/internal/pycore_runtime.h): the
// cookie "xdebugpy", the version, then groups of uint64 offsets, each
// group starting with the size of its structure. Its layout is fixed
// within 3.13; later minor versions add fields, and are decoded only
// once rawstack knows their layout.
const debugOffsetsSize = 576

func (l *layout) fromDebugOffsets(b []byte, version uint32) error {
	if !bytes.Equal(b[:8], []byte("xdebugpy")) {
		return fmt.Errorf("_Py_DebugOffsets cookie %q, want %q", b[:8], "xdebugpy")
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if v := uint32(u(8)); v>>16 != version>>16 {
		return fmt.Errorf("_Py_DebugOffsets version %#x, Py_Version %#x", v, version)
	}
	if u(16) != 0 {
		return errors.New("a free-threaded build")
	}
	const rt, is, ts, fr, co, uni, by = 24, 48, 152, 224, 272, 536, 512
	l.interpretersHead = u(rt + 16)
	l.threadsHead = u(is + 24)
	l.tsNext = u(ts + 16)
	l.tsFrame = u(ts + 32)
	l.tsNativeID = u(ts + 48)
	l.viaCFrame = false
	l.frPrevious = u(fr + 8)
	l.frCode = u(fr + 16)
	l.frInstr = u(fr + 24)
	l.frOwner = u(fr + 40)
	l.frIsEntry = 0
	l.coFilename = u(co + 8)
	l.coQualname = u(co + 24)
	l.coLinetable = u(co + 32)
	l.coFirstLine = u(co + 40)
	l.coCode = u(co + 72)
	l.bytesSize = u(by + 8)
	l.bytesData = u(by + 16)
	l.uniState = u(uni + 8)
	l.uniLength = u(uni + 16)
	l.uniASCIISize = u(uni + 24)
	// The GIL: interpreter_state's ceval_gil (the pointer) and, relative
	// to gil_runtime_state (the interpreter's own GIL), its locked and
	// holder fields.
	l.rtGIL, l.interpGIL = 0, u(is+64)
	if g, lk, h := u(is+72), u(is+88), u(is+96); lk > g && h > g && lk-g < 64 && h-g < 64 {
		l.gilLocked, l.gilHolder = lk-g, h-g
	} else {
		return fmt.Errorf("_Py_DebugOffsets: GIL fields at %d and %d outside the GIL at %d", lk, h, g)
	}
	if l.interpGIL >= u(is) || u(is) > 1<<20 { // an interpreter state is ~190 KiB
		return fmt.Errorf("_Py_DebugOffsets: ceval.gil at %d outside an interpreter state of %d bytes", l.interpGIL, u(is))
	}
	// Sanity: every offset lies within its structure's size.
	for _, c := range [][2]uint64{{l.tsNext, u(ts)}, {l.tsFrame, u(ts)}, {l.tsNativeID, u(ts)}, {l.frOwner, u(fr)}, {l.frInstr, u(fr)}, {l.coCode, u(co)}, {l.coFirstLine, u(co)}} {
		if c[0] >= c[1] || c[1] > 1<<16 {
			return fmt.Errorf("_Py_DebugOffsets: offset %d outside its structure of %d bytes", c[0], c[1])
		}
	}
	return nil
}
