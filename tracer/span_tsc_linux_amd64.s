//go:build linux

#include "textflag.h"

// func rdtsc() int64: the time-stamp counter, unserialized (as the Go
// runtime's tracer and Tracy read it): a span's stamp needs no ordering
// against the loads and stores around it.
TEXT ·rdtsc(SB),NOSPLIT,$0-8
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET
