//! Memory cost of transaction affinity: 1,000,000 live XA gtrids on a 3-node
//! cluster, measured with a counting global allocator and `/proc` RSS.
//!
//! ```text
//! cargo run --release -p racaffinity --example memory          # both gtrid sizes
//! cargo run --release -p racaffinity --example memory -- 64    # one size: 64 bytes
//! cargo run --release -p racaffinity --example memory -- 24-36 # one size range
//! ```
//!
//! Without arguments each size runs in a fresh child process, so one run's
//! freed-but-retained heap cannot hide in the other's RSS delta. Prints one
//! `MEMORY tx_affinities=... heap_bytes=... bytes_per_entry=... rss_delta=...`
//! line per size and exits non-zero if any run's heap growth exceeds 128 MiB.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use racaffinity::Cluster;

const ENTRIES: usize = 1_000_000;
const LIMIT_BYTES: usize = 128 << 20;

/// `System` plus a live-bytes gauge (requested sizes; malloc's own per-chunk
/// overhead shows up only in RSS) and its high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s contract (valid layouts, pointers it returned) is
// upheld by our caller's; the only addition is updating two atomics, which
// neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Resident set size in bytes (`VmRSS` of `/proc/self/status`); 0 if unavailable.
fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[path = "../support/splitmix.rs"]
mod splitmix;
use splitmix::Mix;

/// Writes gtrid number `i` into `buf` and returns its length, in `min..=max`.
///
/// Shaped like a Narayana gtrid: a per-TM prefix (host address, process id,
/// start time: shared by every gtrid of the process), a sequence number that
/// makes it unique, then node-name-like filler up to the chosen length.
fn gtrid(i: u64, min: usize, max: usize, prefix: &[u8; 16], r: &mut Mix, buf: &mut [u8; 64]) -> usize {
    let len = min + (r.next() as usize) % (max - min + 1);
    buf[..16].copy_from_slice(prefix);
    buf[16..24].copy_from_slice(&i.to_be_bytes());
    for chunk in buf[24..len].chunks_mut(8) {
        let b = r.next().to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    len
}

fn run(min: usize, max: usize) -> ExitCode {
    assert!((24..=64).contains(&min) && min <= max && max <= 64, "gtrid sizes must be within 24..=64");
    let cluster = Cluster::from_config_text("nodes = MYDB1, MYDB2, MYDB3").expect("valid config");
    let mut r = Mix(0x6a7a_0000 + max as u64);
    let mut prefix = [0u8; 16];
    prefix[..8].copy_from_slice(&r.next().to_le_bytes());
    prefix[8..].copy_from_slice(&r.next().to_le_bytes());
    let mut buf = [0u8; 64];
    let mut gtrid_bytes = 0usize;

    let (heap0, rss0) = (LIVE.load(Ordering::Relaxed), rss_bytes());
    PEAK.store(heap0, Ordering::Relaxed);
    let t = Instant::now();
    for i in 0..ENTRIES as u64 {
        let len = gtrid(i, min, max, &prefix, &mut r, &mut buf);
        gtrid_bytes += len;
        cluster.tx_begin(&buf[..len]).expect("tx_begin");
    }
    let elapsed = t.elapsed();
    let (heap1, rss1, peak) = (LIVE.load(Ordering::Relaxed), rss_bytes(), PEAK.load(Ordering::Relaxed));
    assert_eq!(cluster.tx_count(), ENTRIES, "every gtrid must be distinct and live");

    let heap = heap1.saturating_sub(heap0);
    let sizes = if min == max { format!("{min}") } else { format!("{min}-{max}") };
    println!(
        "MEMORY tx_affinities={ENTRIES} heap_bytes={heap} bytes_per_entry={:.1} rss_delta={} \
         gtrid_bytes={sizes} avg_gtrid={:.1} peak_heap_bytes={} insert_ns={:.0}",
        heap as f64 / ENTRIES as f64,
        rss1.saturating_sub(rss0),
        gtrid_bytes as f64 / ENTRIES as f64,
        peak - heap0,
        elapsed.as_nanos() as f64 / ENTRIES as f64,
    );
    // Keep the registry alive until after the measurement above.
    drop(cluster);
    if heap > LIMIT_BYTES {
        eprintln!("FAIL: {heap} heap bytes for {ENTRIES} transactions exceeds {LIMIT_BYTES} (128 MiB)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn parse_sizes(arg: &str) -> Option<(usize, usize)> {
    match arg.split_once('-') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => arg.parse().ok().map(|n| (n, n)),
    }
}

fn main() -> ExitCode {
    if let Some(arg) = std::env::args().nth(1) {
        let Some((min, max)) = parse_sizes(&arg) else {
            eprintln!("usage: memory [MIN-MAX | LEN]   (gtrid bytes, 24..=64)");
            return ExitCode::from(2);
        };
        return run(min, max);
    }
    let exe = std::env::current_exe().expect("own path");
    let mut ok = true;
    for sizes in ["24-36", "64"] {
        let status = Command::new(&exe).arg(sizes).status().expect("spawn child run");
        ok &= status.success();
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
