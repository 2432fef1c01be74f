package pdb_test

import (
	"fmt"
	"log"

	"github.com/rawstack/rawstack/symbolizer/pdb"
)

// Symbolize an RVA of the image testdata/tiny.pdb belongs to (a DLL built
// from testdata/tiny.c): the inlined call comes first, then the function
// that contains the code.
func Example() {
	f, err := pdb.Open("testdata/tiny.pdb")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println("age", f.Age, "modules", len(f.Modules))
	for rva := uint64(0x1000); rva < 0x1100; rva++ {
		frames, err := f.Symbolize(rva, nil)
		if err != nil {
			log.Fatal(err)
		}
		if len(frames) == 2 {
			for _, fr := range frames {
				fmt.Printf("%s line %d\n", fr.Function, fr.Line)
			}
			break
		}
	}
	// Output:
	// age 1 modules 2
	// sq line 7
	// f line 13
}
