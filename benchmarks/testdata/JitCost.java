// The jit scenario's cost workload (benchmarks/jit.go): Shop.java's chain
// (handle -> Cart.total -> a lambda -> Price.mix, which C2 inlines into
// one compiled method), a fixed amount of work (args[0] rounds); it
// prints the CPU seconds its main thread took.
import java.lang.management.ManagementFactory;
import java.util.function.IntBinaryOperator;

public class JitCost {
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

    public static void main(String[] args) {
        int rounds = Integer.parseInt(args.length > 0 ? args[0] : "100000");
        Cart cart = new Cart(new int[] {1, 2, 3, 4, 5, 6, 7, 8});
        int s = 0;
        for (int i = 0; i < rounds; i++) s += handle(cart, i);
        long ns = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
        System.out.println((s != 1 ? "ok " : "no ") + (ns / 1e9));
    }
}
