// Package rawstackprocessor is an OpenTelemetry Collector processor that
// symbolizes raw OTLP profiles — locations with an address and a mapping
// that carries a GNU build id (process.executable.build_id.gnu), as
// `rawstack record --otlp-raw` and the OpenTelemetry eBPF profiler send
// them — with rawstack's symbolizer: debug files found by build id in
// directories and on debuginfod servers, ELF symbol tables, DWARF with
// inlined functions, Go's pclntab. Hosts send raw stacks; the collector,
// which holds the debug files, names them once for the whole fleet.
//
// Mappings without a GNU build id are found by
// process.executable.build_id.htlhash among the files of htlhash_dirs.
// Windows (PE) mappings carry rawstack's attributes rawstack.pe.code_id,
// rawstack.pdb.guid_age and rawstack.pdb.path (the semantic conventions
// define none for PE; see symbolizer/export/otlp): their images and PDBs
// are found by that identity in debug_dirs and along symbol_path (symbol
// stores and symbol servers, _NT_SYMBOL_PATH syntax) and read with PDB,
// DWARF and COFF symbols, as `rawstack report` reads them.
//
// Locations that already have lines, kernel frames (named on the host,
// whose kallsyms they need), and addresses it cannot resolve pass
// through untouched. A request whose indices point
// outside its dictionary is rejected as a permanent error, so the
// receiver answers InvalidArgument and nothing downstream sees it.
//
// Every build id a request names may cost a search (disk, debuginfod,
// symbol servers), and a sender can name any number of them: a request
// searches for at most max_lookups_per_request new modules (256), and all
// requests together for max_lookups_per_second (64, bursts of 1024). A
// module searched for once, found or not, costs nothing while it stays in
// the cache of max_open_files entries; frames of modules over the bounds
// stay raw in that request and are named when a later one repeats them.
package rawstackprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"
)

// Type is the processor's name in Collector configurations.
var Type = component.MustNewType("rawstack")

// NewFactory returns the processor's factory.
func NewFactory() xprocessor.Factory {
	return xprocessor.NewFactory(Type, func() component.Config { return &Config{} },
		xprocessor.WithProfiles(createProfiles, component.StabilityLevelDevelopment))
}

func createProfiles(ctx context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	p := newSymbolizer(cfg.(*Config), set.Logger)
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, p.process,
		xprocessorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}),
		xprocessorhelper.WithShutdown(func(context.Context) error { return p.res.Close() }))
}
