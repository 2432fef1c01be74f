// Package hotspot names, for a Linux session's sample of a Java thread,
// the thread's Java frames from HotSpot's own data, as the serviceability
// agent (jhsdb) does from outside the process: nothing is asked of the
// target (no -XX:+DumpPerfMapAtExit, no agent).
//
// What the VM's structures look like comes from the VM itself: libjvm
// exports the serviceability tables (gHotSpotVMStructs, gHotSpotVMTypes,
// gHotSpotVMIntConstants, gHotSpotVMLongConstants, and the variables that
// say where each entry keeps its name, offset and size). The VM fills the
// latter at start-up, so the tables are read from the target's memory, at
// its first sample once they are filled, and kept per libjvm. A libjvm
// without them (stripped of its exports) or whose tables lack a field the
// reader needs is refused with its version named: its samples keep
// anonymous frames, and the session warns once.
//
// The walk: the sample's pc, or the first frame of the native stack the
// session unwound, that lies in the code cache (the heaps of
// CodeCache::_heaps) starts it. The CodeBlob holding a pc is found through
// its heap's segment map, as the VM finds it. An nmethod (C1 or C2 code)
// names its frame from its PcDescs and scope descriptors: the PcDesc of
// the call a return address follows (for the leaf, the next PcDesc at or
// after the pc), then the chain of scopes from it, innermost first, each
// with its Method (an index into the nmethod's metadata) and bytecode
// index, so one native frame becomes the chain C2 inlined. An interpreter
// frame has its Method and bytecode pointer in slots below its frame
// pointer. Lines come from each Method's compressed line number table.
// Other blobs are stubs, named by their CodeBlob names. Compiled frames
// keep no frame pointer: the caller's frame is found from the blob's frame
// size; the walk returns the native stack it followed, which the session
// uses in place of its own where that stopped at Java code.
//
// A read never trusts the target: memory is read with process_vm_readv,
// which fails instead of faulting; every size and count is capped, a
// blob's pc must lie in its code, a bytecode pointer in its method's
// bytecodes, and a frame that fails a check is left as the native frame
// it was (anonymous code) and counted ([Stats]). Blobs and methods are
// cached per process; a cached blob's header must still describe it at
// each use. A session's samples read from their ring at one time are one
// batch ([Sampling.Batch]): memory read for one of them is not read again
// for the next.
package hotspot
