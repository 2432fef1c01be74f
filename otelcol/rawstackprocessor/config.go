package rawstackprocessor

import (
	"errors"
)

// Config configures the processor. In a Collector configuration:
//
//	processors:
//	  rawstack:
//	    debug_dirs: [/srv/debug]               # DIR/.build-id/xx/rest.debug
//	    debuginfod_urls: [https://debuginfod.example.org]
//	    symbol_path: srv*/srv/symcache*https://symbols.example.org   # Windows PDBs and images
//	    max_open_files: 64
type Config struct {
	// DebugDirs are searched for debug files by GNU build id
	// (DIR/.build-id/xx/rest.debug), before /usr/lib/debug.
	DebugDirs []string `mapstructure:"debug_dirs"`
	// DebuginfodURLs are debuginfod servers asked for debug files by
	// build id. Empty means none (DEBUGINFOD_URLS is not consulted, so a
	// collector does not reach out unless configured to).
	DebuginfodURLs []string `mapstructure:"debuginfod_urls"`
	// DebuginfodCache is where downloads are kept; "" means the user
	// cache directory.
	DebuginfodCache string `mapstructure:"debuginfod_cache"`
	// SymbolPath is where PE (Windows) modules' images and PDBs are
	// searched after DebugDirs, by code id and by PDB GUID and age, in
	// _NT_SYMBOL_PATH syntax: local symbol stores and symbol servers
	// ("srv*/var/cache/symbols*https://msdl.microsoft.com/download/symbols").
	// Empty means the collector's _NT_SYMBOL_PATH, if set.
	SymbolPath string `mapstructure:"symbol_path"`
	// SymbolCache is where downloads of symbol-path elements that name no
	// cache go; "" means the user cache directory's rawstack/symbols.
	SymbolCache string `mapstructure:"symbol_cache"`
	// HTLHashDirs are directories whose files are indexed by
	// process.executable.build_id.htlhash (the hash of a file's first and
	// last 4 KiB and length) when the first mapping without a file
	// arrives: for binaries without a GNU build id (Alpine's, stripped
	// ones), which cannot be found in a .build-id tree. Every regular
	// file under them is hashed once, at most MaxIndexedFiles.
	HTLHashDirs []string `mapstructure:"htlhash_dirs"`
	// MaxIndexedFiles bounds the files hashed for HTLHashDirs; 0 means
	// 100000.
	MaxIndexedFiles int `mapstructure:"max_indexed_files"`
	// UseRecordedPaths also opens binaries at the paths the hosts
	// recorded (checked against the build id). Leave it off unless the
	// collector shares the hosts' file systems: a host names the path.
	UseRecordedPaths bool `mapstructure:"use_recorded_paths"`
	// MaxOpenFiles bounds the debug files kept open (least recently used
	// are closed first); 0 means 64.
	MaxOpenFiles int `mapstructure:"max_open_files"`
	// MaxAddressesPerFile bounds the answers remembered per file; 0
	// means 65536.
	MaxAddressesPerFile int `mapstructure:"max_addresses_per_file"`
	// MaxLocations rejects requests with more locations than this; 0
	// means 1<<20.
	MaxLocations int `mapstructure:"max_locations"`
	// MaxLookupsPerRequest bounds the module files one request may make
	// the processor search for (debug directories, debuginfod, symbol
	// servers): a sender can name any number of build ids. Modules past
	// the bound, or past MaxLookupsPerSecond, keep their frames raw in
	// this request and are searched for when a later request names them.
	// A module already searched for (found or not, and still cached)
	// costs nothing. 0 means 256.
	MaxLookupsPerRequest int `mapstructure:"max_lookups_per_request"`
	// MaxLookupsPerSecond bounds searches over time, across requests and
	// senders, with bursts up to 1024; 0 means 64.
	MaxLookupsPerSecond float64 `mapstructure:"max_lookups_per_second"`
}

// Validate checks the bounds.
func (c *Config) Validate() error {
	if c.MaxOpenFiles < 0 || c.MaxAddressesPerFile < 0 || c.MaxLocations < 0 || c.MaxIndexedFiles < 0 || c.MaxLookupsPerRequest < 0 || c.MaxLookupsPerSecond < 0 {
		return errors.New("rawstack processor: max_open_files, max_addresses_per_file, max_locations, max_indexed_files, max_lookups_per_request and max_lookups_per_second must not be negative")
	}
	return nil
}
