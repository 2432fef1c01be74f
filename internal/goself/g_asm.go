//go:build amd64 || arm64

package goself

// G returns the address of the calling goroutine's g (the runtime's
// goroutine descriptor): what the g register holds in Go code, so what a
// sample's g register (R14 on amd64, X28 on arm64) holds while this
// goroutine runs. The runtime never frees a g (a goroutine that exits
// leaves it for reuse by a later one), so the address stays readable.
func G() uintptr
