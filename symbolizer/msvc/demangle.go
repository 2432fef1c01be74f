// Package msvc demangles Microsoft Visual C++ decorated names ("?f@@YAXH@Z"
// → "void __cdecl f(int)"), the names in PE exports, COFF symbol tables
// and PDB publics. The output matches LLVM's demangler (llvm-undname),
// which llvm-symbolizer uses, so rawstack prints what llvm-symbolizer
// prints.
//
//	s, err := msvc.Demangle("?area@Circle@geo@@UEBANXZ", msvc.Symbolizer)
//	// s == "geo::Circle::area(void) const"
package msvc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Flags leave parts of the top-level symbol out of the output.
type Flags uint

const (
	NoAccessSpecifier   Flags = 1 << iota // "public: "
	NoCallingConvention                   // "__cdecl"
	NoReturnType                          // a function's return type
	NoMemberType                          // "static ", "virtual "
)

// Symbolizer is the flag set llvm-symbolizer demangles with.
const Symbolizer = NoAccessSpecifier | NoCallingConvention | NoReturnType | NoMemberType

// ErrInvalid says a name is not a valid (or supported) decorated name.
var ErrInvalid = errors.New("msvc: invalid mangled name")

// maxDepth caps recursion on nested types and symbols.
const maxDepth = 64

// Demangle demangles a decorated name.
func Demangle(name string, flags Flags) (string, error) {
	p := &parser{s: name, flags: flags}
	out, err := p.symbol(flags)
	if err != nil {
		return "", err
	}
	return out, nil
}

type parser struct {
	s      string
	pos    int
	names  []string // name back-references
	params []typ    // parameter type back-references
	depth  int
	flags  Flags // the caller's; LLVM applies them inside template arguments too
}

// failure unwinds the parser on malformed input.
type failure struct{ msg string }

func (p *parser) fail(format string, args ...any) {
	panic(failure{fmt.Sprintf("offset %d: ", p.pos) + fmt.Sprintf(format, args...)})
}

func (p *parser) peek() byte {
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *parser) next() byte {
	if p.pos >= len(p.s) {
		p.fail("unexpected end")
	}
	c := p.s[p.pos]
	p.pos++
	return c
}

func (p *parser) consume(prefix string) bool {
	if strings.HasPrefix(p.s[p.pos:], prefix) {
		p.pos += len(prefix)
		return true
	}
	return false
}

func (p *parser) enter() {
	p.depth++
	if p.depth > maxDepth {
		p.fail("nesting too deep")
	}
}

func (p *parser) leave() { p.depth-- }

// symbol parses "?" name encoding and renders it.
func (p *parser) symbol(flags Flags) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w %q: %s", ErrInvalid, p.s, f.msg)
		}
	}()
	out = p.symbolBody(flags)
	if p.pos != len(p.s) {
		p.fail("trailing characters")
	}
	return out, nil
}

func (p *parser) symbolBody(flags Flags) string {
	p.enter()
	defer p.leave()
	if !p.consume("?") {
		p.fail("no leading '?'")
	}
	if strings.HasPrefix(p.s[p.pos:], "?_C@") {
		p.fail("string literals are not supported")
	}
	if out, ok := p.specialSymbol(flags); ok {
		return out
	}
	name, fn := p.qualifiedName(true)
	return p.encoding(name, fn, flags)
}

// encoding parses what follows a symbol's name: a variable's type, a
// vftable's qualifiers or a function's signature.
func (p *parser) encoding(name string, fn special, flags Flags) string {
	c := p.peek()
	switch {
	case c >= '0' && c <= '4':
		return p.variable(name, flags)
	case c == '6' || c == '7':
		p.pos++
		q := p.cvChar()
		var b strings.Builder
		writeQuals(&b, q, false)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name)
		var fors []string
		for p.peek() != '@' {
			n, _ := p.qualifiedName(false)
			fors = append(fors, "`"+n+"'")
		}
		p.next()
		if len(fors) > 0 {
			b.WriteString("{for ")
			b.WriteString(strings.Join(fors, ", "))
			b.WriteString("}")
		}
		return b.String()
	}
	return p.function(name, fn, flags)
}

// special describes an operator name that depends on the rest.
type special struct {
	ctor, dtor, conv bool
}

// qualifiedName parses an unqualified name and its scopes up to '@' and
// returns "scope::...::name".
func (p *parser) qualifiedName(symbol bool) (string, special) {
	var sp special
	var first string
	switch {
	case p.consume("?$"):
		// A symbol's own template name is not a back-reference target;
		// a template name in a type's name is.
		first = p.template(!symbol)
	case symbol && p.peek() == '?':
		p.pos++
		first, sp = p.operator()
	default:
		first = p.fragment()
	}
	var scopes []string
	for p.peek() != '@' {
		scopes = append(scopes, p.scopeFragment())
		if len(scopes) > 256 {
			p.fail("too many scopes")
		}
	}
	p.next()
	if sp.ctor || sp.dtor {
		if len(scopes) == 0 {
			p.fail("constructor without a class")
		}
		cls := scopes[0]
		if sp.dtor {
			first = "~" + cls
		} else {
			first = cls
		}
	}
	var b strings.Builder
	for i := len(scopes) - 1; i >= 0; i-- {
		b.WriteString(scopes[i])
		b.WriteString("::")
	}
	b.WriteString(first)
	return b.String(), sp
}

// fragment parses a simple name or a back-reference.
func (p *parser) fragment() string {
	c := p.peek()
	if c >= '0' && c <= '9' {
		p.pos++
		i := int(c - '0')
		if i >= len(p.names) {
			p.fail("name back-reference %d out of range", i)
		}
		return p.names[i]
	}
	end := strings.IndexByte(p.s[p.pos:], '@')
	if end <= 0 {
		p.fail("unterminated name")
	}
	n := p.s[p.pos : p.pos+end]
	p.pos += end + 1
	p.memoName(n)
	return n
}

func (p *parser) memoName(n string) {
	for _, x := range p.names {
		if x == n {
			return
		}
	}
	if len(p.names) < 10 {
		p.names = append(p.names, n)
	}
}

func (p *parser) scopeFragment() string {
	switch {
	case p.consume("?$"):
		return p.template(true)
	case p.consume("?A"):
		// Anonymous namespace: ?A0x<hash>@
		end := strings.IndexByte(p.s[p.pos:], '@')
		if end < 0 {
			p.fail("unterminated anonymous namespace")
		}
		p.pos += end + 1
		return "`anonymous namespace'"
	case p.peek() == '?':
		p.pos++
		if c := p.peek(); c >= '0' && c <= '9' || c >= 'A' && c <= 'P' {
			n := p.number()
			if !p.consume("?") {
				p.fail("bad local scope")
			}
			// The nested symbol shares the name back-references, as in
			// LLVM's demangler.
			sub := &parser{s: p.s[p.pos:], depth: p.depth, names: p.names}
			inner := sub.symbolBody(0)
			p.pos += sub.pos
			p.names = sub.names
			return "`" + inner + "'::`" + strconv.FormatInt(n, 10) + "'"
		}
		p.fail("unsupported scope")
	}
	return p.fragment()
}

// template parses "name@args@" after "?$".
func (p *parser) template(memo bool) string {
	p.enter()
	defer p.leave()
	outerNames, outerParams := p.names, p.params
	p.names, p.params = nil, nil
	var base string
	if p.peek() == '?' {
		p.pos++
		var sp special
		base, sp = p.operator()
		if sp.ctor || sp.dtor {
			p.fail("templated constructors are not supported")
		}
	} else {
		base = p.fragment()
	}
	var args []string
	for !p.consume("@") {
		if a, ok := p.templateArg(); ok {
			args = append(args, a)
		}
		if len(args) > 256 {
			p.fail("too many template arguments")
		}
	}
	p.names, p.params = outerNames, outerParams
	n := base + "<" + strings.Join(args, ", ") + ">"
	if memo {
		p.memoName(n)
	}
	return n
}

func (p *parser) templateArg() (string, bool) {
	switch {
	case p.consume("$$V"), p.consume("$$Z"):
		return "", false
	case p.consume("$0"):
		return strconv.FormatInt(p.number(), 10), true
	case p.consume("$1"):
		sub := &parser{s: p.s[p.pos:], depth: p.depth, flags: p.flags}
		inner := sub.symbolBody(p.flags)
		p.pos += sub.pos
		return "&" + inner, true
	case p.peek() == '?' && p.pos+1 < len(p.s) && (p.s[p.pos+1] >= '0' && p.s[p.pos+1] <= '9'):
		p.pos++
		return fmt.Sprintf("`template-parameter-%d'", p.number()), true
	}
	t := p.typ(true)
	if f, ok := t.(*funcType); ok {
		// A function type argument ("std::function<void __cdecl(int)>")
		// drops its return type and calling convention under the flags.
		var b strings.Builder
		if p.flags&NoReturnType == 0 && f.ret != nil {
			f.ret.pre(&b)
			b.WriteByte(' ')
		}
		if p.flags&NoCallingConvention == 0 {
			b.WriteString(f.cc)
		}
		f.postParams(&b)
		if p.flags&NoReturnType == 0 && f.ret != nil {
			f.ret.post(&b)
		}
		return b.String(), true
	}
	return typeString(t), true
}

// number parses an encoded number: '?' for negative, a digit for 1-10,
// or hex digits A-P terminated by '@'.
func (p *parser) number() int64 {
	neg := p.consume("?")
	c := p.next()
	var v uint64
	switch {
	case c >= '0' && c <= '9':
		v = uint64(c-'0') + 1
	case c >= 'A' && c <= 'P' || c == '@':
		p.pos--
		for n := 0; ; n++ {
			c := p.next()
			if c == '@' {
				break
			}
			if c < 'A' || c > 'P' || n >= 16 {
				p.fail("bad number")
			}
			v = v<<4 | uint64(c-'A')
		}
	default:
		p.fail("bad number")
	}
	if neg {
		return -int64(v)
	}
	return int64(v)
}

// The code tables are arrays indexed by the code byte, not maps: a
// composite literal of constants is laid out by the linker, where a map
// is built by init code (and its heap pages touched) at the start of
// every program that links the demangler, the rawstack CLI included.
var operators = [256]string{
	'2': "operator new", '3': "operator delete", '4': "operator=", '5': "operator>>", '6': "operator<<",
	'7': "operator!", '8': "operator==", '9': "operator!=", 'A': "operator[]", 'C': "operator->",
	'D': "operator*", 'E': "operator++", 'F': "operator--", 'G': "operator-", 'H': "operator+",
	'I': "operator&", 'J': "operator->*", 'K': "operator/", 'L': "operator%", 'M': "operator<",
	'N': "operator<=", 'O': "operator>", 'P': "operator>=", 'Q': "operator,", 'R': "operator()",
	'S': "operator~", 'T': "operator^", 'U': "operator|", 'V': "operator&&", 'W': "operator||",
	'X': "operator*=", 'Y': "operator+=", 'Z': "operator-=",
}

var operators2 = [256]string{
	'0': "operator/=", '1': "operator%=", '2': "operator>>=", '3': "operator<<=", '4': "operator&=",
	'5': "operator|=", '6': "operator^=", '7': "`vftable'", '8': "`vbtable'", '9': "`vcall'",
	'A': "`typeof'", 'B': "`local static guard'", 'D': "`vbase dtor'", 'E': "`vector deleting dtor'",
	'F': "`default ctor closure'", 'G': "`scalar deleting dtor'", 'H': "`vector ctor iterator'",
	'I': "`vector dtor iterator'", 'J': "`vector vbase ctor iterator'", 'K': "`virtual displacement map'",
	'L': "`eh vector ctor iterator'", 'M': "`eh vector dtor iterator'", 'N': "`eh vector vbase ctor iterator'",
	'O': "`copy ctor closure'", 'S': "`local vftable'", 'T': "`local vftable ctor closure'",
	'U': "operator new[]", 'V': "operator delete[]", 'X': "`placement delete closure'",
	'Y': "`placement delete[] closure'",
}

// operator parses the code after '?' of an operator or special name.
func (p *parser) operator() (string, special) {
	c := p.next()
	switch c {
	case '0':
		return "", special{ctor: true}
	case '1':
		return "", special{dtor: true}
	case 'B':
		return "operator", special{conv: true}
	case '_':
		c2 := p.next()
		if c2 == '_' {
			switch p.next() {
			case 'L':
				return "operator co_await", special{}
			case 'M':
				return "operator<=>", special{}
			case 'K':
				return `operator ""` + p.fragment(), special{}
			}
			p.fail("unsupported special name")
		}
		if s := operators2[c2]; s != "" {
			return s, special{}
		}
		p.fail("unsupported special name _%c", c2)
	}
	if s := operators[c]; s != "" {
		return s, special{}
	}
	p.fail("unknown operator %q", c)
	return "", special{}
}

// cvChar parses a qualifier letter A-D.
func (p *parser) cvChar() int {
	switch p.next() {
	case 'A':
		return 0
	case 'B':
		return qConst
	case 'C':
		return qVolatile
	case 'D':
		return qConst | qVolatile
	}
	p.pos--
	p.fail("bad qualifier")
	return 0
}

// extQuals parses the pointer modifiers E (__ptr64, not printed),
// F (__unaligned) and I (__restrict).
func (p *parser) extQuals() int {
	q := 0
	for {
		switch p.peek() {
		case 'E':
		case 'F':
			q |= qUnaligned
		case 'I':
			q |= qRestrict
		default:
			return q
		}
		p.pos++
	}
}

var callingConventions = [256]string{
	'A': "__cdecl", 'B': "__cdecl", 'C': "__pascal", 'D': "__pascal", 'E': "__thiscall", 'F': "__thiscall",
	'G': "__stdcall", 'H': "__stdcall", 'I': "__fastcall", 'J': "__fastcall", 'M': "__clrcall",
	'O': "__eabi", 'Q': "__vectorcall", 'S': "__regcall",
}

func (p *parser) callingConvention() string {
	c := p.next()
	if s := callingConventions[c]; s != "" {
		return s
	}
	p.pos--
	p.fail("unknown calling convention %q", c)
	return ""
}

var primitives = [256]string{
	'C': "signed char", 'D': "char", 'E': "unsigned char", 'F': "short", 'G': "unsigned short",
	'H': "int", 'I': "unsigned int", 'J': "long", 'K': "unsigned long", 'M': "float", 'N': "double",
	'O': "long double", 'X': "void",
}

var primitives2 = [256]string{
	'D': "__int8", 'E': "unsigned __int8", 'F': "__int16", 'G': "unsigned __int16", 'H': "__int32",
	'I': "unsigned __int32", 'J': "__int64", 'K': "unsigned __int64", 'L': "__int128",
	'M': "unsigned __int128", 'N': "bool", 'Q': "char8_t", 'S': "char16_t", 'U': "char32_t", 'W': "wchar_t",
}

// typ parses a type. cvPrefix allows the "?A"-"?D" qualified form of
// return types and template arguments.
func (p *parser) typ(cvPrefix bool) typ {
	p.enter()
	defer p.leave()
	c := p.next()
	switch {
	case c >= '0' && c <= '9':
		i := int(c - '0')
		if i >= len(p.params) {
			p.fail("type back-reference %d out of range", i)
		}
		return p.params[i]
	case c == '_':
		c2 := p.next()
		if s := primitives2[c2]; s != "" {
			return &primType{name: s}
		}
		p.fail("unknown type _%c", c2)
	case c == '?':
		q := p.cvChar()
		t := p.typ(false)
		t.setQuals(q)
		return t
	case c == 'T' || c == 'U' || c == 'V':
		tag := map[byte]string{'T': "union", 'U': "struct", 'V': "class"}[c]
		n, _ := p.qualifiedName(false)
		return &tagType{tag: tag, name: n}
	case c == 'W':
		p.next() // underlying type
		n, _ := p.qualifiedName(false)
		return &tagType{tag: "enum", name: n}
	case c == 'P' || c == 'Q' || c == 'R' || c == 'S' || c == 'A' || c == 'B':
		quals := map[byte]int{'P': 0, 'Q': qConst, 'R': qVolatile, 'S': qConst | qVolatile, 'A': 0, 'B': qVolatile}[c]
		op := "*"
		if c == 'A' || c == 'B' {
			op = "&"
		}
		return p.pointer(op, quals)
	case c == 'Y':
		n := p.number()
		if n < 0 || n > 32 {
			p.fail("bad array rank")
		}
		dims := make([]string, n)
		for i := range dims {
			dims[i] = strconv.FormatInt(p.number(), 10)
		}
		return &arrayType{dims: dims, elem: p.typ(true)}
	case c == '$':
		switch {
		case p.consume("$Q"):
			return p.pointer("&&", 0)
		case p.consume("$R"):
			return p.pointer("&&", qVolatile)
		case p.consume("$C"):
			q := p.cvChar()
			t := p.typ(false)
			t.setQuals(q)
			return t
		case p.consume("$T"):
			return &primType{name: "std::nullptr_t"}
		case p.consume("$B"):
			return p.typ(false) // an array type as a template argument
		case p.consume("$A6"):
			return p.funcType(false)
		}
		p.fail("unsupported type $")
	}
	if s := primitives[c]; s != "" {
		return &primType{name: s}
	}
	p.pos--
	p.fail("unknown type %q", c)
	return nil
}

func (p *parser) pointer(op string, quals int) typ {
	quals |= p.extQuals()
	t := &ptrType{op: op, quals: quals}
	switch p.peek() {
	case '6':
		p.pos++
		t.pointee = p.funcType(false)
		return t
	case '8':
		p.pos++
		t.class, _ = p.qualifiedName(false)
		t.pointee = p.funcType(true)
		return t
	}
	c := p.next()
	var pq int
	switch c {
	case 'A', 'B', 'C', 'D':
		pq = int(c - 'A')
	case 'Q', 'R', 'S', 'T':
		pq = int(c - 'Q')
		t.class, _ = p.qualifiedName(false)
	default:
		p.pos--
		p.fail("bad pointee qualifier %q", c)
	}
	// 'A'..'D' encode none, const, volatile, const volatile.
	quals = []int{0, qConst, qVolatile, qConst | qVolatile}[pq]
	t.pointee = p.typ(false)
	if quals != 0 {
		t.pointee.setQuals(quals)
	}
	return t
}

// funcType parses a function type: [this qualifiers,] calling convention,
// return type, parameters and throw specification.
func (p *parser) funcType(member bool) *funcType {
	f := &funcType{}
	if member {
		f.quals |= p.extQuals()
		f.quals |= p.cvChar()
	}
	f.cc = p.callingConvention()
	if !p.consume("@") {
		f.ret = p.typ(true)
	}
	p.paramList(f)
	p.throwSpec()
	return f
}

func (p *parser) paramList(f *funcType) {
	if p.consume("X") {
		return
	}
	for {
		if p.consume("@") {
			return
		}
		if p.consume("Z") {
			f.variadic = true
			return
		}
		start := p.pos
		t := p.typ(false)
		if p.pos-start > 1 && len(p.params) < 10 {
			p.params = append(p.params, t)
		}
		f.params = append(f.params, t)
		if len(f.params) > 256 {
			p.fail("too many parameters")
		}
	}
}

func (p *parser) throwSpec() {
	if p.consume("_E") {
		return // noexcept
	}
	if !p.consume("Z") {
		p.fail("bad throw specification")
	}
}

// function parses a function's encoding after its name and renders it.
func (p *parser) function(name string, sp special, flags Flags) string {
	c := p.next()
	f := &funcType{}
	member := false
	thunk := int64(-1)
	vtordisp := ""
	switch {
	case c == 'Y' || c == 'Z':
	case c >= 'A' && c <= 'X':
		f.access = []string{"private: ", "protected: ", "public: "}[(c-'A')/8]
		switch (c - 'A') % 8 / 2 {
		case 0:
			member = true
		case 1:
			f.static = true
		case 2:
			member, f.virtual = true, true
		case 3:
			member, f.virtual = true, true
			thunk = p.number()
		}
	case c == '$':
		// Virtual thunks with a vtordisp: $0-$5 (private, protected,
		// public; near and far), then the vtordisp and the adjustment.
		d := p.next()
		if d < '0' || d > '5' {
			p.fail("unsupported thunk kind $%c", d)
		}
		f.access = []string{"private: ", "protected: ", "public: "}[(d-'0')/2]
		member, f.virtual = true, true
		// The numbers are 32-bit: "PPPPPPPM@" is -4.
		vd, adj := int32(uint32(p.number())), int32(uint32(p.number()))
		vtordisp = fmt.Sprintf("`vtordisp{%d, %d}'", vd, adj)
	default:
		p.pos--
		p.fail("unsupported function class %q", c)
	}
	if member {
		f.quals |= p.extQuals()
		switch p.peek() {
		case 'G':
			p.pos++
			f.refQual = "&"
		case 'H':
			p.pos++
			f.refQual = "&&"
		}
		f.quals |= p.cvChar()
	}
	f.cc = p.callingConvention()
	if !p.consume("@") {
		f.ret = p.typ(true)
	}
	p.paramList(f)
	p.throwSpec()

	if sp.conv && f.ret != nil {
		name += " " + typeString(f.ret)
	}
	if thunk >= 0 {
		name += fmt.Sprintf("`adjustor{%d}'", thunk)
	}
	if vtordisp != "" {
		name += vtordisp
	}
	var b strings.Builder
	if thunk >= 0 || vtordisp != "" {
		b.WriteString("[thunk]: ")
	}
	if flags&NoAccessSpecifier == 0 {
		b.WriteString(f.access)
	}
	if flags&NoMemberType == 0 {
		if f.static {
			b.WriteString("static ")
		}
		if f.virtual {
			b.WriteString("virtual ")
		}
	}
	if flags&NoReturnType == 0 && f.ret != nil {
		f.ret.pre(&b)
		b.WriteByte(' ')
	}
	if flags&NoCallingConvention == 0 {
		spaceIfNeeded(&b)
		b.WriteString(f.cc)
	}
	spaceIfNeeded(&b)
	b.WriteString(name)
	f.postParams(&b)
	if flags&NoReturnType == 0 && f.ret != nil {
		f.ret.post(&b)
	}
	return b.String()
}

// variable renders a variable's encoding after its name.
func (p *parser) variable(name string, flags Flags) string {
	c := p.next()
	var b strings.Builder
	if c <= '2' && flags&NoAccessSpecifier == 0 {
		b.WriteString([]string{"private: ", "protected: ", "public: "}[c-'0'])
	}
	if c <= '2' && flags&NoMemberType == 0 {
		b.WriteString("static ")
	}
	t := p.typ(false)
	q := p.extQuals()
	if c := p.peek(); c >= 'Q' && c <= 'T' {
		// Pointer to member: the qualifier names the class again.
		p.pos++
		p.qualifiedName(false)
		q |= []int{0, qConst, qVolatile, qConst | qVolatile}[c-'Q']
	} else {
		q |= p.cvChar()
	}
	if _, isPtr := t.(*ptrType); !isPtr && q != 0 {
		t.setQuals(q)
	}
	t.pre(&b)
	spaceIfNeeded(&b)
	b.WriteString(name)
	t.post(&b)
	return b.String()
}

// specialSymbol handles the special names whose rest is not a plain
// symbol encoding: RTTI descriptors and dynamic initializers/destructors.
func (p *parser) specialSymbol(flags Flags) (string, bool) {
	switch {
	case p.consume("?_R0"):
		t := p.typ(true)
		if !p.consume("@8") {
			p.fail("bad RTTI type descriptor")
		}
		return typeString(t) + " `RTTI Type Descriptor'", true
	case p.consume("?_R1"):
		var nums []string
		for i := 0; i < 4; i++ {
			nums = append(nums, strconv.FormatInt(p.number(), 10))
		}
		n, _ := p.qualifiedName(false)
		if !p.consume("8") {
			p.fail("bad RTTI base class descriptor")
		}
		return n + "::`RTTI Base Class Descriptor at (" + strings.Join(nums, ", ") + ")'", true
	case p.consume("?_R2"), p.consume("?_R3"):
		what := "`RTTI Base Class Array'"
		if p.s[p.pos-1] == '3' {
			what = "`RTTI Class Hierarchy Descriptor'"
		}
		n, _ := p.qualifiedName(false)
		if !p.consume("8") {
			p.fail("bad RTTI descriptor")
		}
		return n + "::" + what, true
	case p.consume("?_R4"):
		n, _ := p.qualifiedName(false)
		return p.encoding(n+"::`RTTI Complete Object Locator'", special{}, flags), true
	case p.consume("?__E"), p.consume("?__F"):
		what := "`dynamic initializer for '"
		if p.s[p.pos-1] == 'F' {
			what = "`dynamic atexit destructor for '"
		}
		var n string
		if p.peek() == '?' {
			sub := &parser{s: p.s[p.pos:], depth: p.depth}
			n = sub.symbolBody(0)
			p.pos += sub.pos
			if !p.consume("@") {
				p.fail("bad dynamic initializer")
			}
		} else {
			n, _ = p.qualifiedName(false)
		}
		return p.encoding(what+n+"''", special{}, flags), true
	}
	return "", false
}
