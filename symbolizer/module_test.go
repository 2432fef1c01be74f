package symbolizer

import (
	"testing"

	"github.com/rawstack/rawstack/format"
)

func TestModuleDBTimeAware(t *testing.T) {
	db := NewModuleDB()
	a := db.Load(&format.ModuleLoad{Time: 10, Pid: 7, ID: 1, Base: 0x1000, Size: 0x1000, Kind: format.ModuleELF, Path: "/a.so"})
	g1 := db.Generation(7)
	db.Unload(&format.ModuleUnload{Time: 20, Pid: 7, ID: 1})
	if db.Generation(7) == g1 {
		t.Error("generation did not change on unload")
	}
	b := db.Load(&format.ModuleLoad{Time: 30, Pid: 7, ID: 2, Base: 0x1000, Size: 0x2000, Kind: format.ModuleELF, Path: "/b.so"})
	k := db.Load(&format.ModuleLoad{Time: 0, Pid: 0, ID: 3, Base: 0xffff0000, Size: 0x1000, Kind: format.ModuleKernel, Path: "[kernel]"})
	other := db.Load(&format.ModuleLoad{Time: 0, Pid: 8, ID: 4, Base: 0x1000, Size: 0x1000, Kind: format.ModuleELF, Path: "/c.so"})
	for _, c := range []struct {
		pid  uint32
		addr uint64
		t    int64
		want *Module
	}{
		{7, 0x1800, 5, nil}, // before the load
		{7, 0x1800, 10, a},
		{7, 0x1fff, 19, a},
		{7, 0x2000, 15, nil}, // past a's end
		{7, 0x1800, 20, nil}, // unloaded
		{7, 0x1800, 30, b},   // another module at the same address
		{7, 0x2800, 31, b},
		{7, 0xffff0010, 31, k}, // kernel modules are in every process
		{8, 0x1800, 31, other},
		{9, 0x1800, 31, nil},
	} {
		if got := db.Lookup(c.pid, c.addr, c.t); got != c.want {
			t.Errorf("Lookup(pid %d, %#x, t=%d) = %v, want %v", c.pid, c.addr, c.t, name(got), name(c.want))
		}
	}
	if n := len(db.Modules()); n != 4 {
		t.Errorf("%d modules, want 4", n)
	}
}

func TestModuleDBOverlapLatestWins(t *testing.T) {
	db := NewModuleDB()
	db.Load(&format.ModuleLoad{Time: 1, Pid: 1, ID: 1, Base: 0x1000, Size: 0x10000, Kind: format.ModuleAnon})
	jit := db.Load(&format.ModuleLoad{Time: 2, Pid: 1, ID: 2, Base: 0x4000, Size: 0x1000, Kind: format.ModuleJIT})
	if got := db.Lookup(1, 0x4100, 3); got != jit {
		t.Errorf("overlapping modules: got %v, want the later load", name(got))
	}
	if got := db.Lookup(1, 0x8000, 3); got == nil || got.ID != 1 {
		t.Errorf("outside the later module: got %v, want module 1", name(got))
	}
}

func name(m *Module) string {
	if m == nil {
		return "<nil>"
	}
	return m.Name()
}

func TestRelative(t *testing.T) {
	// A non-PIE text segment: file offset 0x1000 mapped at vaddr 0x401000.
	segs := []Segment{{Off: 0, FileSize: 0x800, Vaddr: 0x400000}, {Off: 0x1000, FileSize: 0x3000, Vaddr: 0x401000}}
	m := &Module{ModuleLoad: format.ModuleLoad{Kind: format.ModuleELF, Base: 0x7f0000001000, FileOffset: 0x1000, Size: 0x3000}}
	if rel, ok := m.Relative(0x7f0000001234, segs); !ok || rel != 0x401234 {
		t.Errorf("ELF: %#x %v, want 0x401234 true", rel, ok)
	}
	if rel, ok := m.Relative(0x7f0000001234, nil); ok || rel != 0x1234 {
		t.Errorf("ELF without segments: %#x %v, want the file offset 0x1234 false", rel, ok)
	}
	pe := &Module{ModuleLoad: format.ModuleLoad{Kind: format.ModulePE, Base: 0x140000000, Size: 0x10000}}
	if rel, _ := pe.Relative(0x140001500, nil); rel != 0x1500 {
		t.Errorf("PE: %#x, want RVA 0x1500", rel)
	}
	k := &Module{ModuleLoad: format.ModuleLoad{Kind: format.ModuleKernel, Base: 0xffffffff81000000, Size: 1 << 24}}
	if rel, _ := k.Relative(0xffffffff81000100, nil); rel != 0xffffffff81000100 {
		t.Errorf("kernel: %#x, want the address itself", rel)
	}
}

func TestPathMap(t *testing.T) {
	o := &Options{PathMap: []PathMap{{"/build", "/src"}, {"/build/out", "/artifacts"}}}
	for in, want := range map[string]string{
		"/build/out/bin/x": "/artifacts/bin/x",
		"/build/lib.so":    "/src/lib.so",
		"/usr/lib/x.so":    "/usr/lib/x.so",
	} {
		if got := o.MapPath(in); got != want {
			t.Errorf("MapPath(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := ParsePathMap("nonsense"); err == nil {
		t.Error("ParsePathMap accepted a string without '='")
	}
}

func TestDemangle(t *testing.T) {
	for in, want := range map[string]string{
		"main":                               "main",
		"_ZN3foo3barEv":                      "foo::bar()",
		"_ZNSt6vectorIiSaIiEE9push_backERKi": "std::vector<int, std::allocator<int> >::push_back(int const&)",
		"_ZZ4mainENKUliE_clEi":               "main::'lambda'(int)::operator()(int) const",
		"_ZStltIcSt11char_traitsIcESaIcEEbRKNSt7__cxx1112basic_stringIT_T0_T1_EESA_": "bool std::operator<<char, std::char_traits<char>, std::allocator<char> >(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
		"_ZN3std2rt10lang_start17h0123456789abcdefE":                                 "std::rt::lang_start::h0123456789abcdef",
		"_RNvCs1234_7mycrate3foo":                                                    "mycrate::foo",
		"_Z1fv.isra.0":                                                               "f() (.isra.0)",
		"_ZN1AgtEv":                                                                  "A::operator>()",
		"_ZN1ArsEi":                                                                  "A::operator>>(int)",
		"_ZN9hashbrown3raw14reserve_rehash17ha46695d12a604c59E.llvm.22":      "hashbrown::raw::reserve_rehash::ha46695d12a604c59 (.llvm.22)",
		"_ZN4core3ptr25drop_in_place$LT$a..b$GT$17hd4076bc5bd5aa74fE.llvm.6": "core::ptr::drop_in_place$LT$a..b$GT$::hd4076bc5bd5aa74f (.llvm.6)",
	} {
		if got := Demangle(in); got != want {
			t.Errorf("Demangle(%q) = %q, want %q", in, got, want)
		}
	}
}
