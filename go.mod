module github.com/rawstack/rawstack

go 1.26.8

require (
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	golang.org/x/sys v0.49.0
)

require (
	github.com/cilium/ebpf v0.22.0
	github.com/go-delve/delve v1.27.2
	golang.org/x/arch v0.28.0 // indirect
	golang.org/x/telemetry v0.0.0-20241106142447-58a1122356f5 // indirect
	google.golang.org/protobuf v1.36.12 // test: decodes the Perfetto export
)
