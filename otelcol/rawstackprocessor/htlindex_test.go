package rawstackprocessor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// TestHTLHashIndex: a binary without a GNU build id (linked with
// --build-id=none, as stripped and some distributions' binaries are) is
// recorded; its mapping carries only the htlhash. The processor finds
// it in htlhash_dirs by hashing the files there and names the chain;
// without the directory the frames pass through raw.
func TestHTLHashIndex(t *testing.T) {
	needPerf(t)
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id=none", "-o", "{dir}/chain-noid", "{in0}"},
		Inputs: []string{"../../tracer/testdata/chain.c"},
		Out:    "chain-noid",
	})
	raw, _ := rawRequest(t, bin)
	d := raw.Dictionary()
	hasHTL, hasGNU := false, false
	for _, m := range d.MappingTable().All() {
		if filepath.Base(d.StringTable().At(int(m.FilenameStrindex()))) != "chain-noid" {
			continue
		}
		for _, ai := range m.AttributeIndices().All() {
			switch d.StringTable().At(int(d.AttributeTable().At(int(ai)).KeyStrindex())) {
			case otlp.AttrBuildIDHTLHash:
				hasHTL = true
			case otlp.AttrBuildIDGNU:
				hasGNU = true
			}
		}
	}
	if !hasHTL || hasGNU {
		t.Fatalf("the fixture's mapping: htlhash %v, GNU build id %v; want only the htlhash", hasHTL, hasGNU)
	}
	// A directory of the fleet's binaries, with unrelated files around.
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string][]byte{"srv/app/v1/chain-noid": data, "srv/app/README": []byte("not a binary"), "other/empty": nil} {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := func(cfg *Config) (chain, total int) {
		p := pprofile.NewProfiles()
		raw.CopyTo(p)
		out, err := newSymbolizer(cfg, zap.NewNop()).process(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		od := out.Dictionary()
		for _, rp := range out.ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, s := range pr.Samples().All() {
						n := s.TimestampsUnixNano().Len()
						total += n
						if strings.Contains(stackNames(od, s.StackIndex()), "c;b;a;main") {
							chain += n
						}
					}
				}
			}
		}
		return chain, total
	}
	chain, total := names(&Config{HTLHashDirs: []string{dir}})
	t.Logf("with htlhash_dirs: %d of %d samples under c;b;a;main", chain, total)
	if chain < total/2 {
		t.Errorf("only %d of %d samples named c;b;a;main through the htlhash index", chain, total)
	}
	if chain, _ := names(&Config{}); chain != 0 {
		t.Errorf("without htlhash_dirs %d samples were named", chain)
	}
}
