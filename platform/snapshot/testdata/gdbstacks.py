# gdbstacks.py: print every thread's frames as "TID n" then
# "FRAME pc kind name" lines, where pc is the frame's pc (the return
# address for callers) and kind is gdb's frame type, so a test can drop the
# inlined and tail-call frames gdb synthesizes from debug info.
import gdb

kinds = {gdb.NORMAL_FRAME: "normal", gdb.INLINE_FRAME: "inline",
         gdb.TAILCALL_FRAME: "tailcall", gdb.SIGTRAMP_FRAME: "sigtramp"}
gdb.execute("set backtrace past-main on")
gdb.execute("set backtrace past-entry on")
for inf in gdb.inferiors():
    for th in sorted(inf.threads(), key=lambda t: t.ptid[1]):
        th.switch()
        print("TID %d" % th.ptid[1])
        f = gdb.newest_frame()
        n = 0
        while f is not None and n < 1000:
            print("FRAME %x %s %s" % (f.pc(), kinds.get(f.type(), "other"), f.name()))
            try:
                f = f.older()
            except gdb.error:
                break
            n += 1
