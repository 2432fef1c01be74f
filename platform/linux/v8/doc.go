// Package v8 names, for a Linux session's sample of a Node.js thread, the
// thread's JavaScript frames from V8's own data, as the OpenTelemetry
// eBPF profiler and llnode do: nothing is asked of the target (no
// --perf-basic-prof, no inspector).
//
// What V8's objects look like comes from the binary: every Node.js build
// exports V8's post-mortem metadata, the v8dbg_ symbols (class field
// offsets, instance types, frame slots, tags), read once per binary
// ([Find]). The few fields V8 11's metadata lost are placed from their
// neighbours, for the versions they were read from; a build outside them
// is refused with its version named, and its samples keep anonymous
// frames.
//
// The walk: V8's frames all keep frame pointers. From the sample's
// registers, the reader follows them through the stack as the sample
// copied it (the stack of a running thread has moved on by the time the
// recorder reads; a snapshot's stopped threads are read live). A frame
// whose pc is in the runtime's binary (its embedded builtins) is an
// interpreter frame when its slots say so: a context, not a frame-type
// marker; a JSFunction whose SharedFunctionInfo runs the frame's
// BytecodeArray; a bytecode offset inside it. Its line comes from the
// bytecode's source position table. A frame whose pc is in anonymous
// executable memory is compiled code: the reader looks back from the pc
// for the header of its InstructionStream (the InstructionStream map,
// then a pointer to its Code, whose instruction start must be the
// stream's body and whose size must cover the pc) and reads the code
// object once: its kind (Sparkplug, Maglev, TurboFan), source positions
// and deoptimization data. An optimized frame's position carries an
// inlining id: the inlining table gives the inlined function and the
// position in its caller, up to the function compiled, so one native
// frame becomes the chain the compiler inlined, each function with its
// own line. A Sparkplug frame's pc maps to its bytecode through the
// code's bytecode offset table and V8's table of bytecode sizes
// (kBytecodeSizes).
//
// Functions are named as V8 names them (the SharedFunctionInfo's name, or
// its ScopeInfo's function name or inferred name; "(anonymous)" for none),
// with their Script's name as the file; lines come from the Script's
// line ends, or its source when V8 has not counted them.
//
// A read never trusts the target: memory is read with process_vm_readv,
// which fails instead of faulting; every object's type is checked
// against its map, sizes and counts are capped, and a frame that fails a
// check is left as the native frame it was (anonymous code), and counted
// ([Stats]). Code objects, functions and scripts are cached per process
// and checked at each use (a code object's header must still name it). A
// session's samples read from their ring at one time are one batch
// ([Sampling.Batch]): memory read for one of them is not read again for
// the next.
package v8
