// Package procmaps parses /proc/PID/maps, for the Linux back end and for
// snapshots. It is plain text parsing and compiles on every OS.
package procmaps

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Offset     uint64
	Major      uint32
	Minor      uint32
	Inode      uint64
	Path       string
}

// Exec reports whether the mapping is executable.
func (m *Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// MaxLines caps how many lines of a maps file are parsed.
const MaxLines = 1 << 20

// Parse parses the text of /proc/PID/maps. A malformed line is an
// error naming its number.
func Parse(data []byte) ([]Mapping, error) {
	var out []Mapping
	for n := 1; len(data) > 0; n++ {
		if n > MaxLines {
			return out, fmt.Errorf("maps: more than %d lines", MaxLines)
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
		m, err := parseLine(line)
		if err != nil {
			return out, fmt.Errorf("maps line %d: %w", n, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseMapsLine parses "start-end perms offset maj:min inode   path".
func parseLine(line []byte) (Mapping, error) {
	var m Mapping
	f := func() []byte {
		for len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			i = len(line)
		}
		w := line[:i]
		line = line[i:]
		return w
	}
	rng, perms, off, dev, ino := f(), f(), f(), f(), f()
	dash := bytes.IndexByte(rng, '-')
	colon := bytes.IndexByte(dev, ':')
	if dash < 0 || colon < 0 || len(perms) != 4 {
		return m, fmt.Errorf("malformed %q", line)
	}
	var err error
	num := func(b []byte, base, bits int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(string(b), base, bits)
		return v
	}
	m.Start = num(rng[:dash], 16, 64)
	m.End = num(rng[dash+1:], 16, 64)
	m.Offset = num(off, 16, 64)
	m.Major = uint32(num(dev[:colon], 16, 32))
	m.Minor = uint32(num(dev[colon+1:], 16, 32))
	m.Inode = num(ino, 10, 64)
	if err != nil {
		return m, err
	}
	if m.End < m.Start {
		return m, fmt.Errorf("range %#x-%#x ends before it starts", m.Start, m.End)
	}
	m.Perms = string(perms)
	for len(line) > 0 && line[0] == ' ' {
		line = line[1:]
	}
	m.Path = string(line)
	return m, nil
}

// ExecFiles calls f with each executable mapping of a file in the
// /proc/PID/maps of process pid as it is now; false if it could not be
// read. The runtimes' frame readers attach a process found running this
// way.
func ExecFiles(pid uint32, f func(m *Mapping)) bool {
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/maps")
	if err != nil {
		return false
	}
	maps, _ := Parse(data)
	for i := range maps {
		if maps[i].Exec() && maps[i].Path != "" {
			f(&maps[i])
		}
	}
	return true
}
