# CPU-bound Python for argv[1] seconds of CPU time: recursion in the
# interpreter, whose C frames (Debian's python3 keeps no frame pointers)
# reach main only through CFI. Prints its CPU time as "cpu_ns N".
import sys
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


secs = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
t0 = time.process_time()
while time.process_time() - t0 < secs:
    fib(16)
print("cpu_ns %d" % time.process_time_ns(), file=sys.stderr)
