package platform

import "github.com/rawstack/rawstack/format"

// JITCode is code a JIT runtime published in a perf map or jitdump file,
// as a back end reports it. Slices are only valid during the Handler call.
type JITCode struct {
	Time   int64
	Pid    uint32
	Addr   uint64
	Size   uint64
	Name   string // the runtime's name, e.g. "JS:*fib /srv/app.js:1:16"
	Source format.JITSource
	Code   []byte    // the machine code, only with Config.JITCodeBytes (jitdump only)
	Lines  []JITLine // jitdump debug info, if any
}

// JITLine maps code from Addr+Offset on to a source position.
type JITLine struct {
	Offset uint64
	Line   uint32
	Column uint32
	File   string
}

// JITHandler is implemented by a Handler that records JIT code. A back end
// reads perf maps and jitdump files only for handlers that implement it
// (and unless Config.NoJIT is set).
type JITHandler interface {
	JITCode(e *JITCode)
	JITUnload(e *format.JITUnload)
}
