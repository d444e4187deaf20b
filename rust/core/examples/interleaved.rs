//! Rust's fast paths against their physical limit, in one process, round by
//! round (odd rounds in reverse order), each round timed in the thread's CPU
//! time. Criterion runs its benchmarks one after another, which on this
//! shared machine moved a ratio from 6.7x to 39x between runs.
//!
//! Ratios are taken only against one relaxed `fetch_add` (about 5–10 ns
//! here): the median of the per-round ratios, with their min–max. Subjects
//! of a few ns (a `thread_local!` read, a pinned `pick()`) get their
//! absolute time instead, median and min–max over the rounds: against a
//! sub-nanosecond baseline a ratio moved 1.8x between runs while the
//! subject did not.
//!
//! ```text
//! cargo run --release -p racaffinity --example interleaved [-- ROUNDS]
//! ```
//! Prints a markdown table, `RBENCH_PAIR <name> <ns> <baseline ns> <median> <min> <max>` lines
//! (baseline: the `fetch_add`) and `RBENCH_ABS <name> <ns> <min> <max>` lines.

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use racaffinity::{Cluster, Outcome};

static COUNTER: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static TL: Cell<u64> = const { Cell::new(1) };
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc_timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a writable timespec.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[repr(C)]
struct libc_timespec {
    tv_sec: i64,
    tv_nsec: i64,
}
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
extern "C" {
    fn clock_gettime(clk: i32, ts: *mut libc_timespec) -> i32;
}

type Case<'a> = (&'a str, &'a str, Box<dyn FnMut(u64) -> u64 + 'a>);

/// The case every ratio is taken against (index in `cases`).
const BASELINE: usize = 1;
/// Cases too small for a ratio: absolute times only.
const ABSOLUTE: [&str; 3] = ["thread_local", "atomic_add", "pinned_pick"];

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(21);
    let c = Cluster::from_config_text("name = bench\nnodes = RAC1, RAC2, RAC3").expect("valid config");
    let _pin = c.pin_thread().expect("pinned");
    let lo = Cluster::from_config_text(
        "name = balanced\nnodes = RAC1, RAC2, RAC3, RAC4, RAC5, RAC6, RAC7, RAC8\npolicy = least_outstanding",
    )
    .expect("valid config");
    let per_unit = Cluster::from_config_text("name = per_unit\nnodes = RAC1, RAC2, RAC3").expect("valid config");
    let mut cases: Vec<Case> = vec![
        (
            "thread_local",
            "`thread_local!` `Cell<u64>` read",
            Box::new(|n| (0..n).fold(0, |acc, _| acc + TL.with(|t| black_box(t.get())))),
        ),
        (
            "atomic_add",
            "one `AtomicU64::fetch_add` (Relaxed): why a pinned pick counts its hit in a per-thread tally",
            Box::new(|n| (0..n).fold(0, |acc, _| acc + COUNTER.fetch_add(1, Ordering::Relaxed))),
        ),
        (
            "pinned_pick",
            "`pick()` on a pinned thread",
            Box::new(|n| (0..n).fold(0, |acc, _| acc + u64::from(c.pick().unwrap().node.0))),
        ),
        (
            "least_outstanding_pick",
            "`pick()` unpinned, `least_outstanding` over 8 nodes",
            Box::new(|n| (0..n).fold(0, |acc, _| acc + u64::from(lo.pick().unwrap().node.0))),
        ),
        (
            "pinned_acquire_release",
            "`acquire()` + `release(Ok)` on a pinned thread",
            Box::new(|n| {
                (0..n).fold(0, |acc, _| {
                    let l = c.acquire().unwrap();
                    let node = l.node().0;
                    l.release(Outcome::Ok);
                    acc + u64::from(node)
                })
            }),
        ),
        (
            "two_atomic_adds",
            "the floor of a lease counted in a shared word: two relaxed `fetch_add`s and a `thread_local!` read",
            Box::new(|n| {
                (0..n).fold(0, |acc, _| {
                    let a = COUNTER.fetch_add(1, Ordering::Relaxed);
                    let t = TL.with(|t| black_box(t.get()));
                    acc + a + t + COUNTER.fetch_add(1, Ordering::Relaxed)
                })
            }),
        ),
        (
            "pin_unpin",
            "`pin_thread()` + drop: a thread pin per unit of work",
            Box::new(|n| (0..n).fold(0, |acc, _| acc + u64::from(per_unit.pin_thread().unwrap().node().0))),
        ),
    ];
    // Calibrate: about 2 ms of thread CPU time per case and round.
    let iters: Vec<u64> = cases
        .iter_mut()
        .map(|(_, _, f)| {
            let mut n = 1_000u64;
            loop {
                let t = thread_cpu_ns();
                black_box(f(n));
                let dt = thread_cpu_ns() - t;
                if dt >= 500_000 && n >= 10_000 {
                    break (n as f64 * 2_000_000.0 / dt as f64) as u64;
                }
                n *= 2;
            }
        })
        .collect();
    let mut ns = vec![Vec::with_capacity(rounds); cases.len()];
    for r in 0..rounds {
        for k in 0..cases.len() {
            let i = if r % 2 == 0 { k } else { cases.len() - 1 - k };
            let t = thread_cpu_ns();
            black_box((cases[i].2)(iters[i]));
            ns[i].push((thread_cpu_ns() - t) as f64 / iters[i] as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\nRust, same process, {rounds} interleaved rounds (thread CPU time)\n");
    println!("| subject | ns/op: median | min | max | / one relaxed `fetch_add`: median | min | max |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for k in 0..cases.len() {
        let (lo, hi) = (ns[k].iter().cloned().fold(f64::MAX, f64::min), ns[k].iter().cloned().fold(0.0, f64::max));
        let subject = median(&mut ns[k].clone());
        if ABSOLUTE.contains(&cases[k].0) {
            println!("| {} | {subject:.2} | {lo:.2} | {hi:.2} | – | – | – |", cases[k].1);
            println!("RBENCH_ABS {} {subject:.3} {lo:.3} {hi:.3}", cases[k].0);
            continue;
        }
        let mut ratio: Vec<f64> = (0..rounds).map(|r| ns[k][r] / ns[BASELINE][r]).collect();
        let (rlo, rhi) = (ratio.iter().cloned().fold(f64::MAX, f64::min), ratio.iter().cloned().fold(0.0, f64::max));
        let med = median(&mut ratio);
        let base = median(&mut ns[BASELINE].clone());
        println!("| {} | {subject:.2} | {lo:.2} | {hi:.2} | {med:.2}× | {rlo:.2}× | {rhi:.2}× |", cases[k].1);
        println!("RBENCH_PAIR {} {subject:.3} {base:.3} {med:.4} {rlo:.4} {rhi:.4}", cases[k].0);
    }
}
