package snapshot

// MemRead is one read of a target's memory for [Frozen]'s readers: Buf
// is filled from Addr, and OK says it was read whole.
type MemRead struct {
	Addr uint64
	Buf  []byte
	OK   bool
}
