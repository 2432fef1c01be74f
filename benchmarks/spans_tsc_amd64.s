#include "textflag.h"

// The clock floor of a span (issue 25): n time-stamp counter reads back to
// back, with no call between them, in three flavours.

// func tscLoop(n int)
TEXT ·tscLoop(SB),NOSPLIT,$0-8
	MOVQ	n+0(FP), CX
	TESTQ	CX, CX
	JLE	done
loop:
	RDTSC
	DECQ	CX
	JNZ	loop
done:
	RET

// func tscpLoop(n int)
TEXT ·tscpLoop(SB),NOSPLIT,$0-8
	MOVQ	n+0(FP), BX
	TESTQ	BX, BX
	JLE	done
loop:
	RDTSCP
	DECQ	BX
	JNZ	loop
done:
	RET

// func lfenceTscLoop(n int)
TEXT ·lfenceTscLoop(SB),NOSPLIT,$0-8
	MOVQ	n+0(FP), CX
	TESTQ	CX, CX
	JLE	done
loop:
	LFENCE
	RDTSC
	DECQ	CX
	JNZ	loop
done:
	RET

// func tscCall() int64: one read in a call of its own, as the tracer makes.
TEXT ·tscCall(SB),NOSPLIT,$0-8
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET

// func emptyCall() int64: the call alone.
TEXT ·emptyCall(SB),NOSPLIT,$0-8
	MOVQ	$0, ret+0(FP)
	RET
