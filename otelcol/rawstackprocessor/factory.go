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
// Locations that already have lines (kernel frames, named on the host
// from its kallsyms; JIT and Python frames, named on the host from the
// process's perf maps and memory), and addresses it cannot resolve pass
// through untouched.
//
// Every request is treated as hostile. One that breaks the OTLP profiles
// conformance rules (internal/otlpcheck: an index out of range in any
// table, a duplicate or orphan entry, a mapping that ends before it
// starts, ...) or is larger than max_locations or max_request_entries is
// rejected as a permanent error before any other work, so the receiver
// answers InvalidArgument (which tells the sender not to retry) and
// nothing downstream sees it. What the processor adds to a request keeps
// it conforming, and is bounded by max_added_bytes and request_timeout.
//
// Every build id a request names may cost a search (disk, debuginfod,
// symbol servers), and a sender can name any number of them: a request
// searches for at most max_lookups_per_request new modules (256), all
// requests together for max_lookups_per_second (64, bursts of 1024), at
// most max_lookups_in_flight at once (4). A module searched for and not
// found is remembered for negative_cache_ttl (10m; at most
// negative_cache_size, 65536); one found costs nothing while it stays in
// the cache of max_open_files entries; frames of modules over the bounds
// stay raw in that request and are named when a later one repeats them.
// What it logs per request (refusals, bounds reached, modules it cannot
// read) is rate-limited to a line per kind every 10 s.
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
