// Package tracking is what rawstack's two Linux back ends (packages
// platform/linux/perf and platform/linux/ebpf) share. A back end's
// session embeds a [Tracker] and opens its events; the Tracker turns
// what they carry into [platform.Handler] calls:
//
//   - the processes, threads and modules of what is sampled, from /proc at
//     start and from perf side-band records (MMAP2, COMM, FORK, EXIT)
//     afterwards, each ELF module with its GNU and Go build ids;
//   - the perf ring buffer reader ([Ring]) and the decoding of its
//     records ([DecodeRecord]);
//   - the online unwinder of DWARF and auto modes ([Unwinder]), with the
//     JIT tracker (package platform/linux/jit) and the goroutine reader
//     (package platform/linux/goruntime) that a sample goes through;
//   - [Tracker.Run]'s loop and its wait on the rings, and
//     [Tracker.Launch], which starts a command stopped at exec;
//   - native allocations (Config.Alloc): the allocation sampler
//     (package platform/linux/allocshim) preloaded or injected
//     ([Tracker.PreloadSampler], [Tracker.InjectSampler]), the ring it
//     shares with the recorder, read and merged by the back end's
//     ReadAll ([Tracker.BeginAllocRead], [Tracker.AllocPending],
//     [Tracker.ReportAllocRecord]), and the pairing of a sampled call's
//     stack with its block ([Tracker.AllocEnter], [Tracker.AllocReturn]),
//     in the sample record layout the eBPF programs and the sampler
//     share ([DecodeSampleRecord]).
//
// It also holds the eBPF back end's registration ([RegisterEBPF]), so
// that package platform/linux reaches that back end without importing it.
package tracking
