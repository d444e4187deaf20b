//! Striped counters: hot-path counters are bumped by every pick, and a single
//! shared atomic would bounce one cache line between all cores.

use std::sync::atomic::{AtomicU64, Ordering};

// A power of two: `stripe()` takes the top bits of a hash.
pub(crate) const STRIPES: usize = 8;

#[repr(align(64))]
#[derive(Default)]
struct Cell64(AtomicU64);

/// A counter split over cache-line-padded cells; reads sum them.
#[derive(Default)]
pub(crate) struct StripedCounter {
    cells: [Cell64; STRIPES],
}

/// The stripe for the calling thread, from the address of a local: thread
/// stacks lie at least a stack size apart (glibc 8 MiB, JVM 1 MiB by default),
/// so 64 KiB granules differ between threads and stay put along one call
/// chain. A `thread_local!` did the same job, but inside the shared library
/// Rust compiles it to the general-dynamic TLS model: a `__tls_get_addr` call
/// per counter bump, which made every C, Java and Python route several ns
/// dearer than the same route in a Rust binary. Two threads may share a
/// stripe; that costs contention, never a count (reads sum every cell).
#[inline]
pub(crate) fn stripe() -> usize {
    let marker = 0u8;
    let granule = (std::ptr::addr_of!(marker) as usize >> 16) as u64;
    // Fibonacci hashing: the top bits of the product mix every granule bit.
    (granule.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STRIPES.trailing_zeros())) as usize
}

impl StripedCounter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.cells[stripe()].0.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1);
    }

    /// Adds a signed amount; gauges (in-flight) decrement on another thread's
    /// stripe than they incremented, so cells wrap but the sum stays exact.
    #[inline]
    pub(crate) fn add_signed(&self, n: i64) {
        self.add(n as u64);
    }

    #[inline]
    pub(crate) fn sum(&self) -> u64 {
        self.cells.iter().fold(0u64, |acc, c| acc.wrapping_add(c.0.load(Ordering::Relaxed)))
    }

    #[inline]
    pub(crate) fn sum_signed(&self) -> i64 {
        self.sum() as i64
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn gauge_sum_is_exact_across_threads() {
        let c = Arc::new(StripedCounter::default());
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if i % 2 == 0 {
                            c.add_signed(1)
                        } else {
                            c.add_signed(-1)
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.sum_signed(), 0);
        c.incr();
        assert_eq!(c.sum(), 1);
    }
}
