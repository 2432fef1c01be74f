package snapshot

import (
	"bytes"
	"fmt"
	"strconv"
)

// mapping is one line of /proc/PID/maps. (platform/linux has its own
// parser, unexported; this one is a few lines and keeps the packages
// independent.)
type mapping struct {
	Start, End uint64
	Perms      string
	Offset     uint64
	Inode      uint64
	Path       string
}

func (m *mapping) exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

const maxMapsLines = 1 << 20

// parseMaps parses the text of /proc/PID/maps; a malformed line is an
// error naming its number.
func parseMaps(data []byte) ([]mapping, error) {
	var out []mapping
	for n := 1; len(data) > 0; n++ {
		if n > maxMapsLines {
			return out, fmt.Errorf("maps: more than %d lines", maxMapsLines)
		}
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) == 0 {
			continue
		}
		var m mapping
		fields := bytes.Fields(line)
		if len(fields) < 5 {
			return out, fmt.Errorf("maps line %d: malformed %q", n, line)
		}
		lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
		var err1, err2, err3, err4 error
		m.Start, err1 = strconv.ParseUint(string(lo), 16, 64)
		m.End, err2 = strconv.ParseUint(string(hi), 16, 64)
		m.Offset, err3 = strconv.ParseUint(string(fields[2]), 16, 64)
		m.Inode, err4 = strconv.ParseUint(string(fields[4]), 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || m.End < m.Start {
			return out, fmt.Errorf("maps line %d: malformed %q", n, line)
		}
		m.Perms = string(fields[1])
		// The path is the rest of the line after the inode column: it may
		// hold spaces.
		rest := line
		for i := 0; i < 5; i++ {
			rest = bytes.TrimLeft(rest, " \t")
			if j := bytes.IndexAny(rest, " \t"); j >= 0 {
				rest = rest[j:]
			} else {
				rest = nil
			}
		}
		m.Path = string(bytes.TrimLeft(rest, " \t"))
		out = append(out, m)
	}
	return out, nil
}
