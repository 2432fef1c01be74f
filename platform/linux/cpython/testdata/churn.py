# A moving target for rawstack's Python frame reader: the main thread
# recurses to random depths (up to 300, past the reader's cap) through
# rec_a and rec_b and unwinds again, allocating as it goes, so frames and
# code objects' memory change under the reader. Prints "ready", runs
# until killed.
import random
import sys

sys.setrecursionlimit(10000)


def rec_a(n):
    if n == 0:
        return [0] * random.randint(1, 50)
    return rec_b(n - 1)


def rec_b(n):
    if n == 0:
        return "x" * random.randint(1, 50)
    return rec_a(n - 1)


print("ready", flush=True)
while True:
    rec_a(random.randint(0, 300))
    # fresh code objects, freed again: their addresses get reused
    exec(compile("def fresh_%d(): pass" % random.randint(0, 9), "<fresh>", "exec"), {})
