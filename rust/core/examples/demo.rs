//! `make demo`: racaffinity routing real two-phase-commit transactions,
//! sessions and data keys over three local PostgreSQL nodes that stand in for
//! RAC instances, then a real node crash (kill -9) announced by a FAN event.
//!
//! Run through `make demo`, which starts the nodes with tests/cluster/pgnodes
//! and exports RACAFF_NODE<i>_DSN. Exits non-zero if any transaction is split
//! across nodes or any 2PC command is sent to a node without the branch.

use std::collections::BTreeMap;
use std::process::Command;

use postgres::{Client, NoTls};
use racaffinity::{Cluster, NodeId, RouteKind};

const NODES: [&str; 3] = ["RAC1", "RAC2", "RAC3"];

struct Demo {
    cluster: Cluster,
    dsns: Vec<String>,
    harness: String,
}

#[derive(Default)]
struct TxStats {
    transactions: usize,
    branches: usize,
    split: usize,
    misrouted: usize,
    failed_cleanly: usize,
    per_node: BTreeMap<String, usize>,
}

impl Demo {
    fn connect(&self, node: NodeId) -> Result<Client, postgres::Error> {
        Client::connect(&self.dsns[node.0 as usize], NoTls)
    }

    /// One global transaction with two branches, each on its own connection
    /// (as two app-server threads would), then 2PC routed by the core.
    fn global_transaction(&self, gtrid: &str, stats: &mut TxStats) {
        self.run_global(gtrid, stats, true)
    }

    /// `affinity = false` is what a plain load-balanced pool does: every
    /// connection request, including the 2PC one, goes wherever it likes.
    fn run_global(&self, gtrid: &str, stats: &mut TxStats, affinity: bool) {
        let mut branch_nodes = Vec::new();
        let mut prepared = Vec::new();
        for b in 0..2 {
            let routed = if affinity { self.cluster.tx_begin(gtrid.as_bytes()) } else { self.cluster.pick_balanced() };
            let route = match routed {
                Ok(r) => r,
                Err(e) => {
                    println!("  {gtrid}: refused: {e}");
                    stats.failed_cleanly += 1;
                    return;
                }
            };
            branch_nodes.push(route.node);
            let xid = format!("{gtrid}.{b}");
            let run = || -> Result<(), postgres::Error> {
                let mut c = self.connect(route.node)?;
                c.batch_execute(&format!(
                    "BEGIN; INSERT INTO demo_rows VALUES ('{gtrid}', {b}, current_setting('port')::int); \
                     PREPARE TRANSACTION '{xid}'"
                ))
            };
            if let Err(e) = run() {
                // The node died under us: report it so the core stops routing there.
                let _ = self.cluster.report_outcome(route.node, false);
                println!("  {gtrid}: branch {b} failed on {}: {}", self.name(route.node), first_line(&e));
                stats.failed_cleanly += 1;
                self.rollback(&prepared);
                let _ = self.cluster.tx_complete(gtrid.as_bytes());
                return;
            }
            if affinity {
                let _ = self.cluster.tx_prepared(gtrid.as_bytes());
            }
            prepared.push((route.node, xid));
            stats.branches += 1;
        }
        stats.transactions += 1;
        if branch_nodes.windows(2).any(|w| w[0] != w[1]) {
            stats.split += 1;
        }
        // Phase two: the core says where the transaction lives.
        for (holder, xid) in &prepared {
            let owner = if affinity {
                self.cluster.tx_route(gtrid.as_bytes()).expect("prepared transaction has an owner").node
            } else {
                self.cluster.pick_balanced().expect("a node").node
            };
            let ok = self.connect(owner).and_then(|mut c| c.batch_execute(&format!("COMMIT PREPARED '{xid}'"))).is_ok();
            if !ok {
                // "prepared transaction ... does not exist": the ORA-24756 analogue.
                stats.misrouted += 1;
                // Clean up on the node that really holds it, so nothing stays in doubt.
                self.connect(*holder).and_then(|mut c| c.batch_execute(&format!("COMMIT PREPARED '{xid}'"))).ok();
            }
            if affinity {
                let _ = self.cluster.tx_end(gtrid.as_bytes());
            }
            *stats.per_node.entry(self.name(*holder)).or_default() += 1;
        }
    }

    fn rollback(&self, prepared: &[(NodeId, String)]) {
        for (node, xid) in prepared {
            if let Ok(mut c) = self.connect(*node) {
                let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{xid}'"));
            }
        }
    }

    fn name(&self, id: NodeId) -> String {
        self.cluster.node_name(id).unwrap_or_default()
    }

    fn harness(&self, args: &[&str]) {
        let st = Command::new(&self.harness).args(args).status().expect("run pgnodes");
        assert!(st.success(), "pgnodes {args:?} failed");
    }
}

fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

fn print_tx(title: &str, s: &TxStats) {
    println!("\n{title}");
    println!("  {:<28}{:>6}", "global transactions", s.transactions);
    println!("  {:<28}{:>6}", "branches prepared", s.branches);
    println!("  {:<28}{:>6}", "split transactions", s.split);
    println!("  {:<28}{:>6}", "misrouted 2PC commands", s.misrouted);
    println!("  {:<28}{:>6}", "failed cleanly (no split)", s.failed_cleanly);
    let per: Vec<String> = s.per_node.iter().map(|(n, c)| format!("{n}={c}")).collect();
    println!("  {:<28}{}", "branches committed per node", per.join("  "));
}

fn main() {
    let dsns: Vec<String> = (1..=3)
        .map(|i| {
            std::env::var(format!("RACAFF_NODE{i}_DSN")).unwrap_or_else(|_| {
                eprintln!("RACAFF_NODE{i}_DSN is not set: run `make demo`, which starts the nodes");
                std::process::exit(2)
            })
        })
        .collect();
    let harness = std::env::var("RACAFF_PGNODES").unwrap_or_else(|_| "tests/cluster/pgnodes".into());
    let config = "name = demo\ndatabase = orcl\nservice = svc\nnodes = RAC1, RAC2, RAC3\n\
                  node.RAC1.address = 127.0.0.1:55431\nnode.RAC2.address = 127.0.0.1:55432\n\
                  node.RAC3.address = 127.0.0.1:55433\nsession.placement = balanced\n";
    let demo = Demo { cluster: Cluster::from_config_text(config).expect("demo config"), dsns, harness };
    println!("racaffinity {} demo: 3 PostgreSQL nodes stand in for RAC instances {:?}", racaffinity::VERSION, NODES);

    for i in 0..3 {
        let mut c = demo.connect(NodeId(i)).expect("node is up");
        c.batch_execute("CREATE TABLE IF NOT EXISTS demo_rows (gtrid text, branch int, port int); TRUNCATE demo_rows")
            .unwrap();
        for row in c.query("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'demo-%'", &[]).unwrap() {
            let gid: String = row.get(0);
            c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'")).unwrap();
        }
    }

    // 1. Transactions: both branches of every gtrid on one node, 2PC routed there.
    let mut before = TxStats::default();
    for t in 0..30 {
        demo.global_transaction(&format!("demo-{t}"), &mut before);
    }
    print_tx("1. Global transactions (2 branches each, real PREPARE/COMMIT PREPARED)", &before);

    // The contrast: the same workload through plain load balancing.
    let mut contrast = TxStats::default();
    for t in 0..30 {
        demo.run_global(&format!("demo-lb-{t}"), &mut contrast, false);
    }
    print_tx("   The same 30 transactions WITHOUT affinity (each connection load-balanced)", &contrast);
    if contrast.split == 0 {
        eprintln!("DEMO FAILED: the contrast run found no split transaction, so the split check proves nothing");
        std::process::exit(1);
    }

    // 2. Sessions and data keys.
    let sessions: Vec<String> = (0..9).map(|i| format!("JSESSIONID-{i:03}")).collect();
    let mut session_home = BTreeMap::new();
    for s in &sessions {
        for _ in 0..5 {
            let r = demo.cluster.session_route(s.as_bytes()).unwrap();
            session_home.entry(s.clone()).or_insert(r.node);
            assert_eq!(session_home[s], r.node, "a session moved while its node was up");
        }
    }
    let keys: Vec<i64> = (1001..1013).collect();
    let key_home: BTreeMap<i64, NodeId> =
        keys.iter().map(|k| (*k, demo.cluster.route_key_i64(*k).unwrap().node)).collect();
    println!("\n2. Where sessions and data keys landed (5 requests per session, all on one node)");
    for n in 0..3u32 {
        let s: Vec<&str> = session_home.iter().filter(|(_, v)| v.0 == n).map(|(k, _)| &k[11..]).collect();
        let k: Vec<String> = key_home.iter().filter(|(_, v)| v.0 == n).map(|(k, _)| k.to_string()).collect();
        println!("  {:<5} sessions [{}]  customer keys [{}]", NODES[n as usize], s.join(" "), k.join(" "));
    }

    // 3. Failover: RAC2 crashes for real; its FAN event reaches the core.
    println!("\n3. kill -9 of RAC2's server, then its FAN event:");
    demo.harness(&["kill", "2"]);
    let fan = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 \
               status=down reason=FAILURE card=2 timestamp=2026-11-29 08:00:00";
    println!("  {fan}");
    let effect = demo.cluster.apply_event(fan).unwrap();
    for ch in &effect.changes {
        println!("  -> {} {} => {}", ch.name, ch.from, ch.to);
    }
    let mut after = TxStats::default();
    for t in 30..60 {
        demo.global_transaction(&format!("demo-{t}"), &mut after);
    }
    print_tx("   Global transactions after the crash", &after);
    let rac2 = demo.cluster.node_by_name("RAC2").unwrap().id();
    let moved = session_home.iter().filter(|(_, n)| **n == rac2).count();
    let mut repinned = 0;
    for s in &sessions {
        let r = demo.cluster.session_route(s.as_bytes()).unwrap();
        assert_ne!(r.node, rac2, "no session may route to the dead node");
        repinned += usize::from(r.kind == RouteKind::Repinned);
    }
    let fallback = keys.iter().filter(|k| demo.cluster.route_key_i64(**k).unwrap().kind == RouteKind::Fallback).count();
    println!("   sessions re-pinned off RAC2: {repinned} of {moved}; data keys falling back: {fallback}");

    demo.harness(&["restart", "2"]);
    demo.cluster
        .apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 status=up reason=BOOT card=3")
        .unwrap();
    let back = keys.iter().filter(|k| demo.cluster.route_key_i64(**k).unwrap().node == key_home[*k]).count();
    println!("   RAC2 restarted and announced up: {back} of {} data keys are home again", keys.len());

    // Nothing may be left in doubt anywhere.
    let mut in_doubt = 0i64;
    let mut rows = 0i64;
    for i in 0..3 {
        let mut c = demo.connect(NodeId(i)).unwrap();
        in_doubt += c
            .query_one("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'demo-%'", &[])
            .unwrap()
            .get::<_, i64>(0);
        rows += c.query_one("SELECT count(*) FROM demo_rows", &[]).unwrap().get::<_, i64>(0);
    }
    println!("\n4. Afterwards: {rows} rows committed, {in_doubt} prepared transactions left in doubt");
    println!("\nmetrics (Prometheus excerpt):");
    for line in demo
        .cluster
        .metrics()
        .to_prometheus()
        .lines()
        .filter(|l| l.starts_with("racaffinity_node_picks_total") || l.starts_with("racaffinity_affinities{"))
    {
        println!("  {line}");
    }
    let bad = before.split + after.split + before.misrouted + after.misrouted;
    let rac2_after = after.per_node.get("RAC2").copied().unwrap_or(0);
    if bad > 0
        || in_doubt > 0
        || rac2_after > 0
        || rows != 2 * (before.transactions + after.transactions + contrast.transactions) as i64
    {
        eprintln!(
            "DEMO FAILED: split/misrouted={bad} in_doubt={in_doubt} branches on dead RAC2={rac2_after} rows={rows}"
        );
        std::process::exit(1);
    }
    println!("\nOK: 0 split transactions, 0 misrouted 2PC commands, 0 in doubt, no work on the dead node.");
}
