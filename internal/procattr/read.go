package procattr

import (
	"os"
	"sync"

	"github.com/rawstack/rawstack/format"
)

// host is made on first use; a package-level sync.OnceValue would be
// closures made by an init function in every command's start.
var (
	hostOnce  sync.Once
	hostAttrs []format.Label
)

func host() []format.Label {
	hostOnce.Do(func() { hostAttrs = hostLabels() })
	return hostAttrs
}

func hostLabels() []format.Label {
	var attrs []format.Label
	if name, err := os.Hostname(); err == nil && name != "" {
		attrs = append(attrs, format.Label{Key: HostName, Value: name})
	}
	if id := hostID(); id != "" {
		attrs = append(attrs, format.Label{Key: HostID, Value: id})
	}
	return attrs
}

// Host returns the attributes of the host the program runs on: host.name
// and, where the OS gives one, host.id.
func Host() []format.Label { return host() }

// Read returns the resource attributes of process pid that the system
// shows now, then the host's ([Host]). What cannot be read (a process
// that exited, an environment that another user's process hides) is
// left out.
func Read(pid int) []format.Label {
	attrs := read(pid)
	return append(attrs, Host()...)
}
