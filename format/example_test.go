package format_test

import (
	"bytes"
	"fmt"
	"io"

	"github.com/rawstack/rawstack/format"
)

func Example() {
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		panic(err)
	}
	w.WriteStack(1, []uint64{0x401136, 0x401182, 0x4011c0})
	w.WriteSample(format.Sample{Time: 1000, Pid: 7, Tid: 7, CPU: 0, Weight: 1, Stack: 1})
	w.WriteSample(format.Sample{Time: 2000, Pid: 7, Tid: 8, CPU: 1, Weight: 1, Stack: 1})
	if err := w.Close(); err != nil {
		panic(err)
	}

	r, err := format.NewReader(&buf)
	if err != nil {
		panic(err)
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(format.DumpEvent(ev))
	}
	// Output:
	// Stack id=1 [0x401136 0x401182 0x4011c0]
	// Sample t=1000 pid=7 tid=7 cpu=0 weight=1 stack=1 flags=0x0
	// Sample t=2000 pid=7 tid=8 cpu=1 weight=1 stack=1 flags=0x0
}
