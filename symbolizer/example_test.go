package symbolizer_test

import (
	"fmt"

	"github.com/rawstack/rawstack/format"

	"github.com/rawstack/rawstack/symbolizer"
)

func ExampleDemangle() {
	fmt.Println(symbolizer.Demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"))
	fmt.Println(symbolizer.Demangle("_RNvCs1234_7mycrate3foo"))
	fmt.Println(symbolizer.Demangle("main"))
	// Output:
	// std::vector<int, std::allocator<int> >::push_back(int const&)
	// mycrate::foo
	// main
}

func ExampleAppendLLVM() {
	frames := []symbolizer.Frame{
		{Function: "sq", File: "/src/t.c", Line: 1, Column: 40}, // inlined into f
		{Function: "f", File: "/src/t.c", Line: 2, Column: 23},
	}
	fmt.Print(string(symbolizer.AppendLLVM(nil, frames)))
	fmt.Print(string(symbolizer.AppendLLVM(nil, nil))) // nothing known
	// Output:
	// sq
	// /src/t.c:1:40
	// f
	// /src/t.c:2:23
	//
	// ??
	// ??:0:0
	//
}

func ExampleModule_Relative() {
	// libfoo.so's text segment (file offset 0x1000, link address 0x1000)
	// mapped at 0x7f0000001000.
	m := &symbolizer.Module{}
	m.Kind, m.Base, m.Size, m.FileOffset = format.ModuleELF, 0x7f0000001000, 0x2000, 0x1000
	rel, ok := m.Relative(0x7f0000001234, []symbolizer.Segment{{Off: 0x1000, FileSize: 0x2000, Vaddr: 0x1000}})
	fmt.Printf("%#x %v\n", rel, ok)
	// Output: 0x1234 true
}
