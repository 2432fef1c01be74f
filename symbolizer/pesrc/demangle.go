package pesrc

import (
	"strings"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pdb"
)

// demangler returns how llvm-symbolizer names a function of a PE image:
// Itanium and Rust names demangled; else Microsoft names ("?...")
// demangled; else, in an x86 (32-bit) image, the C decorations of
// cdecl, stdcall, fastcall and vectorcall removed ("_f", "_f@12",
// "@f@12", "f@@12" all name f), and what remains demangled again.
func demangler(x86 bool) func(string) string {
	return func(name string) string {
		if d := symbolizer.DemangleLLVM19(name); d != name {
			return d
		}
		if strings.HasPrefix(name, "?") {
			if d := pdb.Demangle(name); d != name {
				return d
			}
		}
		if !x86 {
			return name
		}
		c := undecorateC(name)
		if d := symbolizer.DemangleLLVM19(c); d != c {
			return d
		}
		return c
	}
}

// undecorateC removes the decorations x86 Windows compilers put on
// extern "C" names: a "@digits" suffix (none for names starting with
// '?'), then a trailing '@' of vectorcall, else a '_' or '@' prefix.
func undecorateC(name string) string {
	front := byte(0)
	if name != "" {
		front = name[0]
	}
	atNum := false
	if front != '?' {
		if at := strings.LastIndexByte(name, '@'); at >= 0 && allDigits(name[at+1:]) {
			name, atNum = name[:at], true
		}
	}
	vectorcall := false
	if atNum && strings.HasSuffix(name, "@") {
		name, vectorcall = name[:len(name)-1], true
	}
	if !vectorcall && (front == '_' || front == '@') && name != "" {
		name = name[1:]
	}
	return name
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
