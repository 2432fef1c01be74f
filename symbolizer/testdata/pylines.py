# Prints, for every code object of this file, its name, first line, line
# table (hex) and the line of each instruction as the interpreter itself
# resolves it: co_lines() (3.10+) or dis.findlinestarts (3.8, 3.9). The
# symbolizer's line table decoders are held to it. The functions below
# exercise the table's forms: long line jumps, lines going backwards,
# instructions with no line, multi-line expressions, nested code.
import dis
import json
import sys


def simple(a):
    return a + 1


def jumps(x):
    if x:
        y = 1
    else:
        y = 2


























































































    z = y * 2  # a jump of more than 64 lines: the long forms
    return z


@staticmethod
def decorated(
    a,
    b,
):
    return (a +
            b +
            a)


def loops(n):
    total = 0
    for i in range(n):
        try:
            total += [j for j in range(i) if j % 2][0]
        except IndexError:
            continue
        finally:
            total -= 1
    while total > 0:
        total //= 2
    return total


class K:
    def method(self):
        def inner():
            return lambda q: q * 2
        return inner


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from walk(c)


def main():
    v = sys.version_info
    src = open(__file__).read()
    for code in walk(compile(src, __file__, "exec")):
        if v >= (3, 10):
            table = code.co_linetable
            lines = [[s, e, l] for s, e, l in code.co_lines()]
        else:
            table = code.co_lnotab
            starts = list(dis.findlinestarts(code))
            lines = []
            for i, (off, line) in enumerate(starts):
                end = starts[i + 1][0] if i + 1 < len(starts) else len(code.co_code)
                lines.append([off, end, line])
        print(json.dumps({"name": code.co_name, "first": code.co_firstlineno,
                          "table": table.hex(), "lines": lines}))


main()
