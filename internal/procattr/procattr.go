// Package procattr finds the OpenTelemetry resource attributes of a
// process where the recorder runs, for its Process events (format
// SPEC §6.1): the executable's path, the container and Kubernetes pod it
// runs in (from its cgroup path), the service it names through
// OTEL_SERVICE_NAME, and the host's name and id. A Collector's
// k8sattributes processor then adds pod names and labels by container.id
// or k8s.pod.uid.
//
// The parsers are pure and compiled everywhere; [Read] reads /proc on
// Linux and returns the host's attributes alone elsewhere.
package procattr

import (
	"bufio"
	"bytes"
	"strings"
)

// Attribute names, from the OpenTelemetry semantic conventions.
const (
	ExecutablePath = "process.executable.path"
	ContainerID    = "container.id"
	PodUID         = "k8s.pod.uid"
	ServiceName    = "service.name"
	HostName       = "host.name"
	HostID         = "host.id"
)

// Container is what a cgroup path says about the container a process
// runs in; empty fields are unknown.
type Container struct {
	ID     string // the runtime's container id: 64 lower-case hex digits
	PodUID string // the Kubernetes pod's uid, with dashes
}

// container runtimes' prefixes of a container's cgroup (systemd scope
// names, cgroupfs directories); "conmon" cgroups hold podman's and
// cri-o's monitor, not the container.
var runtimePrefixes = []string{"docker-", "cri-containerd-", "crio-", "libpod-", "containerd-", "nerdctl-"}

// ParseCgroup reads a /proc/PID/cgroup file (cgroup v1: one line per
// hierarchy, "ID:controllers:path"; v2: the line "0::path") and returns
// the container and pod its paths name. It knows the path forms of
// Docker (/docker/ID, docker-ID.scope), containerd and nerdctl
// (cri-containerd-ID.scope, /NAMESPACE/ID, nerdctl-ID.scope), CRI-O
// (crio-ID.scope, crio-ID), podman (libpod-ID.scope, /libpod_parent/libpod-ID)
// and Kubernetes' pod cgroups (/kubepods/CLASS/podUID/ID with the cgroupfs
// driver, kubepods-CLASS-podUID.slice with systemd, where the uid's dashes
// are underscores). The first line that names a container wins.
func ParseCgroup(data []byte) Container {
	var found Container
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		// ID:controllers:path; the path may itself hold colons.
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		c := parsePath(path)
		if found.PodUID == "" {
			found.PodUID = c.PodUID
		}
		if c.ID != "" {
			found.ID = c.ID
			if c.PodUID != "" {
				found.PodUID = c.PodUID
			}
			return found
		}
	}
	return found
}

func parsePath(path string) Container {
	var c Container
	for _, el := range strings.Split(path, "/") {
		if uid := podUID(el); uid != "" {
			c.PodUID = uid
			continue
		}
		if id := containerID(el); id != "" {
			c.ID = id // the innermost wins
		}
	}
	return c
}

// containerID returns the container id a cgroup path element names.
func containerID(el string) string {
	el = strings.TrimSuffix(el, ".scope")
	if strings.Contains(el, "conmon") {
		return ""
	}
	for _, p := range runtimePrefixes {
		if s, ok := strings.CutPrefix(el, p); ok {
			el = s
			break
		}
	}
	if len(el) == 64 && isHex(el) {
		return el
	}
	return ""
}

// podUID returns the pod uid a Kubernetes pod cgroup element names:
// "pod" then the uid (cgroupfs), or "kubepods[-CLASS]-pod" then the uid
// with underscores for dashes, then ".slice" (systemd).
func podUID(el string) string {
	if s, ok := strings.CutSuffix(el, ".slice"); ok {
		i := strings.LastIndex(s, "-pod")
		if !strings.HasPrefix(s, "kubepods") || i < 0 {
			return ""
		}
		el = "pod" + strings.ReplaceAll(s[i+len("-pod"):], "_", "-")
	}
	uid, ok := strings.CutPrefix(el, "pod")
	if !ok || !isUUID(uid) {
		return ""
	}
	return uid
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isUUID reports whether s is 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if !isHex(s[i : i+1]) {
			return false
		}
	}
	return true
}

// ServiceNameFromEnviron returns OTEL_SERVICE_NAME from a
// /proc/PID/environ file (NUL-separated KEY=VALUE), or, failing that, the
// service.name of OTEL_RESOURCE_ATTRIBUTES (comma-separated key=value,
// percent-encoded values), as OpenTelemetry SDKs read them: the former
// wins. "" when neither names one.
func ServiceNameFromEnviron(environ []byte) string {
	var fromAttrs string
	for _, kv := range bytes.Split(environ, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case "OTEL_SERVICE_NAME":
			if len(v) > 0 {
				return string(v)
			}
		case "OTEL_RESOURCE_ATTRIBUTES":
			for _, a := range strings.Split(string(v), ",") {
				ak, av, ok := strings.Cut(a, "=")
				if ok && strings.TrimSpace(ak) == ServiceName {
					fromAttrs = unescape(strings.TrimSpace(av))
				}
			}
		}
	}
	return fromAttrs
}

// unescape decodes the %XX escapes of an OTEL_RESOURCE_ATTRIBUTES value;
// a malformed escape is kept as it is.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHexAny(s[i+1]) && isHexAny(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHexAny(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// HostIDFromMachineID returns host.id from the contents of
// /etc/machine-id (32 hex digits and a newline), "" if malformed.
func HostIDFromMachineID(data []byte) string {
	s := strings.TrimSpace(string(data))
	if len(s) != 32 || !isHex(strings.ToLower(s)) {
		return ""
	}
	return s
}
