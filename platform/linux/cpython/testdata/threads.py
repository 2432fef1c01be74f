# The fixture of rawstack's 50-thread Python snapshot benchmark: N-1
# threads (N from the first argument, 50 by default) each blocked in
# time.sleep at the end of worker_py -> level2_py -> level3_py, and the
# main thread waiting to join them. It prints "ready" once every thread
# is in its sleep.
import sys
import threading
import time


def level3_py(i, started):
    started.release()
    time.sleep(3600)


def level2_py(i, started):
    level3_py(i, started)


def worker_py(i, started):
    level2_py(i, started)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    started = threading.Semaphore(0)
    threads = [threading.Thread(target=worker_py, args=(i, started), daemon=True) for i in range(n - 1)]
    for t in threads:
        t.start()
    for _ in threads:
        started.acquire()
    time.sleep(0.1)
    print("ready", flush=True)
    for t in threads:
        t.join()
