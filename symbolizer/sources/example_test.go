package sources_test

import (
	"flag"
	"fmt"

	"github.com/rawstack/rawstack/symbolizer/sources"
)

// A command takes the symbol options every rawstack command takes, and
// hands them on to a companion that symbolizes on its behalf.
func ExampleFlags() {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	var f sources.Flags
	f.Register(fs)
	if err := fs.Parse([]string{"--path-map", "/build=/src", "--debug-dir", "/dbg", "--symbol-path", "srv*/cache*https://msdl.microsoft.com/download/symbols"}); err != nil {
		panic(err)
	}
	o, err := f.Options()
	if err != nil {
		panic(err)
	}
	fmt.Println(o.PathMap, o.DebugDirs, o.SymbolPath)
	fmt.Println(f.Args())
	// Output:
	// [{/build /src}] [/dbg] srv*/cache*https://msdl.microsoft.com/download/symbols
	// [--path-map /build=/src --debug-dir /dbg --symbol-path srv*/cache*https://msdl.microsoft.com/download/symbols -j 2]
}
