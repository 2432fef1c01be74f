package arch

import (
	"errors"
	"fmt"
)

// Memory is the target's address space as an unwinder sees it: a live
// process (process_vm_readv), a copied stack (perf STACK_USER, RawStack
// events), a core file or a minidump.
type Memory interface {
	// ReadMemory fills p with the bytes at addr. It returns an error
	// (wrapping ErrBadAddress where the address is not readable) when it
	// cannot fill all of p.
	ReadMemory(addr uint64, p []byte) error
}

// ErrBadAddress says an address is not readable in a Memory.
var ErrBadAddress = errors.New("arch: address not readable")

// StackCopy is Memory backed by a copy of stack bytes starting at Addr,
// as in a perf sample's STACK_USER or a RawStack event.
type StackCopy struct {
	Addr uint64
	Data []byte
}

// ReadMemory implements Memory.
func (s *StackCopy) ReadMemory(addr uint64, p []byte) error {
	if addr < s.Addr || addr-s.Addr > uint64(len(s.Data)) || uint64(len(p)) > uint64(len(s.Data))-(addr-s.Addr) {
		return fmt.Errorf("%w: %#x (+%d) outside stack copy [%#x, %#x)", ErrBadAddress, addr, len(p), s.Addr, s.Addr+uint64(len(s.Data)))
	}
	copy(p, s.Data[addr-s.Addr:])
	return nil
}
