# gdbdump.py: gdb script for the unwinder tests. Runs the inferior to
# $DUMP_HITS (default: one per breakpoint) breakpoint hits of $DUMP_BREAKS
# (comma-separated gdb locations), then single steps $DUMP_STEPS
# instructions, and at every stop writes to $DUMP_OUT/stops.txt
# gdb's own backtrace (the oracle: physical frames only, past main), the
# registers, the mappings, and the stack bytes from sp to the end of the
# stack mapping (stack-N.bin).
#
# With $DUMP_REMOTE (host:port of a qemu-user gdbstub, for arm64 programs)
# it connects there instead of running the program; qemu has no
# /proc/PID/maps, so it writes each objfile's .text address ("text" lines,
# from "info files") and reads the stack page by page until unreadable.
import gdb
import os
import time

out_dir = os.environ["DUMP_OUT"]
breaks = [b for b in os.environ.get("DUMP_BREAKS", "marker").split(",") if b]
steps = int(os.environ.get("DUMP_STEPS", "0"))
hits = int(os.environ.get("DUMP_HITS", str(len(breaks))))
remote = os.environ.get("DUMP_REMOTE", "")
regnames = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9",
            "r10", "r11", "r12", "r13", "r14", "r15", "rip"]
spname = "rsp"

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set backtrace past-main on")
gdb.execute("set backtrace past-entry on")
for sig in ("SIGUSR1", "SIGALRM", "SIGPROF"):
    gdb.execute("handle %s nostop noprint pass" % sig, to_string=True)
try:
    gdb.execute("set debuginfod enabled off")
except gdb.error:
    pass

out = open(os.path.join(out_dir, "stops.txt"), "w")
n = [0]


def u64(v):
    return int(v) & 0xffffffffffffffff


def dump():
    i = n[0]
    n[0] += 1
    out.write("stop %d\n" % i)
    f = gdb.newest_frame()
    while f is not None:
        # Inlined and tail-call frames exist only in the debug info (gdb
        # rebuilds them from libc6-dbg); a stack walk sees physical frames.
        if f.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            out.write("frame %x %s\n" % (f.pc(), f.name() or "?"))
        f = f.older()
    for r in regnames:
        out.write("reg %s %x\n" % (r, u64(gdb.parse_and_eval("$" + r))))
    sp = u64(gdb.parse_and_eval("$" + spname))
    if remote:
        dump_remote(i, sp)
        return
    maps = gdb.execute("info proc mappings", to_string=True)
    for line in maps.splitlines():
        fl = line.split()
        if len(fl) < 5 or not fl[0].startswith("0x"):
            continue
        start, end, off = int(fl[0], 16), int(fl[1], 16), int(fl[3], 16)
        path = fl[-1] if fl[-1].startswith("/") else "-"
        out.write("map %x %x %x %s\n" % (start, end, off, path))
        if start <= sp < end:
            mem = gdb.selected_inferior().read_memory(sp, end - sp)
            with open(os.path.join(out_dir, "stack-%d.bin" % i), "wb") as s:
                s.write(bytes(mem))
            out.write("stack %x %x\n" % (sp, end - sp))


def dump_remote(i, sp):
    files = gdb.execute("info files", to_string=True)
    for line in files.splitlines():
        fl = line.split()
        if len(fl) >= 5 and fl[1] == "-" and fl[3] == "is" and fl[4] == ".text":
            path = fl[6] if len(fl) >= 7 and fl[5] == "in" else gdb.current_progspace().filename
            out.write("text %x %s\n" % (int(fl[0], 16), path))
    inf = gdb.selected_inferior()
    data = b""
    while len(data) < (1 << 20):
        try:
            data += bytes(inf.read_memory(sp + len(data), 4096 - (sp + len(data)) % 4096))
        except gdb.MemoryError:
            break
    with open(os.path.join(out_dir, "stack-%d.bin" % i), "wb") as s:
        s.write(data)
    out.write("stack %x %x\n" % (sp, len(data)))


for b in breaks:
    gdb.execute("break " + b, to_string=True)
if remote:
    gdb.execute("set sysroot " + os.environ.get("DUMP_SYSROOT", "/"))
    for attempt in range(50):
        try:
            gdb.execute("target remote " + remote, to_string=True)
            break
        except gdb.error:
            time.sleep(0.1)
    else:
        raise gdb.GdbError("cannot connect to " + remote)
    if "aarch64" in gdb.selected_frame().architecture().name():
        regnames = ["x%d" % r for r in range(31)] + ["sp", "pc"]
        spname = "sp"
    gdb.execute("continue", to_string=True)
else:
    gdb.execute("run", to_string=True)
for k in range(hits):
    dump()
    if k == hits - 1:
        for _ in range(steps):
            gdb.execute("stepi", to_string=True)
            dump()
    else:
        gdb.execute("continue", to_string=True)
out.write("end\n")
out.close()
gdb.execute("kill")
