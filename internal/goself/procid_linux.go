package goself

import sys "github.com/rawstack/rawstack/internal/unix"

// threadID is what the runtime stores in m.procid on this OS.
func threadID() uint64 { return uint64(sys.Gettid()) }
