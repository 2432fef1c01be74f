package record

import (
	"errors"
	"io"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// TestAgentFlags: agent refuses what does not fit a whole-host daemon
// before it starts anything, and hands a good command line to the
// program that links the eBPF back end, unchanged.
func TestAgentFlags(t *testing.T) {
	notLinked := func(platform.Backend) bool { return false }
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--otlp-endpoint", "h:4317"}, true},
		{[]string{"--otlp-endpoint", "h:4317", "-F", "100", "--off-cpu", "--verbose", "--otlp-raw=false", "--duration", "1m"}, true},
		{nil, false}, // no endpoint
		{[]string{"--otlp-endpoint", "h:4317", "-o", "t.rawstack"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "-p", "1"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "--backend", "perf"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "--keep-raw"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "--unwind", "auto"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "-F", "0"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "--otlp-queue", "0"}, false},
		{[]string{"--otlp-endpoint", "h:4317", "--", "true"}, false},
	} {
		var delegated []string
		err := AgentMain(c.args, io.Discard, io.Discard, notLinked, func(args []string) error { delegated = args; return nil })
		var ue *UsageError
		switch {
		case c.ok && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.ok && len(delegated) != len(c.args):
			t.Errorf("%q: delegated %q", c.args, delegated)
		case !c.ok && !errors.As(err, &ue):
			t.Errorf("%q: error %v, want a usage error", c.args, err)
		}
	}
}
