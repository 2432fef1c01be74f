//go:build linux && amd64 && !race

#include "go_asm.h"
#include "textflag.h"

// func spanCommit(r *spanRing, e *spanRec, h, id, aux uint64, kind spanKind) bool
TEXT ·spanCommit(SB),NOSPLIT,$0-49
	MOVQ	r+0(FP), DI
	MOVQ	(TLS), CX
	MOVQ	48(CX), CX // g.m, as getm
	CMPQ	CX, spanRing_m(DI)
	JNE	miss
	MOVQ	e+8(FP), BX
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, spanRec_time(BX)
	MOVQ	id+24(FP), AX
	MOVQ	AX, spanRec_id(BX)
	MOVQ	aux+32(FP), AX
	MOVQ	AX, spanRec_aux(BX)
	MOVL	spanRing_tid(DI), AX
	MOVL	AX, spanRec_tid(BX)
	MOVB	kind+40(FP), AX
	MOVB	AX, spanRec_kind(BX)
	MOVQ	h+16(FP), AX
	INCQ	AX
	MOVQ	AX, spanRing_head(DI) // publish: stores stay in order on x86
	MOVB	$1, ret+48(FP)
	RET
miss:
	MOVB	$0, ret+48(FP)
	RET
