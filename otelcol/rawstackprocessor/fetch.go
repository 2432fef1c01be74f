package rawstackprocessor

// The processor downloads from the configured debuginfod servers in
// process (the rawstack CLI uses a companion instead).
import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
