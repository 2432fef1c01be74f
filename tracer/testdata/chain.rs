// chain.rs spends argv[1] seconds of CPU time in main -> spin_a -> spin_b ->
// spin_c, like chain.c, for the Rust recording test. It sticks to APIs of
// old toolchains (Debian 12 ships rustc 1.63: no std::hint::black_box).
use std::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use std::time::Duration;

static mut SINK: u64 = 0;

fn keep(x: u64) -> u64 {
    unsafe {
        write_volatile(addr_of_mut!(SINK), x);
        read_volatile(addr_of!(SINK))
    }
}

fn cpu_time() -> Duration {
    // /proc/self/stat fields 14 and 15 are utime and stime in clock ticks
    // (USER_HZ = 100); after the ")" that ends the name they are the 12th
    // and 13th words.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let w: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((tick(11) + tick(12)) * 10)
}

// publish keeps spin_c from being a leaf: leaf functions get no frame
// even with frame pointers forced, which would hide spin_b.
#[no_mangle]
#[inline(never)]
pub extern "C" fn publish(x: u64) -> u64 {
    keep(x)
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn spin_c(n: u64) -> u64 {
    let mut x: u64 = 1;
    for i in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i ^ (x >> 7));
    }
    publish(x) + 1
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn spin_b(n: u64) -> u64 {
    keep(spin_c(n)) + 1
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn spin_a(n: u64) -> u64 {
    keep(spin_b(n)) + 1
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let end = cpu_time() + Duration::from_secs_f64(secs);
    let mut t = 0u64;
    while cpu_time() < end {
        t = t.wrapping_add(spin_a(keep(5_000_000)));
    }
    keep(t);
}
