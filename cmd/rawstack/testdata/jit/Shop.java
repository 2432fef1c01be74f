// A request handler whose hot chain runs through three classes and a
// lambda: Shop.handle → Cart.total → (a lambda) → Price.mix. C2 inlines
// the chain into one compiled method, so a perf map names only the outer
// one; rawstack's HotSpot reader expands it from the scope descriptors.
//
//   java Shop.java [seconds]   busy for that long (default 3)
//   java Shop.java wait N      N threads blocked three calls deep, then
//                              "ready" on stdout; runs until killed
import java.util.function.IntBinaryOperator;

public class Shop {
    static final class Price {
        final int rate, rounds;
        Price(int rate, int rounds) { this.rate = rate; this.rounds = rounds; }
        int mix(int x, int i) {
            int h = x ^ rate;
            for (int k = 0; k < rounds; k++) h = h * 31 + k + i;
            return h;
        }
    }

    static final class Cart {
        final int[] items;
        Cart(int[] items) { this.items = items; }
        int total(IntBinaryOperator f) {
            int t = 0;
            for (int j = 0; j < items.length; j++) t += f.applyAsInt(items[j], j);
            return t;
        }
    }

    static final Price price = new Price(7, 4000);

    static int handle(Cart cart, int id) {
        return cart.total((x, j) -> price.mix(x, id + j));
    }

    static void park(Object lock) throws InterruptedException {
        synchronized (lock) { lock.wait(); }
    }

    static void hold(Object lock) throws InterruptedException { park(lock); }

    static void serve(Object lock) throws InterruptedException { hold(lock); }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("wait")) {
            int n = Integer.parseInt(args[1]);
            Object lock = new Object();
            for (int i = 0; i < n - 1; i++) {
                Thread t = new Thread(() -> {
                    try { serve(lock); } catch (InterruptedException e) { }
                }, "worker-" + i);
                t.setDaemon(true);
                t.start();
            }
            System.out.println("ready");
            System.out.flush();
            serve(lock);
            return;
        }
        if (args.length > 1 && args[0].equals("rounds")) { // N requests, then the CPU s taken (benchmarks' jitcost)
            int n = Integer.parseInt(args[1]);
            Cart cart = new Cart(new int[] {1, 2, 3, 4, 5, 6, 7, 8});
            int s = 0;
            for (int i = 0; i < n; i++) s += handle(cart, i);
            long ns = java.lang.management.ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
            System.out.println((s != 1 ? "ok " : "no ") + (ns / 1e9));
            return;
        }
        long end = System.nanoTime() + (long) (Double.parseDouble(args.length > 0 ? args[0] : "3") * 1e9);
        Cart cart = new Cart(new int[] {1, 2, 3, 4, 5, 6, 7, 8});
        int s = 0;
        for (int i = 0; (i & 1023) != 0 || System.nanoTime() < end; i++) s += handle(cart, i);
        System.out.println(s != 1 ? "ok" : "no");
    }
}
