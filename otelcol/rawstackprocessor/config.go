package rawstackprocessor

import (
	"errors"
	"time"
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
	// MaxLookupsInFlight bounds the searches running at once, across
	// requests: a module whose search would exceed it stays raw in its
	// request, which does not wait. 0 means 4.
	MaxLookupsInFlight int `mapstructure:"max_lookups_in_flight"`
	// NegativeCacheSize is how many modules searched for and not found
	// are remembered, so that a request naming them again costs no
	// search (nor a lookup of the bounds above); NegativeCacheTTL is how
	// long (a debug file may be uploaded later). 0 means 65536 and 10m.
	NegativeCacheSize int           `mapstructure:"negative_cache_size"`
	NegativeCacheTTL  time.Duration `mapstructure:"negative_cache_ttl"`
	// MaxRequestEntries rejects requests with more entries than this in
	// all: dictionary entries, samples and their values, timestamps and
	// attribute indices, stacks' location indices, locations' lines. The
	// processor's own work and memory for a request (its checks, its
	// tables) grow with these. 0 means 1<<20.
	MaxRequestEntries int `mapstructure:"max_request_entries"`
	// MaxAddedBytes bounds what symbolizing may add to one request: the
	// bytes of the function and file names it adds, and 32 for each line,
	// function and string entry. Frames past the bound stay raw. 0 means
	// 16 MiB.
	MaxAddedBytes int `mapstructure:"max_added_bytes"`
	// RequestTimeout bounds the time one request spends in the processor:
	// a search still running then goes on in the background (its result
	// cached for later requests), and frames not yet named stay raw.
	// 0 means 5s.
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
}

// Validate checks the bounds.
func (c *Config) Validate() error {
	if c.MaxOpenFiles < 0 || c.MaxAddressesPerFile < 0 || c.MaxLocations < 0 || c.MaxIndexedFiles < 0 || c.MaxLookupsPerRequest < 0 || c.MaxLookupsPerSecond < 0 ||
		c.MaxLookupsInFlight < 0 || c.NegativeCacheSize < 0 || c.NegativeCacheTTL < 0 || c.MaxRequestEntries < 0 || c.MaxAddedBytes < 0 || c.RequestTimeout < 0 {
		return errors.New("rawstack processor: max_open_files, max_addresses_per_file, max_locations, max_indexed_files, max_lookups_per_request, max_lookups_per_second, max_lookups_in_flight, negative_cache_size, negative_cache_ttl, max_request_entries, max_added_bytes and request_timeout must not be negative")
	}
	return nil
}

// limits are a Config's bounds with their defaults filled in.
type limits struct {
	maxLocations, maxEntries, maxAdded    int
	maxLookups, inFlight, negSize, maxIdx int
	lookupRate                            float64
	negTTL, timeout                       time.Duration
}

func (c *Config) limits() limits {
	or := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	l := limits{
		maxLocations: or(c.MaxLocations, 1<<20),
		maxEntries:   or(c.MaxRequestEntries, 1<<20),
		maxAdded:     or(c.MaxAddedBytes, 16<<20),
		maxLookups:   or(c.MaxLookupsPerRequest, 256),
		inFlight:     or(c.MaxLookupsInFlight, 4),
		negSize:      or(c.NegativeCacheSize, 65536),
		maxIdx:       or(c.MaxIndexedFiles, 100000),
		lookupRate:   c.MaxLookupsPerSecond,
		negTTL:       c.NegativeCacheTTL,
		timeout:      c.RequestTimeout,
	}
	if l.lookupRate <= 0 {
		l.lookupRate = 64
	}
	if l.negTTL <= 0 {
		l.negTTL = 10 * time.Minute
	}
	if l.timeout <= 0 {
		l.timeout = 5 * time.Second
	}
	return l
}
