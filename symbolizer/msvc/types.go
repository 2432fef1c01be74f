package msvc

import "strings"

// Qualifiers.
const (
	qConst     = 1
	qVolatile  = 2
	qUnaligned = 4
	qRestrict  = 8
)

// typ is a demangled type. Types print as C declarators do: pre is the
// part before the declared name, post the part after ("int (*" and ")[3]").
type typ interface {
	pre(b *strings.Builder)
	post(b *strings.Builder)
	setQuals(q int)
}

// spaceIfNeeded separates a token from the one before it, as LLVM's
// demangler does: after an identifier character or '>'.
func spaceIfNeeded(b *strings.Builder) {
	s := b.String()
	if s == "" {
		return
	}
	c := s[len(s)-1]
	if c == '>' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		b.WriteByte(' ')
	}
}

func writeQuals(b *strings.Builder, q int, spaceBefore bool) {
	for _, x := range []struct {
		bit  int
		name string
	}{{qConst, "const"}, {qVolatile, "volatile"}, {qRestrict, "__restrict"}, {qUnaligned, "__unaligned"}} {
		if q&x.bit == 0 {
			continue
		}
		if spaceBefore {
			b.WriteByte(' ')
		}
		b.WriteString(x.name)
		spaceBefore = true
	}
}

// primType is a builtin type.
type primType struct {
	name  string
	quals int
}

func (t *primType) pre(b *strings.Builder) {
	b.WriteString(t.name)
	writeQuals(b, t.quals, true)
}
func (t *primType) post(*strings.Builder) {}
func (t *primType) setQuals(q int)        { t.quals = q }

// tagType is a class, struct, union or enum.
type tagType struct {
	tag   string
	name  string
	quals int
}

func (t *tagType) pre(b *strings.Builder) {
	b.WriteString(t.tag)
	b.WriteByte(' ')
	b.WriteString(t.name)
	writeQuals(b, t.quals, true)
}
func (t *tagType) post(*strings.Builder) {}
func (t *tagType) setQuals(q int)        { t.quals = q }

// ptrType is a pointer, reference, rvalue reference or pointer to member.
type ptrType struct {
	op      string // "*", "&", "&&"
	quals   int    // of the pointer itself
	class   string // pointer to member of class
	pointee typ
}

func (t *ptrType) pre(b *strings.Builder) {
	if fn, ok := t.pointee.(*funcType); ok {
		fn.preReturn(b)
		spaceIfNeeded(b)
		b.WriteByte('(')
		b.WriteString(fn.cc)
		b.WriteByte(' ')
	} else {
		t.pointee.pre(b)
		spaceIfNeeded(b)
		if _, ok := t.pointee.(*arrayType); ok {
			b.WriteByte('(')
		}
	}
	if t.quals&qUnaligned != 0 {
		b.WriteString("__unaligned ")
	}
	if t.class != "" {
		b.WriteString(t.class)
		b.WriteString("::")
	}
	b.WriteString(t.op)
	writeQuals(b, t.quals&^qUnaligned, false)
}

func (t *ptrType) post(b *strings.Builder) {
	switch t.pointee.(type) {
	case *funcType, *arrayType:
		b.WriteByte(')')
	}
	t.pointee.post(b)
}
func (t *ptrType) setQuals(q int) { t.quals = q }

// arrayType is an array with its dimensions.
type arrayType struct {
	dims  []string
	elem  typ
	quals int
}

func (t *arrayType) pre(b *strings.Builder) { t.elem.pre(b) }
func (t *arrayType) post(b *strings.Builder) {
	for _, d := range t.dims {
		b.WriteByte('[')
		b.WriteString(d)
		b.WriteByte(']')
	}
	t.elem.post(b)
}
func (t *arrayType) setQuals(q int) { t.elem.setQuals(q) }

// funcType is a function signature, as a symbol's type or a pointee.
type funcType struct {
	access   string // "public: " ...
	static   bool
	virtual  bool
	cc       string
	ret      typ // nil for constructors and destructors
	params   []typ
	variadic bool
	noParams bool // no parameter list at all
	quals    int  // of *this
	refQual  string
}

func (t *funcType) preReturn(b *strings.Builder) {
	if t.ret != nil {
		t.ret.pre(b)
	}
}

func (t *funcType) pre(b *strings.Builder) {
	t.preReturn(b)
	if t.ret != nil {
		b.WriteByte(' ')
	}
	b.WriteString(t.cc)
}

func (t *funcType) post(b *strings.Builder) {
	t.postParams(b)
	if t.ret != nil {
		t.ret.post(b)
	}
}

func (t *funcType) postParams(b *strings.Builder) {
	if !t.noParams {
		b.WriteByte('(')
		if len(t.params) == 0 && !t.variadic {
			b.WriteString("void")
		}
		for i, p := range t.params {
			if i > 0 {
				b.WriteString(", ")
			}
			writeType(b, p)
		}
		if t.variadic {
			if len(t.params) > 0 {
				b.WriteString(", ")
			}
			b.WriteString("...")
		}
		b.WriteByte(')')
	}
	writeQuals(b, t.quals, true)
	if t.refQual != "" {
		b.WriteByte(' ')
		b.WriteString(t.refQual)
	}
}
func (t *funcType) setQuals(q int) { t.quals = q }

func writeType(b *strings.Builder, t typ) {
	t.pre(b)
	t.post(b)
}

func typeString(t typ) string {
	var b strings.Builder
	writeType(&b, t)
	return b.String()
}
