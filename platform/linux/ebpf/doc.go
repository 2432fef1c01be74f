// Package ebpf is the kernel side of rawstack's eBPF back end: the BPF
// programs (bpf/rawstack.bpf.c, compiled by bpf/build.sh into the object
// embedded here; `go generate` rebuilds it, CI checks it is current),
// loaded and attached with github.com/cilium/ebpf. Importing it, for its
// effect, enables [platform.BackendEBPF] in package tracer and
// platform/linux:
//
//	import _ "github.com/rawstack/rawstack/platform/linux/ebpf"
//
// It is a package of its own so that programs that do not sample with
// eBPF (the rawstack command among them; `rawstack record --backend ebpf`
// runs the rawstack-ebpf command) do not link cilium/ebpf and pay its
// package initialisation at start-up. What the programs record and how the
// recorder reads it is documented in package platform/linux. x86-64 only;
// elsewhere importing it changes nothing and the back end reports
// platform.ErrNotSupported.
package ebpf
