// Run under Wine (or Windows), this program single-steps a few functions
// with different prologs and epilogs and, at every instruction, unwinds its
// own stack with RtlLookupFunctionEntry + RtlVirtualUnwind. For each step
// it prints the starting context, a copy of the stack, and every frame
// RtlVirtualUnwind produced while the PC stays inside this image. The Go
// test unwinds the same contexts and stack copies with arch/winunwind and
// compares the frames.
//
// Output lines (hex numbers):
//   B <image base> <image size>
//   S <rip> <rsp> <rbx> <rbp> <rsi> <rdi> <r12> <r13> <r14> <r15> <xmm6 low> <xmm15 low>
//   M <hex bytes of the stack from rsp>
//   F <same fields as S>         (one per unwound frame)
//   E
#include <windows.h>
#include <stdio.h>
#include <string.h>

#define STACK_COPY 0x3000

static FILE *out;
static volatile int tracing;
static void *stop_at;

static void put_ctx(char tag, const CONTEXT *c) {
	fprintf(out, "%c %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx\n", tag,
		(unsigned long long)c->Rip, (unsigned long long)c->Rsp, (unsigned long long)c->Rbx,
		(unsigned long long)c->Rbp, (unsigned long long)c->Rsi, (unsigned long long)c->Rdi,
		(unsigned long long)c->R12, (unsigned long long)c->R13, (unsigned long long)c->R14,
		(unsigned long long)c->R15, (unsigned long long)c->Xmm6.Low, (unsigned long long)c->Xmm15.Low);
}

static ULONG64 image_lo, image_hi;

static void record(const CONTEXT *start) {
	CONTEXT c = *start;
	put_ctx('S', &c);
	NT_TIB *tib = (NT_TIB *)NtCurrentTeb();
	ULONG64 top = (ULONG64)tib->StackBase;
	ULONG64 n = top - c.Rsp;
	if (n > STACK_COPY)
		n = STACK_COPY;
	fputc('M', out);
	fputc(' ', out);
	for (ULONG64 i = 0; i < n; i++)
		fprintf(out, "%02x", ((unsigned char *)c.Rsp)[i]);
	fputc('\n', out);
	for (int depth = 0; depth < 32; depth++) {
		ULONG64 base = 0;
		PRUNTIME_FUNCTION fn = RtlLookupFunctionEntry(c.Rip, &base, NULL);
		if (fn) {
			void *handler_data;
			ULONG64 frame;
			RtlVirtualUnwind(UNW_FLAG_NHANDLER, base, c.Rip, fn, &c, &handler_data, &frame, NULL);
		} else {
			c.Rip = *(ULONG64 *)c.Rsp;
			c.Rsp += 8;
		}
		put_ctx('F', &c);
		if (c.Rip < image_lo || c.Rip >= image_hi)
			break;
	}
	fputs("E\n", out);
}

static LONG CALLBACK on_step(EXCEPTION_POINTERS *ep) {
	if (ep->ExceptionRecord->ExceptionCode != EXCEPTION_SINGLE_STEP || !tracing)
		return EXCEPTION_CONTINUE_SEARCH;
	CONTEXT *c = ep->ContextRecord;
	if ((void *)c->Rip == stop_at) {
		tracing = 0;
		c->EFlags &= ~0x100;
		return EXCEPTION_CONTINUE_EXECUTION;
	}
	if (c->Rip >= image_lo && c->Rip < image_hi)
		record(c);
	c->EFlags |= 0x100;
	return EXCEPTION_CONTINUE_EXECUTION;
}

/* The functions under test. noinline keeps each its own frame. */
volatile double dsink;
volatile int isink;

__attribute__((noinline)) int leaf(int a) { return a * 3 + 1; }

__attribute__((noinline)) double uses_xmm(double a, double b) {
	// Values live across a call stay in callee-saved xmm6-xmm15.
	double x = a * 1.5, y = b * 2.5, z = a + b, w = a - b;
	isink = leaf((int)a);
	return x * y + z * w + x + y;
}

__attribute__((noinline)) int pushes(int a, int b, int c, int d) {
	// Enough live values across calls to need several callee-saved GPRs.
	int p = a * b, q = b * c, r = c * d, s = d * a, t = a + b + c + d;
	isink = leaf(p);
	isink = leaf(q);
	return p + q + r + s + t + leaf(r + s);
}

__attribute__((noinline)) int big_frame(int n) {
	// A frame larger than a page: ALLOC_LARGE and a stack probe.
	volatile char buf[9000];
	for (int i = 0; i < 9000; i += 512)
		buf[i] = (char)(i + n);
	return buf[n & 1023] + pushes(n, n + 1, n + 2, n + 3);
}

__attribute__((noinline)) int with_alloca(int n) {
	// A variable-size frame needs a frame pointer: SET_FPREG.
	volatile char *p = __builtin_alloca(n * 16 + 16);
	p[0] = (char)n;
	dsink = uses_xmm(n, n + 1);
	return p[0] + big_frame(n);
}

__attribute__((noinline)) void trace_stop(void) { isink = 0; }

__attribute__((noinline)) int traced(int n) {
	int r = with_alloca(n);
	r += pushes(r, n, 3, 4);
	return r;
}

int main(int argc, char **argv) {
	out = stdout;
	if (argc > 1 && !(out = fopen(argv[1], "w")))
		return 2;
	HMODULE self = GetModuleHandleA(NULL);
	IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)((char *)self + ((IMAGE_DOS_HEADER *)self)->e_lfanew);
	image_lo = (ULONG64)self;
	image_hi = image_lo + nt->OptionalHeader.SizeOfImage;
	fprintf(out, "B %llx %llx\n", (unsigned long long)image_lo, (unsigned long long)nt->OptionalHeader.SizeOfImage);
	AddVectoredExceptionHandler(1, on_step);
	stop_at = (void *)trace_stop;
	tracing = 1;
	// Set the trap flag: the next instruction raises a single-step
	// exception, and the handler keeps it set until trace_stop.
	__asm__ volatile("pushfq\n\torq $0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc");
	int r = traced(argc + 4);
	trace_stop();
	tracing = 0;
	fprintf(stderr, "result %d\n", r);
	fclose(out);
	return 0;
}
