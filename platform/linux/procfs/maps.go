package procfs

import "github.com/rawstack/rawstack/internal/procmaps"

// Mapping is one line of /proc/PID/maps.
type Mapping = procmaps.Mapping

// ParseMaps parses the text of /proc/PID/maps; a malformed line is an
// error naming its number.
func ParseMaps(data []byte) ([]Mapping, error) { return procmaps.Parse(data) }
