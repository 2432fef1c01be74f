package record

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
		be   platform.Backend
		mode platform.UnwindMode
	}{
		{[]string{"--", "true"}, true, platform.BackendPerf, platform.UnwindAuto},
		{[]string{"--backend", "ebpf", "-a", "--duration", "1s"}, true, platform.BackendEBPF, platform.UnwindDWARF},
		{[]string{"--backend", "ebpf", "--unwind", "fp", "--no-jit", "-p", "1"}, true, platform.BackendEBPF, platform.UnwindFP},
		{[]string{"--backend", "bpf", "--", "true"}, false, 0, 0},        // unknown back end
		{[]string{"--backend", "ebpf", "-a", "--", "true"}, false, 0, 0}, // -a and a command
		{[]string{"--backend", "ebpf", "-a", "-p", "1"}, false, 0, 0},    // -a and -p
		{[]string{"--unwind", "fp", "--keep-raw", "--", "true"}, false, 0, 0},
		{[]string{"--duration", "1s", "--", "true"}, false, 0, 0},
		{[]string{"-F", "0", "--", "true"}, false, 0, 0},
		{nil, false, 0, 0},
	} {
		fs := flag.NewFlagSet("record", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := Register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		be, mode, err := f.Check(fs.Args())
		var ue *UsageError
		switch {
		case c.ok && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case !c.ok && !errors.As(err, &ue):
			t.Errorf("%q: error %v, want a usage error", c.args, err)
		case c.ok && (be != c.be || mode != c.mode):
			t.Errorf("%q: back end %v, unwind %v; want %v, %v", c.args, be, mode, c.be, c.mode)
		}
	}
}
