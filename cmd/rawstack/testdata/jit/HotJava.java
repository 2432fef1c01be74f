// A CPU-bound Java program whose time goes to one JIT-compiled method,
// mixHotJava: rawstack's JIT tests record it with -XX:+DumpPerfMapAtExit
// (a perf map written only when the JVM exits) and compare the share of
// samples naming mixHotJava with perf's. The work is a fixed number of
// rounds (args[0]), so the share does not depend on the machine's load.
public class HotJava {
    static long mixHotJava(long x) {
        for (int i = 0; i < 64; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) {
        long rounds = args.length > 0 ? Long.parseLong(args[0]) : 1000;
        long s = 1;
        for (long r = 0; r < rounds; r++) {
            for (int i = 0; i < 1000; i++) {
                s = mixHotJava(s + i);
            }
        }
        System.out.println(s == 0 ? "zero" : "ok");
    }
}
