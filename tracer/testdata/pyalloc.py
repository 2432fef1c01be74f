"""Allocates in known Python functions until killed, for
TestAllocInjectPython: bytearrays of 64 KiB go through PyMem_RawMalloc
(pymalloc takes only blocks of 512 bytes and less), so each is a call of
the C allocator."""


def churn():
    for _ in range(2000):
        b = bytearray(65536)
        b[0] = 1


print("ready", flush=True)
while True:
    churn()
