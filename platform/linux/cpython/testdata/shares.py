# The fixture of rawstack's perf -X perf comparison: the main thread
# calls alpha_py, beta_py and gamma_py in turn, each a loop of 1, 2 and 3
# units of work, so they take about 1/6, 2/6 and 3/6 of its time. It
# prints "ready", then runs for as many seconds as its argument says and
# prints the share of the three calls' time each took, as it timed them
# ("shares alpha_py 0.167 beta_py 0.333 gamma_py 0.500").
import sys
import time

UNIT = 20000


def alpha_py():
    x = 0
    for i in range(UNIT):
        x += i
    return x


def beta_py():
    x = 0
    for i in range(2 * UNIT):
        x += i
    return x


def gamma_py():
    x = 0
    for i in range(3 * UNIT):
        x += i
    return x


if __name__ == "__main__":
    end = time.monotonic() + float(sys.argv[1])
    spent = {alpha_py: 0.0, beta_py: 0.0, gamma_py: 0.0}
    clock = time.perf_counter
    print("ready", flush=True)
    while time.monotonic() < end:
        for f in (alpha_py, beta_py, gamma_py):
            t0 = clock()
            f()
            spent[f] += clock() - t0
    total = sum(spent.values())
    print("shares " + " ".join("%s %.3f" % (f.__name__, t / total) for f, t in spent.items()), flush=True)
