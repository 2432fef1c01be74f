package sources_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

// TestKinds: the sources name ELF (and modules of unknown kind), PE and
// kernel modules.
func TestKinds(t *testing.T) {
	want := []format.ModuleKind{format.ModuleUnknown, format.ModuleELF, format.ModulePE, format.ModuleKernel}
	if got := sources.Kinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, want %v", got, want)
	}
}

// listed is one package of `go list`: its import path, its dependencies
// and its non-test Go files.
type listed struct {
	path  string
	deps  map[string]bool
	files []string
}

func goList(t *testing.T, dir string, pkgs ...string) []listed {
	t.Helper()
	goTool := testbuild.Need(t, "go", "lists the module's packages")
	c := exec.Command(goTool, append([]string{"list", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \" \"}}|{{join .Deps \" \"}}"}, pkgs...)...)
	c.Dir = dir
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	var ps []listed
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(l, "|", 4)
		if len(f) != 4 {
			t.Fatalf("go list: %q", l)
		}
		p := listed{path: f[0], deps: map[string]bool{}}
		for _, n := range strings.Fields(f[2]) {
			p.files = append(p.files, filepath.Join(f[1], n))
		}
		for _, d := range strings.Fields(f[3]) {
			p.deps[d] = true
		}
		ps = append(ps, p)
	}
	return ps
}

const sourcesPkg = "github.com/rawstack/rawstack/symbolizer/sources"

var (
	// A package that builds profiles or resolves addresses of a trace's
	// modules uses the opener registry.
	usesRegistry = regexp.MustCompile(`symbolizer\.(Build|NewResolver)\(`)
	registers    = regexp.MustCompile(`symbolizer\.RegisterOpener\(`)
)

// checkOneEntry fails t unless every package of pkgs (listed in dir) that
// symbolizes a trace links symbolizer/sources, and every package that
// registers an opener is one sources links: then every consumer has the
// same sources, and a new one added to sources reaches them all.
func checkOneEntry(t *testing.T, dir string, pkgs ...string) {
	srcDeps := goList(t, ".", ".")[0].deps
	for _, p := range goList(t, dir, pkgs...) {
		for _, f := range p.files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if registers.Match(b) && p.path != "github.com/rawstack/rawstack/symbolizer" && !srcDeps[p.path] {
				t.Errorf("%s registers a symbol source that symbolizer/sources does not link: import it there", p.path)
			}
			if usesRegistry.Match(b) && p.path != sourcesPkg && p.path != "github.com/rawstack/rawstack/symbolizer" && !p.deps[sourcesPkg] {
				t.Errorf("%s symbolizes traces (%s) without symbolizer/sources: it names fewer modules than the other commands", p.path, filepath.Base(f))
			}
		}
	}
}

// TestOneEntry runs checkOneEntry over the module: report, convert and
// view (cmd/rawstack), the OTLP companion and exporter, the examples.
// The Collector processor, a module of its own, checks its imports in its
// own tests (TestSymbolSources).
func TestOneEntry(t *testing.T) {
	checkOneEntry(t, "../..", "./...")
}
