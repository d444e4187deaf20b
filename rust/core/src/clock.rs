//! Time enters the core only through [`Clock`], so tests drive TTLs, back-offs
//! and heartbeats by hand instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A monotonic millisecond clock.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since an arbitrary, fixed origin. Never goes backwards.
    fn now_ms(&self) -> u64;

    /// Wall-clock time, milliseconds since 1970-01-01 UTC, if this clock
    /// knows it: what a shared input dated by a clock (a FAN event's
    /// `timestamp=`) is measured against, so that a drain's deadline ends
    /// at one instant in every process. `None` (the default): deadlines
    /// count from when each input arrives.
    fn unix_ms(&self) -> Option<u64> {
        None
    }
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

    fn unix_ms(&self) -> Option<u64> {
        SystemTime::now().duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as u64)
    }
}

/// A clock that only moves when told to; cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    /// The wall clock's reading at `now`'s reading (`with_unix_ms`), if any.
    unix_at: Option<(u64, u64)>,
}

impl ManualClock {
    /// Starts at `start_ms` (use a value > 0).
    pub fn new(start_ms: u64) -> Self {
        ManualClock { now: Arc::new(AtomicU64::new(start_ms.max(1))), unix_at: None }
    }

    /// This clock with a wall clock that reads `unix_ms` (milliseconds since
    /// 1970-01-01 UTC) now and moves with it ([`Clock::unix_ms`]).
    pub fn with_unix_ms(self, unix_ms: u64) -> Self {
        let now = self.now.load(Ordering::SeqCst);
        ManualClock { now: self.now, unix_at: Some((now, unix_ms)) }
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

    fn unix_ms(&self) -> Option<u64> {
        let (at, unix) = self.unix_at?;
        Some(unix.saturating_add(self.now_ms().saturating_sub(at)))
    }
}
