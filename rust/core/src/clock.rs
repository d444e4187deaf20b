//! Time enters the core only through [`Clock`], so tests drive TTLs, back-offs
//! and heartbeats by hand instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A monotonic millisecond clock.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since an arbitrary, fixed origin. Never goes backwards.
    fn now_ms(&self) -> u64;
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        SystemClock { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // +1 so that 0 can mean "never" in timestamps stored by the core.
        self.origin.elapsed().as_millis() as u64 + 1
    }
}

/// A clock that only moves when told to; cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// Starts at `start_ms` (use a value > 0).
    pub fn new(start_ms: u64) -> Self {
        ManualClock { now: Arc::new(AtomicU64::new(start_ms.max(1))) }
    }

    /// Moves time forward.
    pub fn advance_ms(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
