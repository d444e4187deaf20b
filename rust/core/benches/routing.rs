//! Routing hot paths, each measured next to a baseline in the same run so the
//! README can report ratios rather than machine-dependent absolute numbers.
//!
//! ```text
//! cargo bench -p racaffinity --bench routing                   # full run
//! RACAFF_BENCH_QUICK=1 cargo bench -p racaffinity --bench routing  # < 1 min
//! python3 rust/core/benches/summary.py                          # markdown table
//! ```
//!
//! Groups (criterion ids `<group>/<bench>`):
//!
//! | group           | measured                                   | baseline                          |
//! |-----------------|--------------------------------------------|-----------------------------------|
//! | `pinned_pick`   | `pick()` on a `pin_thread()`-pinned thread | `thread_local!` `Cell<u64>` read  |
//! | `unpinned_pick` | `pick()` per policy, 3 and 8 nodes         | `AtomicU64::fetch_add`            |
//! | `tx`            | `tx_begin` + `tx_end`, 4096 cycled gtrids  | `Mutex<HashMap>` insert + remove  |
//! | `session`       | `session_route` of a pre-routed key        | `Mutex<HashMap>` get              |
//! | `key_route`     | `route_key` / `route_key_i64`, 8 nodes     | `hash::hash_bytes` / `hash_i64`   |
//! | `threads`       | pinned / unpinned `pick()`, 1 vs 2 threads | (each other: 2-thread scaling)    |
//!
//! After the run the binary reads criterion's `new/estimates.json` files and
//! prints `RATIO ...` lines (medians). The pair list here is mirrored in
//! `summary.py`; keep the two in step.

use std::cell::Cell;
use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use racaffinity::{hash, Cluster};

// ---- inputs ------------------------------------------------------------------

/// Inputs are cycled through a power-of-two table, so the index is a mask.
const KEYS: usize = 4096;

#[path = "../support/splitmix.rs"]
mod splitmix;
use splitmix::Mix;

/// `n` distinct ~20-byte gtrids: a fixed 8-byte "TM instance" prefix (every
/// gtrid of one transaction manager shares it), a 4-byte sequence and 8
/// random bytes.
fn gtrids(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut r = Mix(seed);
    let prefix = r.next().to_be_bytes();
    (0..n as u32)
        .map(|i| {
            let mut g = Vec::with_capacity(20);
            g.extend_from_slice(&prefix);
            g.extend_from_slice(&i.to_be_bytes());
            g.extend_from_slice(&r.next().to_le_bytes());
            g
        })
        .collect()
}

/// JSESSIONID-like keys: 32 hex characters.
fn session_keys(n: usize) -> Vec<Vec<u8>> {
    let mut r = Mix(0x5e55);
    (0..n).map(|_| format!("{:016X}{:016X}", r.next(), r.next()).into_bytes()).collect()
}

/// Sharding-key-like byte keys, e.g. `customer:00012345`.
fn data_keys(n: usize) -> Vec<Vec<u8>> {
    let mut r = Mix(0xda7a);
    (0..n).map(|_| format!("customer:{:08}", r.next() % 100_000_000).into_bytes()).collect()
}

fn int_keys(n: usize) -> Vec<i64> {
    let mut r = Mix(0x1264);
    (0..n).map(|_| (r.next() >> 1) as i64).collect()
}

fn cluster(nodes: usize, extra: &str) -> Cluster {
    let names: Vec<String> = (1..=nodes).map(|i| format!("MYDB{i}")).collect();
    Cluster::from_config_text(&format!("nodes = {}\n{extra}", names.join(", "))).expect("valid bench config")
}

const POLICIES: [&str; 4] = ["random", "round_robin", "weighted", "least_outstanding"];

// ---- groups ------------------------------------------------------------------

thread_local! {
    static TL: Cell<u64> = const { Cell::new(0x2a) };
}

fn pinned_pick(c: &mut Criterion) {
    let cl = cluster(3, "");
    let mut g = c.benchmark_group("pinned_pick");
    {
        let pin = cl.pin_thread().expect("pin");
        g.bench_function("pick", |b| b.iter(|| black_box(cl.pick().expect("pick"))));
        assert_eq!(cl.pick().expect("pick").node, pin.node(), "bench ran off the pinned thread");
    }
    g.bench_function("thread_local", |b| b.iter(|| TL.with(|t| black_box(t.get()))));
    g.finish();
}

fn unpinned_pick(c: &mut Criterion) {
    let mut g = c.benchmark_group("unpinned_pick");
    for policy in POLICIES {
        for nodes in [3usize, 8] {
            let cl = cluster(nodes, &format!("policy = {policy}"));
            assert!(cl.thread_pinned_node().is_none());
            g.bench_with_input(BenchmarkId::new(policy, nodes), &cl, |b, cl| {
                b.iter(|| black_box(cl.pick().expect("pick")))
            });
        }
    }
    let a = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add", |b| b.iter(|| black_box(a.fetch_add(1, Ordering::Relaxed))));
    g.finish();
}

fn tx(c: &mut Criterion) {
    let cl = cluster(3, "");
    let ids = gtrids(KEYS, 0x7a);
    // A steady-state TM has other transactions in flight: give both maps the
    // same 4096 live background entries so neither measures an empty table.
    let background = gtrids(KEYS, 0xb6);
    let mut base: HashMap<Vec<u8>, u32> = HashMap::new();
    for g in &background {
        cl.tx_begin(g).expect("tx_begin");
        base.insert(g.clone(), 1);
    }
    let base = Mutex::new(base);

    let mut g = c.benchmark_group("tx");
    let mut i = 0usize;
    g.bench_function("begin_end", |b| {
        b.iter(|| {
            let gt = &ids[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(cl.tx_begin(gt).expect("tx_begin"));
            black_box(cl.tx_end(gt).expect("tx_end"))
        })
    });
    let mut i = 0usize;
    g.bench_function("mutex_hashmap", |b| {
        b.iter(|| {
            let gt = &ids[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(base.lock().unwrap().insert(gt.clone(), 1));
            black_box(base.lock().unwrap().remove(gt.as_slice()))
        })
    });
    g.finish();
    assert_eq!(cl.tx_count(), KEYS, "begin/end must leave only the background entries");
}

fn session(c: &mut Criterion) {
    let cl = cluster(3, "");
    let keys = session_keys(KEYS);
    let mut base: HashMap<Vec<u8>, u32> = HashMap::new();
    for k in &keys {
        let r = cl.session_route(k).expect("session_route");
        base.insert(k.clone(), r.node.0);
    }
    let base = Mutex::new(base);

    let mut g = c.benchmark_group("session");
    let mut i = 0usize;
    g.bench_function("route_hit", |b| {
        b.iter(|| {
            let k = &keys[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(cl.session_route(k).expect("session_route"))
        })
    });
    let mut i = 0usize;
    g.bench_function("mutex_hashmap_get", |b| {
        b.iter(|| {
            let k = &keys[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(base.lock().unwrap().get(k.as_slice()).copied())
        })
    });
    g.finish();
    assert_eq!(cl.session_count(), KEYS);
}

fn key_route(c: &mut Criterion) {
    let cl = cluster(8, "");
    let keys = data_keys(KEYS);
    let ints = int_keys(KEYS);

    let mut g = c.benchmark_group("key_route");
    let mut i = 0usize;
    g.bench_function("route_key", |b| {
        b.iter(|| {
            let k = &keys[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(cl.route_key(k).expect("route_key"))
        })
    });
    let mut i = 0usize;
    g.bench_function("hash_bytes", |b| {
        b.iter(|| {
            let k = &keys[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(hash::hash_bytes(black_box(k)))
        })
    });
    let mut i = 0usize;
    g.bench_function("route_key_i64", |b| {
        b.iter(|| {
            let k = ints[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(cl.route_key_i64(k).expect("route_key_i64"))
        })
    });
    let mut i = 0usize;
    g.bench_function("hash_i64", |b| {
        b.iter(|| {
            let k = ints[i & (KEYS - 1)];
            i = i.wrapping_add(1);
            black_box(hash::hash_i64(black_box(k)))
        })
    });
    g.finish();
}

/// What each thread of the `threads` group does per iteration.
#[derive(Clone, Copy, PartialEq)]
enum Work {
    /// `pick()` on a `pin_thread()`-pinned thread.
    Pinned,
    /// `pick()` with no pin (the cluster's default policy, least_outstanding).
    Unpinned,
    /// Shared-nothing arithmetic: the machine's own scaling ceiling, so a
    /// shortfall can be blamed on the core or on the box.
    Compute,
}

fn do_work(cl: &Cluster, work: Work, iters: u64) {
    match work {
        Work::Pinned | Work::Unpinned => {
            for _ in 0..iters {
                black_box(cl.pick().expect("pick"));
            }
        }
        Work::Compute => {
            let mut h = 0u64;
            for i in 0..iters {
                h = hash::hash_i64(black_box(h ^ i) as i64);
            }
            black_box(h);
        }
    }
}

/// Runs `work` `iters` times on this thread, pinned for `Work::Pinned`.
fn timed(cl: &Cluster, work: Work, iters: u64) -> (Instant, Instant) {
    let _pin = (work == Work::Pinned).then(|| cl.pin_thread().expect("pin"));
    black_box(cl.pick().expect("pick")); // thread-locals warm before the clock starts
    let t0 = Instant::now();
    do_work(cl, work, iters);
    (t0, Instant::now())
}

/// A second, long-lived worker for the 2-thread runs. It busy-waits for jobs
/// instead of sleeping: a thread spawned or woken per sample tends to be
/// placed on the waker's CPU and only migrated milliseconds later, which on
/// this 2-vCPU box made whole samples run both "parallel" threads on one CPU.
struct Helper {
    job: AtomicU64,
    iters: AtomicU64,
    done: AtomicU64,
    stop: std::sync::atomic::AtomicBool,
    span: Mutex<Option<(Instant, Instant)>>,
}

impl Helper {
    fn new() -> Self {
        Helper {
            job: AtomicU64::new(0),
            iters: AtomicU64::new(0),
            done: AtomicU64::new(0),
            stop: std::sync::atomic::AtomicBool::new(false),
            span: Mutex::new(None),
        }
    }

    fn serve(&self, cl: &Cluster, work: Work) {
        let _pin = (work == Work::Pinned).then(|| cl.pin_thread().expect("pin"));
        black_box(cl.pick().expect("pick"));
        let mut seen = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let job = self.job.load(Ordering::Acquire);
            if job == seen {
                std::hint::spin_loop();
                continue;
            }
            seen = job;
            let t0 = Instant::now();
            do_work(cl, work, self.iters.load(Ordering::Relaxed));
            *self.span.lock().unwrap() = Some((t0, Instant::now()));
            self.done.store(job, Ordering::Release);
        }
    }

    /// This thread and the helper each do `iters` ops from a common start;
    /// returns the wall time from the first start to the last finish, so one
    /// criterion "iteration" is two operations done in parallel.
    fn pair(&self, cl: &Cluster, work: Work, iters: u64) -> Duration {
        self.iters.store(iters, Ordering::Relaxed);
        let job = self.job.fetch_add(1, Ordering::Release) + 1;
        let (a0, a1) = timed(cl, work, iters);
        while self.done.load(Ordering::Acquire) != job {
            std::hint::spin_loop();
        }
        let (b0, b1) = self.span.lock().unwrap().take().expect("helper span");
        a1.max(b1) - a0.min(b0)
    }
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("threads");
    for (name, work) in [("pinned", Work::Pinned), ("unpinned", Work::Unpinned), ("compute", Work::Compute)] {
        let cl = cluster(3, "");
        g.bench_function(BenchmarkId::new(name, 1), |b| {
            b.iter_custom(|iters| {
                let (t0, t1) = timed(&cl, work, iters);
                t1 - t0
            })
        });
        let helper = Helper::new();
        std::thread::scope(|s| {
            s.spawn(|| helper.serve(&cl, work));
            g.bench_function(BenchmarkId::new(name, 2), |b| b.iter_custom(|iters| helper.pair(&cl, work, iters)));
            helper.stop.store(true, Ordering::Relaxed);
        });
    }
    g.finish();
}

// ---- ratios ------------------------------------------------------------------

/// `(label, measured id, baseline id)`; mirrored in `summary.py`.
fn ratio_pairs() -> Vec<(String, String, String)> {
    let mut v = vec![(
        "pinned_pick/thread_local".to_string(),
        "pinned_pick/pick".to_string(),
        "pinned_pick/thread_local".to_string(),
    )];
    for p in POLICIES {
        for n in [3, 8] {
            v.push((
                format!("unpinned_pick/{p}/{n}/atomic_fetch_add"),
                format!("unpinned_pick/{p}/{n}"),
                "unpinned_pick/atomic_fetch_add".into(),
            ));
        }
    }
    v.push(("tx/mutex_hashmap".into(), "tx/begin_end".into(), "tx/mutex_hashmap".into()));
    v.push(("session/mutex_hashmap_get".into(), "session/route_hit".into(), "session/mutex_hashmap_get".into()));
    v.push(("key_route/hash_bytes".into(), "key_route/route_key".into(), "key_route/hash_bytes".into()));
    v.push(("key_route_i64/hash_i64".into(), "key_route/route_key_i64".into(), "key_route/hash_i64".into()));
    v
}

/// Where criterion writes, resolved the way criterion 0.5 does it
/// (`$CRITERION_HOME`, `$CARGO_TARGET_DIR/criterion`, else the workspace's
/// `target/criterion`); the bench passes it to criterion explicitly so the two
/// cannot disagree.
fn criterion_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        if dir.join("Cargo.lock").exists() {
            return dir.join("target").join("criterion");
        }
        if !dir.pop() {
            return PathBuf::from("target/criterion");
        }
    }
}

/// Median (ns) of one benchmark from the last run, if it ran.
fn median_ns(dir: &Path, id: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(id).join("new").join("estimates.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn print_ratios(dir: &Path, started: std::time::SystemTime) {
    // Only this run's results: a filtered run must not report stale files.
    let fresh = |id: &str| {
        let p = dir.join(id).join("new").join("estimates.json");
        std::fs::metadata(p).and_then(|m| m.modified()).map(|t| t >= started).unwrap_or(false)
    };
    let get = |id: &str| if fresh(id) { median_ns(dir, id) } else { None };
    println!();
    for (label, m, b) in ratio_pairs() {
        if let (Some(m), Some(b)) = (get(&m), get(&b)) {
            println!("RATIO {label} = {:.1}   ({m:.2} ns / {b:.2} ns)", m / b);
        }
    }
    // One iteration of `threads/<kind>/T` is T parallel picks, so
    // throughput(T) = T / time(T) and throughput(2)/throughput(1) = 2·t1/t2.
    for kind in ["pinned", "unpinned", "compute"] {
        if let (Some(t1), Some(t2)) = (get(&format!("threads/{kind}/1")), get(&format!("threads/{kind}/2"))) {
            println!(
                "RATIO threads_{kind}_2v1 = {:.2}   (1 thread {t1:.2} ns/pick, 2 threads {t2:.2} ns per 2 picks)",
                2.0 * t1 / t2
            );
        }
    }
}

fn main() {
    let quick = std::env::var("RACAFF_BENCH_QUICK").is_ok_and(|v| v == "1");
    let dir = criterion_dir();
    let mut c = Criterion::default().output_directory(&dir);
    if quick {
        c = c.measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(300)).sample_size(20);
    }
    // CLI flags (filters, --measurement-time, --test) override the defaults above.
    let mut c = c.configure_from_args();
    let started = std::time::SystemTime::now();

    pinned_pick(&mut c);
    unpinned_pick(&mut c);
    tx(&mut c);
    session(&mut c);
    key_route(&mut c);
    threads(&mut c);

    c.final_summary();
    print_ratios(&dir, started);
}
