package rawstackprocessor

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
)

// TestSymbolSources: the processor symbolizes through the one entry every
// rawstack command uses (symbolizer/sources), so it names the same module
// kinds as `rawstack report` and `convert`. This file imports no source
// itself: the kinds listed are the ones the processor's imports register.
func TestSymbolSources(t *testing.T) {
	goTool := testbuild.Need(t, "go", "lists the processor's imports")
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), "github.com/rawstack/rawstack/symbolizer/sources") {
		t.Errorf("the processor does not import symbolizer/sources: its symbol sources differ from the CLI's")
	}
	want := []format.ModuleKind{format.ModuleUnknown, format.ModuleELF, format.ModulePE, format.ModuleKernel}
	if got := symbolizer.OpenerKinds(); !slices.Equal(got, want) {
		t.Errorf("the processor opens modules of kinds %v, the CLI %v", got, want)
	}
}
