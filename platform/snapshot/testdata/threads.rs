// threads.rs: the Rust twin of threads.c. Each worker recurses through
// chain_a/chain_b/chain_c to a depth, then parks forever in leaf_block;
// when all are parked main prints "ready" and joins them.
//
//	threads_rs [NTHREADS [DEPTH]]
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

static ARRIVED: AtomicUsize = AtomicUsize::new(0);

// black_box keeps x in memory and opaque to the optimizer
// (std::hint::black_box needs Rust 1.66; Debian 12 has 1.63).
#[inline(always)]
fn black_box<T: Copy>(x: T) -> T {
    unsafe { std::ptr::read_volatile(&x) }
}

#[inline(never)]
fn leaf_block(salt: u64) -> u64 {
    let pad = black_box([salt; 6]);
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    loop {
        thread::park();
        black_box(pad[0]);
    }
}

#[inline(never)]
fn chain_a(n: u64, salt: u64) -> u64 {
    let x = black_box([n, salt, 1]);
    let r = if n == 0 { leaf_block(salt) } else { chain_b(n - 1, salt + x[1]) };
    black_box(r + x[0])
}

#[inline(never)]
fn chain_b(n: u64, salt: u64) -> u64 {
    let y = black_box([n; 9]);
    let r = if n == 0 { leaf_block(salt) } else { chain_c(n - 1, salt ^ y[8]) };
    black_box(r + y[0])
}

#[inline(never)]
fn chain_c(n: u64, salt: u64) -> u64 {
    let z = black_box([n as u8; 200]);
    let r = if n == 0 { leaf_block(salt) } else { chain_a(n - 1, salt + z[199] as u64) };
    black_box(r + z[0] as u64)
}

#[inline(never)]
fn worker(i: u64, depth: u64) -> u64 {
    let d = depth + i % 3;
    let r = match i % 3 {
        0 => chain_a(d, i),
        1 => chain_b(d, i),
        _ => chain_c(d, i),
    };
    black_box(r)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let depth: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(12);
    let handles: Vec<_> = (0..n).map(|i| thread::spawn(move || worker(i, depth))).collect();
    while ARRIVED.load(Ordering::SeqCst) < n as usize {
        thread::sleep(std::time::Duration::from_millis(1));
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    for h in handles {
        h.join().unwrap();
    }
}
