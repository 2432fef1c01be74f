#include "textflag.h"

// func G() uintptr: the running goroutine's g, which Go code on amd64
// keeps in R14 (ABIInternal) and in thread-local storage.
TEXT ·G(SB),NOSPLIT,$0-8
	MOVQ	(TLS), AX
	MOVQ	AX, ret+0(FP)
	RET
