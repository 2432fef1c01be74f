package pesrc

import "testing"

func TestUndecorateC(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_main", "main"},
		{"_f@12", "f"},
		{"@f@12", "f"},
		{"f@@12", "f"},
		{"__x86.get_pc_thunk.ax", "_x86.get_pc_thunk.ax"},
		{"plain", "plain"},
		{"_a@b", "a@b"},
		{"f@", "f"},
		{"?x@@YAHH@Z", "?x@@YAHH@Z"},
		{"", ""},
		{"_", ""},
	} {
		if got := undecorateC(c.in); got != c.want {
			t.Errorf("undecorateC(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	d := demangler(true)
	for _, c := range []struct{ in, want string }{
		{"__Z3fooi", "foo(int)"},
		{"_Z3fooi", "foo(int)"},
		{"_main@8", "main"},
	} {
		if got := d(c.in); got != c.want {
			t.Errorf("x86 demangler(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := demangler(false)("_main"); got != "_main" {
		t.Errorf("x64 demangler(_main) = %q, want it unchanged", got)
	}
}
