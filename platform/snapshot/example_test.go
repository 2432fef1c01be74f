package snapshot_test

import (
	"fmt"
	"os"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/snapshot"
)

// Print the stacks of every thread of a process, as absolute addresses
// with the module each falls in. A host that snapshots repeatedly keeps a
// TableCache, so each library's unwind table is read once.
func ExampleProcess() {
	cache := snapshot.NewTableCache()
	snap, err := snapshot.Process(1234, &snapshot.Options{Tables: cache})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range snap.Threads {
		fmt.Printf("TID %d (%s):\n", t.Tid, t.Name)
		for i, pc := range t.PCs {
			if m := snap.Module(pc); m != nil && m.HaveBias {
				fmt.Printf("#%d %#x %s+%#x\n", i, pc, m.Path, pc-m.Bias)
			} else {
				fmt.Printf("#%d %#x\n", i, pc)
			}
		}
	}
}

// Turn a core dump into an event stream that the offline tools
// (rawstack report, the symbolizer) read.
func ExampleCore() {
	snap, err := snapshot.Core("core.1234", &snapshot.Options{Exe: "/usr/local/bin/server"})
	if err != nil {
		fmt.Println(err)
		return
	}
	f, err := os.Create("core.rawstack")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	w, err := format.NewWriter(f, snap.Header(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := snap.Write(w); err != nil {
		fmt.Println(err)
	}
	w.Close()
}
