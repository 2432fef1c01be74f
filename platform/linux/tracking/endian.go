package tracking

import (
	"encoding/binary"
	"unsafe"
)

// nativeEndian returns the byte order of the running machine (for kernel
// files such as /sys/kernel/notes).
func nativeEndian() binary.ByteOrder {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}
