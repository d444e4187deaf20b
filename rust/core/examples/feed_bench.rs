//! The topology feed's costs, against a running etcd (`make bench-feed`
//! starts a 3-member cluster with tests/cluster/etcdnodes):
//!
//! 1. a subscribed cluster's pinned `pick()` and unpinned `acquire()` +
//!    `release(Ok)` against an unsubscribed one's, in one process, round by
//!    round (odd rounds in reverse order), each timed in the thread's CPU
//!    time; the ratio is the median of the per-round ratios with min–max;
//! 2. the time from an etcd put to its application in 3 subscriber
//!    processes (this program started again with `subscriber`), p50/p99/max
//!    over the puts, measured on the machine's realtime clock, which the
//!    processes share.
//!
//! ```text
//! RACAFF_ETCD_ENDPOINTS=127.0.0.1:2379,… cargo run --release -p racaffinity --example feed_bench [-- ROUNDS PUTS]
//! ```

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use racaffinity::feed::etcd::EtcdClient;
use racaffinity::{Cluster, Outcome};

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}
extern "C" {
    fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
}

fn thread_cpu_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id (CLOCK_THREAD_CPUTIME_ID) and a writable timespec.
    unsafe { clock_gettime(3, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn config(feed: Option<&str>) -> String {
    let mut text = String::from("name = bench\nnodes = RAC1, RAC2, RAC3\n");
    if let Some(f) = feed {
        text.push_str(&format!("topology.feed = {f}\n"));
    }
    text
}

/// `subscriber URL`: prints `ready`, then `<weight> <realtime ns>` each time
/// node RAC1's weight changes (the parent puts the weight records).
fn subscriber(url: &str) {
    let c = Cluster::from_config_text(&config(Some(url))).expect("valid config");
    let node = c.node_by_name("RAC1").expect("RAC1");
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut seen = node.weight();
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        let w = node.weight();
        if w != seen {
            seen = w;
            writeln!(out, "{w} {}", now_ns()).unwrap();
            out.flush().unwrap();
            if w == 1 {
                return;
            }
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("subscriber") {
        subscriber(&args[2]);
        return;
    }
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(21);
    let puts: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let endpoints = std::env::var("RACAFF_ETCD_ENDPOINTS").expect("RACAFF_ETCD_ENDPOINTS (make bench-feed sets it)");
    let prefix = format!("bench-{}", std::process::id());
    let url = format!("etcd://{endpoints}/{prefix}");

    // 1. Pick costs, subscribed beside unsubscribed.
    let plain = Cluster::from_config_text(&config(None)).expect("valid config");
    let fed = Cluster::from_config_text(&config(Some(&url))).expect("valid config");
    assert!(fed.metrics().feed.is_some_and(|f| f.connected), "the subscribed cluster reached etcd");
    let n = 200_000u64;
    let pinned = |c: &Cluster| {
        let _pin = c.pin_thread().expect("pinned");
        let t = thread_cpu_ns();
        for _ in 0..n {
            black_box(c.pick().expect("pick"));
        }
        (thread_cpu_ns() - t) as f64 / n as f64
    };
    let unpinned = |c: &Cluster| {
        let t = thread_cpu_ns();
        for _ in 0..n {
            let lease = c.acquire().expect("acquire");
            black_box(&lease);
            lease.release(Outcome::Ok);
        }
        (thread_cpu_ns() - t) as f64 / n as f64
    };
    println!("| subject | subscribed ns/op (median) | unsubscribed ns/op (median) | subscribed / unsubscribed: median | min | max |");
    println!("|---|---|---|---|---|---|");
    type Path<'a> = (&'a str, &'a dyn Fn(&Cluster) -> f64);
    let paths: [Path; 2] = [("pinned `pick()`", &pinned), ("unpinned `acquire()` + `release(Ok)`", &unpinned)];
    for (name, f) in paths {
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (x, y) = if round % 2 == 0 {
                let x = f(&fed);
                (x, f(&plain))
            } else {
                let y = f(&plain);
                (f(&fed), y)
            };
            a.push(x);
            b.push(y);
            r.push(x / y);
        }
        let (lo, hi) = (r.iter().cloned().fold(f64::MAX, f64::min), r.iter().cloned().fold(0.0, f64::max));
        println!(
            "| {name} | {:.1} | {:.1} | {:.2}× | {lo:.2} | {hi:.2} |",
            median(&mut a),
            median(&mut b),
            median(&mut r)
        );
    }
    drop(fed);

    // 2. Put-to-apply latency in 3 subscriber processes.
    let kv = EtcdClient::new(endpoints.split(',').map(str::to_string).collect(), Duration::from_secs(5));
    let me = std::env::current_exe().expect("own path");
    let mut children = Vec::new();
    for _ in 0..3 {
        let mut child =
            Command::new(&me).args(["subscriber", &url]).stdout(Stdio::piped()).spawn().expect("subscriber");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
        children.push((child, lines));
    }
    let key = format!("{prefix}/node/RAC1/weight");
    let mut sent = Vec::new();
    for i in 0..puts {
        // 2..=puts+1, then 1 last (the subscribers' stop signal).
        let w = if i + 1 == puts { 1 } else { i + 2 };
        let t = now_ns();
        kv.put(&key, &w.to_string(), 0).expect("put");
        sent.push((w, t));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut lat = Vec::new();
    for (mut child, lines) in children {
        for line in lines.map_while(Result::ok) {
            let mut it = line.split(' ');
            let w: u32 = it.next().unwrap().parse().unwrap();
            let seen: u128 = it.next().unwrap().parse().unwrap();
            if let Some((_, t)) = sent.iter().find(|(sw, _)| *sw == w) {
                lat.push(seen.saturating_sub(*t) as f64 / 1e6);
            }
        }
        child.wait().expect("subscriber exit");
    }
    let count = lat.len();
    println!();
    println!(
        "put → applied in 3 subscriber processes: {count} applications of {} puts; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        puts,
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99),
        percentile(&mut lat, 1.0)
    );
}
