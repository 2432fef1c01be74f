# A CPU-bound Python program whose time goes to one function, hot_py:
# rawstack's JIT tests record it under Python 3.12's perf trampoline
# (python -X perf), which writes a perf map naming each Python function's
# trampoline, and compare the share of samples naming hot_py with perf's.
import sys


def hot_py(n):
    s = 0
    for i in range(n):
        s = (s * 31 + i) & 0xFFFFFFFF
    return s


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    t = 0
    for _ in range(rounds):
        t ^= hot_py(20000)
    print("ok" if t >= 0 else "no")


main()
