package windows

import (
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/internal/optiontest"
)

func TestCheckConfig(t *testing.T) {
	optiontest.Check(t, checkConfig, platform.Config{},
		"Pid", "Frequency", "StackSize", "NoKernel", "NoJIT", "Unwind", "OffCPU", "NoPython", "SampleG",
		"BuildIDCache", "BuildIDCacheMax", "NoBuildIDCache")
}
