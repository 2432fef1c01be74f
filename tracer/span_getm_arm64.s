//go:build linux

#include "textflag.h"

// func getm() uintptr: the current g's m field; g lives in R28.
TEXT ·getm(SB),NOSPLIT,$0-8
	MOVD 48(g), R0
	MOVD R0, ret+0(FP)
	RET
