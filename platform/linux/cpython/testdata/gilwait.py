# The fixture of rawstack's GIL tests: the main thread spins in spin_py
# holding the GIL and, with a switch interval of 1000 s, never lets it
# go; a thread that slept in waiter_py wakes and waits for it, in
# take_gil, as long as the program runs. It prints "ready" once the
# waiter started, then "main TID" and "waiter TID" (native thread ids).
import sys
import threading
import time


def waiter_py():
    time.sleep(0.2)  # releases the GIL; returning needs it back
    print("waiter got the GIL", flush=True)


def spin_py():
    x = 0
    while True:
        x += 1


if __name__ == "__main__":
    sys.setswitchinterval(1000)
    t = threading.Thread(target=waiter_py, name="waiter", daemon=True)
    t.start()
    print("main %d" % threading.get_native_id(), flush=True)
    print("waiter %d" % t.native_id, flush=True)
    print("ready", flush=True)
    spin_py()
