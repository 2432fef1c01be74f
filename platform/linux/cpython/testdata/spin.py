# The fixture of rawstack's Python frame tests: the main thread spins in
# alpha_py -> beta_py -> gamma_py; a second thread sleeps in
# epsilon_py -> delta_py. It prints its own view (sys._current_frames,
# the oracle) of the main thread's stack as lines "oracle NAME:LINE ...",
# leaf first, and of the sleeper's as "sleeper NAME:LINE ...", the lines
# the line table of gamma_py holds (co_lines) as "lines gamma_py N N ...",
# then "ready", and runs until killed, or for as many seconds as its
# argument says.
import dis
import os
import sys
import threading
import time


def gamma_py(n):
    x = 0
    while True:
        x += n


def beta_py(n):
    gamma_py(n + 1)


def alpha_py():
    beta_py(1)


def delta_py():
    while True:
        time.sleep(60)


def epsilon_py():
    delta_py()


def oracle(main):
    for _ in range(40):
        time.sleep(0.005)
        f = sys._current_frames()[main]
        chain = []
        while f is not None:
            chain.append("%s:%d" % (f.f_code.co_name, f.f_lineno))
            f = f.f_back
        print("oracle " + " ".join(chain), flush=True)
    for t in threading.enumerate():
        if t.name == "sleeper":
            f = sys._current_frames()[t.ident]
            chain = []
            while f is not None:
                chain.append("%s:%d" % (f.f_code.co_qualname if hasattr(f.f_code, "co_qualname") else f.f_code.co_name, f.f_lineno))
                f = f.f_back
            print("sleeper " + " ".join(chain), flush=True)
    if hasattr(gamma_py.__code__, "co_lines"):
        lines = sorted(set(l for _, _, l in gamma_py.__code__.co_lines() if l is not None))
    else:  # before 3.10
        lines = sorted(set(l for _, l in dis.findlinestarts(gamma_py.__code__)))
    print("lines gamma_py " + " ".join(str(l) for l in lines), flush=True)
    print("ready", flush=True)


def stop(seconds):
    time.sleep(seconds)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and float(sys.argv[1]) > 0:
        threading.Thread(target=stop, args=(float(sys.argv[1]),), daemon=True).start()
    threading.Thread(target=epsilon_py, name="sleeper", daemon=True).start()
    threading.Thread(target=oracle, args=(threading.get_ident(),), daemon=True).start()
    alpha_py()
