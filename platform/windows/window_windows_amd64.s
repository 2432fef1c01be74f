#include "textflag.h"

// The suspend–context–copy–resume window. windowProc is the start routine
// of a native thread created with CreateThread: the Go runtime does not
// know the thread, so it never preempts it, never suspends it and never
// makes it wait for a Go lock. It calls only the Win32 functions in the
// block (Windows x64 calling convention) and touches only memory allocated
// with VirtualAlloc, so nothing here allocates or takes a lock that a
// suspended thread could hold.
//
// block (see window_windows.go):
//   0 SuspendThread   8 GetThreadContext   16 ReadProcessMemory
//  24 ResumeThread   32 QueryPerformanceCounter
//  40 WaitForSingleObject   48 SetEvent
//  56 request event  64 done event  72 process handle
//  80 slots  88 slot count  96 quit
// slot (64 bytes):
//   0 thread handle  8 stack buffer  16 buffer length  24 CONTEXT
//  32 status  40 bytes copied  48 QPC before suspend  56 QPC after resume

// func windowProcAddr() uintptr
TEXT ·windowProcAddr(SB), NOSPLIT, $0-8
	LEAQ windowProc<>(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// DWORD WINAPI windowProc(block *b): RCX = b.
TEXT windowProc<>(SB), NOSPLIT|NOFRAME, $0
	PUSHQ BX
	PUSHQ SI
	PUSHQ R12
	PUSHQ R13
	// Entry RSP is 8 mod 16; four pushes keep it there; 40 more bytes
	// (32 of shadow space, 8 for a fifth argument) align it for calls.
	SUBQ $40, SP
	MOVQ CX, BX

loop:
	MOVQ 56(BX), CX
	MOVL $0xFFFFFFFF, DX // INFINITE
	MOVQ 40(BX), AX
	CALL AX
	MOVQ 96(BX), AX
	TESTQ AX, AX
	JNZ quit
	MOVQ 80(BX), R12
	MOVQ 88(BX), R13

next:
	TESTQ R13, R13
	JZ batchdone
	MOVQ $0, 32(R12)
	MOVQ $0, 40(R12)
	LEAQ 48(R12), CX
	MOVQ 32(BX), AX
	CALL AX // QueryPerformanceCounter(&slot.t0)
	MOVQ 0(R12), CX
	MOVQ 0(BX), AX
	CALL AX // SuspendThread(h)
	CMPL AX, $0xFFFFFFFF
	JNE suspended
	MOVQ $1, 32(R12)
	JMP stamp

suspended:
	MOVQ 0(R12), CX
	MOVQ 24(R12), DX
	MOVQ 8(BX), AX
	CALL AX // GetThreadContext(h, ctx)
	TESTL AX, AX
	JNZ gotctx
	MOVQ $2, 32(R12)
	JMP resume

gotctx:
	MOVQ 24(R12), AX
	MOVQ 0x98(AX), SI // CONTEXT.Rsp
	MOVQ 72(BX), CX
	MOVQ SI, DX
	MOVQ 8(R12), R8
	MOVQ 16(R12), R9
	LEAQ 40(R12), AX
	MOVQ AX, 32(SP)
	MOVQ 16(BX), AX
	CALL AX // ReadProcessMemory(proc, rsp, buf, len, &got)
	TESTL AX, AX
	JNZ resume
	// The stack ends before rsp+len: copy up to the end of rsp's page,
	// which is mapped since rsp points into it.
	MOVQ SI, R9
	ANDQ $4095, R9
	NEGQ R9
	ADDQ $4096, R9
	CMPQ R9, 16(R12)
	JBE shortlen
	MOVQ 16(R12), R9

shortlen:
	MOVQ $0, 40(R12)
	MOVQ 72(BX), CX
	MOVQ SI, DX
	MOVQ 8(R12), R8
	LEAQ 40(R12), AX
	MOVQ AX, 32(SP)
	MOVQ 16(BX), AX
	CALL AX
	TESTL AX, AX
	JNZ resume
	MOVQ $3, 32(R12)

resume:
	MOVQ 0(R12), CX
	MOVQ 24(BX), AX
	CALL AX // ResumeThread(h)

stamp:
	LEAQ 56(R12), CX
	MOVQ 32(BX), AX
	CALL AX // QueryPerformanceCounter(&slot.t1)
	ADDQ $64, R12
	DECQ R13
	JMP next

batchdone:
	MOVQ 64(BX), CX
	MOVQ 48(BX), AX
	CALL AX // SetEvent(done)
	JMP loop

quit:
	MOVQ 64(BX), CX
	MOVQ 48(BX), AX
	CALL AX
	ADDQ $40, SP
	POPQ R13
	POPQ R12
	POPQ SI
	POPQ BX
	XORL AX, AX
	RET
