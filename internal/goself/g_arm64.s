#include "textflag.h"

// func G() uintptr: the running goroutine's g, in R28 (g) on arm64.
TEXT ·G(SB),NOSPLIT,$0-8
	MOVD	g, R0
	MOVD	R0, ret+0(FP)
	RET
