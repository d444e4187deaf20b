//! Striped counters: hot-path counters are bumped by every pick, and a single
//! shared atomic would bounce one cache line between all cores.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 8;

#[repr(align(64))]
#[derive(Default)]
struct Cell64(AtomicU64);

/// A counter split over cache-line-padded cells; reads sum them.
#[derive(Default)]
pub(crate) struct StripedCounter {
    cells: [Cell64; STRIPES],
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn stripe() -> usize {
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(v);
        v
    })
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

    pub(crate) fn sum(&self) -> u64 {
        self.cells.iter().fold(0u64, |acc, c| acc.wrapping_add(c.0.load(Ordering::Relaxed)))
    }

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
