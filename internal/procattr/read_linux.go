package procattr

import (
	"os"
	"strconv"

	"github.com/rawstack/rawstack/format"
)

func hostID() string {
	for _, f := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(f); err == nil {
			if id := HostIDFromMachineID(b); id != "" {
				return id
			}
		}
	}
	return ""
}

func read(pid int) []format.Label {
	dir := "/proc/" + strconv.Itoa(pid)
	attrs := make([]format.Label, 0, 6)
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		attrs = append(attrs, format.Label{Key: ExecutablePath, Value: exe})
	}
	if b, err := os.ReadFile(dir + "/cgroup"); err == nil {
		c := ParseCgroup(b)
		if c.ID != "" {
			attrs = append(attrs, format.Label{Key: ContainerID, Value: c.ID})
		}
		if c.PodUID != "" {
			attrs = append(attrs, format.Label{Key: PodUID, Value: c.PodUID})
		}
	}
	if b, err := os.ReadFile(dir + "/environ"); err == nil {
		if s := ServiceNameFromEnviron(b); s != "" {
			attrs = append(attrs, format.Label{Key: ServiceName, Value: s})
		}
	}
	return attrs
}
