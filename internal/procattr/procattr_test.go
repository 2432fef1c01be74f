package procattr

import "testing"

const (
	cid = "3f9a1c0b2e7d4a5b8c6f0e1d2c3b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f7"
	uid = "7b3c5e2a-1d4f-4c8b-9e6a-0f1b2c3d4e5f"
)

// TestParseCgroup reads /proc/PID/cgroup files in the forms the runtimes
// write them (copied from such hosts, ids replaced).
func TestParseCgroup(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       Container
	}{
		{"docker, cgroup v1", "12:pids:/docker/" + cid + "\n11:memory:/docker/" + cid + "\n1:name=systemd:/docker/" + cid + "\n", Container{ID: cid}},
		{"docker, cgroup v2 (systemd driver)", "0::/system.slice/docker-" + cid + ".scope\n", Container{ID: cid}},
		{"docker, cgroup v2 (cgroupfs driver)", "0::/docker/" + cid + "\n", Container{ID: cid}},
		{"docker in a hybrid host", "4:memory:/system.slice/docker-" + cid + ".scope\n0::/system.slice/docker-" + cid + ".scope\n", Container{ID: cid}},
		{"containerd (nerdctl), v2", "0::/system.slice/nerdctl-" + cid + ".scope\n", Container{ID: cid}},
		{"containerd namespace, v1", "3:cpu,cpuacct:/default/" + cid + "\n", Container{ID: cid}},
		{"podman rootful, v2", "0::/machine.slice/libpod-" + cid + ".scope\n", Container{ID: cid}},
		{"podman rootless, v2", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid + ".scope/container\n", Container{ID: cid}},
		{"podman cgroupfs", "0::/libpod_parent/libpod-" + cid + "\n", Container{ID: cid}},
		{"podman conmon is no container", "0::/machine.slice/libpod-conmon-" + cid + ".scope\n", Container{}},
		{"k8s containerd, systemd driver, v2",
			"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7b3c5e2a_1d4f_4c8b_9e6a_0f1b2c3d4e5f.slice/cri-containerd-" + cid + ".scope\n",
			Container{ID: cid, PodUID: uid}},
		{"k8s cri-o, systemd driver, v2",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7b3c5e2a_1d4f_4c8b_9e6a_0f1b2c3d4e5f.slice/crio-" + cid + ".scope\n",
			Container{ID: cid, PodUID: uid}},
		{"k8s guaranteed class, systemd", "0::/kubepods.slice/kubepods-pod7b3c5e2a_1d4f_4c8b_9e6a_0f1b2c3d4e5f.slice/cri-containerd-" + cid + ".scope\n",
			Container{ID: cid, PodUID: uid}},
		{"k8s docker, cgroupfs driver, v1",
			"11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n10:cpu,cpuacct:/kubepods/burstable/pod" + uid + "/" + cid + "\n",
			Container{ID: cid, PodUID: uid}},
		{"k8s cri-o, cgroupfs, v1", "5:pids:/kubepods/besteffort/pod" + uid + "/crio-" + cid + "\n", Container{ID: cid, PodUID: uid}},
		{"k8s pod sandbox level only", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7b3c5e2a_1d4f_4c8b_9e6a_0f1b2c3d4e5f.slice\n", Container{PodUID: uid}},
		{"host process, v2", "0::/user.slice/user-0.slice/session-3.scope\n", Container{}},
		{"host process, v1 hybrid", "9:name=systemd:/\n4:memory:/process_api/e70d305d0a28814c077e176e7f13f951\n0::/\n", Container{}},
		{"upper-case is not an id", "0::/docker/" + "3F9A1C0B2E7D4A5B8C6F0E1D2C3B4A5968778695A4B3C2D1E0F1A2B3C4D5E6F7" + "\n", Container{}},
		{"63 digits", "0::/docker/" + cid[1:] + "\n", Container{}},
		{"garbage", "no colons here\n::\n\x00\n", Container{}},
	} {
		if got := ParseCgroup([]byte(c.file)); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestServiceNameFromEnviron(t *testing.T) {
	for _, c := range []struct{ env, want string }{
		{"PATH=/bin\x00OTEL_SERVICE_NAME=checkout\x00HOME=/root\x00", "checkout"},
		{"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod,service.name=cart%20api\x00", "cart api"},
		{"OTEL_RESOURCE_ATTRIBUTES=service.name=cart\x00OTEL_SERVICE_NAME=checkout\x00", "checkout"}, // the name wins
		{"OTEL_SERVICE_NAME=\x00", ""},
		{"XOTEL_SERVICE_NAME=no\x00", ""},
		{"OTEL_RESOURCE_ATTRIBUTES=service.name=bad%zz\x00", "bad%zz"},
		{"", ""},
	} {
		if got := ServiceNameFromEnviron([]byte(c.env)); got != c.want {
			t.Errorf("%q: %q, want %q", c.env, got, c.want)
		}
	}
}

func TestHostIDFromMachineID(t *testing.T) {
	for in, want := range map[string]string{
		"3d1219c7c4c5404aaa1f6d2a48adfda4\n": "3d1219c7c4c5404aaa1f6d2a48adfda4",
		"uninitialized\n":                    "",
		"":                                   "",
	} {
		if got := HostIDFromMachineID([]byte(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7b3c5e2a_1d4f_4c8b_9e6a_0f1b2c3d4e5f.slice/cri-containerd-" + cid + ".scope\n"))
	f.Add([]byte("12:pids:/docker/" + cid + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := ParseCgroup(b)
		if c.ID != "" && (len(c.ID) != 64 || !isHex(c.ID)) {
			t.Fatalf("container id %q", c.ID)
		}
		if c.PodUID != "" && !isUUID(c.PodUID) {
			t.Fatalf("pod uid %q", c.PodUID)
		}
	})
}
