package linux

import "github.com/rawstack/rawstack/internal/procmaps"

// mapping is one line of /proc/PID/maps.
type mapping = procmaps.Mapping

// parseMaps parses the text of /proc/PID/maps; a malformed line is an
// error naming its number.
func parseMaps(data []byte) ([]mapping, error) { return procmaps.Parse(data) }
