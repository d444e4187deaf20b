//! How route cost grows: each scope at 3, 8, 64 and 256 nodes; the
//! transaction and session registries with 1 thousand and 1 million live
//! entries; resident memory for 1 million live sessions and contexts.
//!
//! ```text
//! cargo run --release -p racaffinity --example scaling            # what `make bench-scaling` runs
//! cargo run --release -p racaffinity --example scaling -- --quick # fewer rounds
//! ```
//!
//! Each figure is the median ns/op of 11 rounds (scopes interleaved within a
//! round, so load on the machine hits them alike), with the min–max of the
//! rounds. Prints a markdown table and `SCALING <what> <x> <median> <min>
//! <max>` lines (tools/scaling_svg.py plots them).

use std::hint::black_box;
use std::time::Instant;

use racaffinity::{Cluster, ContextKey, DataKey, RouteRequest};

const ROUNDS: usize = 11;

fn cluster(nodes: usize) -> Cluster {
    let names: Vec<String> = (0..nodes).map(|i| format!("N{i}")).collect();
    Cluster::from_config_text(&format!("nodes = {}", names.join(", "))).expect("valid config")
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Median, min and max ns/op of `f(i)` over `ops` calls, for each case,
/// rounds interleaved.
fn measure(cases: &mut [(&str, &mut dyn FnMut(usize))], ops: usize) -> Vec<(f64, f64, f64)> {
    let mut samples = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for (_, f) in cases.iter_mut() {
        (0..ops).for_each(&mut **f); // warm-up
    }
    for round in 0..ROUNDS {
        for k in 0..cases.len() {
            let c = if round % 2 == 0 { k } else { cases.len() - 1 - k };
            let f = &mut cases[c].1;
            let t = Instant::now();
            for i in 0..ops {
                f(i);
            }
            samples[c].push(t.elapsed().as_nanos() as f64 / ops as f64);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            (s[s.len() / 2], s[0], s[s.len() - 1])
        })
        .collect()
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4
}

fn gtrid(i: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&mix(i as u64).to_le_bytes());
    g[8..].copy_from_slice(&(i as u64).to_le_bytes());
    g
}

fn session(i: usize) -> [u8; 24] {
    let mut s = *b"session:0000000000000000";
    s[8..].copy_from_slice(format!("{:016x}", mix(i as u64 ^ 0x5e55)).as_bytes());
    s
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut lines = Vec::new();
    // Memory first, in a fresh heap: memory freed by the timing runs would be
    // reused without growing RSS. The clusters stay alive to the end.
    let mut rss_out: Vec<String> = Vec::new();
    rss_out.push("\n## Resident memory, 8 nodes (RSS growth, /proc/self/statm)\n".to_string());
    rss_out.push("| live entries | RSS growth | per entry |".to_string());
    rss_out.push("|---|---:|---:|".to_string());
    // Resident memory each registry grows by per million live entries.
    let mut rss_row = |label: &str, key: &str, fill: &dyn Fn(&Cluster)| {
        let c = cluster(8);
        let before = rss_kib();
        fill(&c);
        let grown = rss_kib().saturating_sub(before);
        rss_out.push(format!("| {label} | {:.1} MiB | {:.0} B |", grown as f64 / 1024.0, grown as f64 * 1024.0 / 1e6));
        lines.push(format!("SCALING {key} 1000000 {grown} {grown} {grown}"));
        c
    };
    let sessions = rss_row("1 000 000 sessions", "rss_sessions", &|c| {
        for i in 0..1_000_000 {
            c.session_route(&session(i)).unwrap();
        }
    });
    let contexts = rss_row("1 000 000 pinned contexts", "rss_contexts", &|c| {
        for _ in 0..1_000_000 {
            let k = c.new_context_key();
            c.pin_context(k).unwrap();
        }
    });
    let ops = if quick { 5_000 } else { 20_000 };
    const LIVE: usize = 1024;
    println!("## Route cost per scope by node count (ns/op, median of {ROUNDS} rounds, min–max)\n");
    println!("| nodes | pin | transaction | session | data key | request precedence |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for nodes in [3usize, 8, 64, 256] {
        let c = cluster(nodes);
        let ctx = c.new_context_key();
        c.pin_context(ctx).unwrap();
        let gtrids: Vec<[u8; 16]> = (0..LIVE).map(gtrid).collect();
        let sessions: Vec<[u8; 24]> = (0..LIVE).map(session).collect();
        for g in &gtrids {
            c.tx_begin(g).unwrap();
        }
        for s in &sessions {
            c.session_route(s).unwrap();
        }
        let keys: Vec<i64> = (0..LIVE).map(|i| mix(i as u64) as i64).collect();
        let m = LIVE - 1;
        let mut pin = |_: usize| {
            black_box(c.pick_in(ctx).unwrap());
        };
        let mut tx = |i: usize| {
            black_box(c.tx_route(&gtrids[i & m]).unwrap());
        };
        let mut sess = |i: usize| {
            black_box(c.session_route(&sessions[i & m]).unwrap());
        };
        let mut key = |i: usize| {
            black_box(c.route_key_i64(keys[i & m]).unwrap());
        };
        // A request with a key and a session but no transaction: the key wins.
        let mut req = |i: usize| {
            let r = RouteRequest {
                transaction: None,
                key: Some(DataKey::Int(keys[i & m])),
                session: Some(&sessions[i & m]),
                token: None,
                context: Some(ContextKey(ctx.0)),
            };
            black_box(c.route(&r).unwrap());
        };
        let r = measure(
            &mut [
                ("pin", &mut pin),
                ("transaction", &mut tx),
                ("session", &mut sess),
                ("data key", &mut key),
                ("request precedence", &mut req),
            ],
            ops,
        );
        let cells: Vec<String> = r.iter().map(|(m, lo, hi)| format!("{m:.0} ({lo:.0}–{hi:.0})")).collect();
        println!("| {nodes} | {} |", cells.join(" | "));
        for (name, (m, lo, hi)) in ["pin", "transaction", "session", "data_key", "request"].iter().zip(&r) {
            lines.push(format!("SCALING nodes_{name} {nodes} {m:.2} {lo:.2} {hi:.2}"));
        }
    }

    println!("\n## Registry size: 8 nodes, 1 thousand vs 1 million live entries (ns/op)\n");
    println!("| live entries | `tx_route` | `session_route` |");
    println!("|---:|---:|---:|");
    for live in [1_000usize, 1_000_000] {
        let c = cluster(8);
        for i in 0..live {
            c.tx_begin(&gtrid(i)).unwrap();
            c.session_route(&session(i)).unwrap();
        }
        let probe: Vec<usize> = (0..4096).map(|i| (mix(i as u64 ^ 0xabc) as usize) % live).collect();
        let (g, s): (Vec<_>, Vec<_>) = probe.iter().map(|&i| (gtrid(i), session(i))).unzip();
        let mut tx = |i: usize| {
            black_box(c.tx_route(&g[i & 4095]).unwrap());
        };
        let mut sess = |i: usize| {
            black_box(c.session_route(&s[i & 4095]).unwrap());
        };
        let r = measure(&mut [("tx", &mut tx), ("session", &mut sess)], ops);
        println!(
            "| {live} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) |",
            r[0].0, r[0].1, r[0].2, r[1].0, r[1].1, r[1].2
        );
        lines.push(format!("SCALING live_tx {live} {:.2} {:.2} {:.2}", r[0].0, r[0].1, r[0].2));
        lines.push(format!("SCALING live_session {live} {:.2} {:.2} {:.2}", r[1].0, r[1].1, r[1].2));
    }

    for l in rss_out {
        println!("{l}");
    }
    println!();
    drop((sessions, contexts));
    for l in lines {
        println!("{l}");
    }
}
