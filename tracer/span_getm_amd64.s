//go:build linux

#include "textflag.h"

// func getm() uintptr: the current g's m field (offset 48 on 64-bit, which
// the toolchain's linker also relies on).
TEXT ·getm(SB),NOSPLIT,$0-8
	MOVQ (TLS), AX
	MOVQ 48(AX), AX
	MOVQ AX, ret+0(FP)
	RET
