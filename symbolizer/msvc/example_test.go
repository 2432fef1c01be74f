package msvc_test

import (
	"fmt"

	"github.com/rawstack/rawstack/symbolizer/msvc"
)

func ExampleDemangle() {
	for _, flags := range []msvc.Flags{0, msvc.Symbolizer} {
		s, err := msvc.Demangle("?area@Circle@geo@@UEBANXZ", flags)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s)
	}
	// Output:
	// public: virtual double __cdecl geo::Circle::area(void) const
	// geo::Circle::area(void) const
}
