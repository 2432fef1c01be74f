package symbolizer

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Demangle returns the demangled form of a C++ (Itanium) or Rust (v0 or
// legacy) symbol name, or name itself when it is not mangled or does not
// demangle.
//
// The text follows llvm-symbolizer 14's demangler byte for byte where the
// two agree on the parse: LLVM spelling of lambdas and unnamed types
// ('lambda'(int)), a space between closing template brackets ("> >"),
// clone suffixes as " (.isra.0)", and legacy Rust names (_ZN…17h<hash>E)
// demangled as Itanium names, keeping the hash.
func Demangle(name string) string { return demangleStyle(name, spaceTemplateClose) }

// DemangleLLVM19 is Demangle as llvm-symbolizer 19 prints names: closing
// template brackets without a space between them ("<int>>"). The PE
// symbol sources, held to llvm-symbolizer 19, use it.
func DemangleLLVM19(name string) string {
	return demangleStyle(name, func(s string) string { return s })
}

func demangleStyle(name string, closeStyle func(string) string) string {
	if len(name) < 2 || name[0] != '_' {
		return name
	}
	out := demangle.Filter(name, demangle.LLVMStyle, demangle.NoRust)
	if out == name {
		// The demangle package rejects a suffix after a name with no
		// parameter types ("_ZN…17h…E.llvm.1234", Rust and LTO); LLVM
		// prints it as a clone suffix.
		// Legacy Rust names hold dots themselves ("alloc..boxed"): the
		// suffix starts at the first dot after which the rest demangles.
		if strings.HasPrefix(name, "_Z") {
			for i := 0; i < len(name); i++ {
				if name[i] != '.' {
					continue
				}
				if base := demangle.Filter(name[:i], demangle.LLVMStyle, demangle.NoRust); base != name[:i] {
					return closeStyle(operatorTemplate(base)) + " (" + name[i:] + ")"
				}
			}
		}
		return name
	}
	if strings.HasPrefix(name, "_R") {
		return out
	}
	return closeStyle(operatorTemplate(out))
}

// operatorTemplate removes the space the demangle package puts between
// an operator name ending in '<' and its template arguments
// ("operator< <char>"); LLVM prints "operator<<char>".
func operatorTemplate(s string) string {
	for _, op := range [...]string{"operator< <", "operator<< <", "operator<= <", "operator<<= <"} {
		if strings.Contains(s, op) {
			s = strings.ReplaceAll(s, op, op[:len(op)-2]+"<")
		}
	}
	return s
}

// spaceTemplateClose inserts a space between adjacent '>' that close
// template argument lists, leaving operator>> and operator>>= alone.
func spaceTemplateClose(s string) string {
	if !strings.Contains(s, ">>") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '>' && strings.HasSuffix(s[:i], "operator") {
			// operator>, operator>>, operator>=, operator>>=
			j := i
			for j < len(s) && (s[j] == '>' || s[j] == '=') && j-i < 3 {
				j++
			}
			b.WriteString(s[i:j])
			i = j - 1
			continue
		}
		b.WriteByte(c)
		if c == '>' && i+1 < len(s) && s[i+1] == '>' {
			b.WriteByte(' ')
		}
	}
	return b.String()
}
