#include "textflag.h"

// func cpuidECX1() uint32
TEXT ·cpuidECX1(SB), NOSPLIT, $0-4
	MOVL	$1, AX
	XORL	CX, CX
	CPUID
	MOVL	CX, ret+0(FP)
	RET

// func castagnoliSSE42(crc uint32, p []byte) uint32
TEXT ·castagnoliSSE42(SB), NOSPLIT, $0-36
	MOVL	crc+0(FP), AX
	MOVQ	p_base+8(FP), SI
	MOVQ	p_len+16(FP), CX
	NOTL	AX

loop8:
	CMPQ	CX, $8
	JB	tail
	CRC32Q	(SI), AX
	ADDQ	$8, SI
	SUBQ	$8, CX
	JMP	loop8

tail:
	TESTQ	CX, CX
	JZ	done
	CRC32B	(SI), AX
	INCQ	SI
	DECQ	CX
	JMP	tail

done:
	NOTL	AX
	MOVL	AX, ret+32(FP)
	RET
