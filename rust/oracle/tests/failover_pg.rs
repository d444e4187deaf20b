//! A real crash (`kill -9` of a node's postmaster) and the failover through
//! `NodePools`. One test in its own binary: cargo runs test binaries one after
//! another, so no other test of this crate sees the node down. The killed nodes
//! are restarted before the test ends, also when it fails.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{nodes, pgnodes, pools, port_of, server_port, PgPool};
use racaffinity::{ContextKey, DataKey, ErrorKind, NodeId, NodeState, Outcome, RouteKind};
use racaffinity_oracle::{Error, NodePool, NodePools};

/// Restarts harness node `index` when dropped, unless it was restarted already.
struct Revive {
    index: u32,
    armed: bool,
}

impl Revive {
    fn kill(index: u32) -> Revive {
        pgnodes(&["kill", &index.to_string()]);
        Revive { index, armed: true }
    }
    fn restart(mut self) {
        self.armed = false;
        pgnodes(&["restart", &self.index.to_string()]);
    }
}

impl Drop for Revive {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::process::Command::new(common::PGNODES).args(["restart", &self.index.to_string()]).status();
        }
    }
}

/// Each line a second after the last: the core keeps the newest timestamp
/// per node (docs/semantics.md, "Agreement").
fn fan(instance: &str, status: &str) -> String {
    static SECOND: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let s = SECOND.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    format!(
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={instance} host=127.0.0.1 \
         status={status} reason=FAILURE card=1 timestamp=2026-11-29 08:{:02}:{:02}",
        s / 60,
        s % 60
    )
}

/// A data key owned by `node`.
fn key_owned_by(pools: &NodePools<PgPool>, node: NodeId) -> i64 {
    let c = pools.cluster();
    (0..10_000i64).find(|&k| c.partition_owner(c.partition_of(DataKey::Int(k)).unwrap()).unwrap() == node).unwrap()
}

/// A gtrid that a new transaction would be placed on `node` with.
fn gtrid_placed_on(pools: &NodePools<PgPool>, node: NodeId, tag: &str) -> String {
    let c = pools.cluster();
    (0..10_000)
        .map(|i| format!("racaff-ora-fo-{tag}-{i}-{}", std::process::id()))
        .find(|g| {
            let placed = c.tx_begin(g.as_bytes()).unwrap().node;
            c.tx_end(g.as_bytes()).unwrap();
            placed == node
        })
        .unwrap()
}

/// A context key pinned to `node`.
fn context_pinned_to(pools: &NodePools<PgPool>, node: NodeId) -> ContextKey {
    let c = pools.cluster();
    loop {
        let key = c.new_context_key();
        if c.pin_context(key).unwrap().node == node {
            return key;
        }
        c.release_context(key);
    }
}

/// Mixed work of every kind; returns the ports that served it.
fn mixed_work(pools: &NodePools<PgPool>, round: u32) -> Vec<u16> {
    let mut ports = Vec::new();
    let mut serve = |mut conn: racaffinity_oracle::PooledConnection<'_, PgPool>| {
        ports.push(server_port(&mut conn));
        conn.release(Outcome::Ok);
    };
    for i in 0..10 {
        serve(pools.acquire().unwrap());
        serve(pools.acquire_session(format!("session-{i}").as_bytes()).unwrap());
        serve(pools.acquire_key_i64(i64::from(i) * 7 + 1).unwrap());
        serve(pools.acquire_key(format!("customer-{i}").as_bytes()).unwrap());
        let g = format!("fo-work-{round}-{i}-{}", std::process::id());
        serve(pools.acquire_tx(g.as_bytes()).unwrap());
        pools.cluster().tx_end(g.as_bytes()).unwrap();
    }
    thread::scope(|s| {
        s.spawn(|| {
            let _pin = pools.cluster().pin_thread().unwrap();
            for _ in 0..5 {
                let mut conn = pools.acquire().unwrap();
                assert_eq!(conn.node(), _pin.node());
                server_port(&mut conn);
            }
        });
    });
    ports
}

#[test]
fn a_killed_node_gets_no_connections_and_comes_back() {
    let all = nodes();
    let pools = pools("health.eject_after_failures = 3\nhealth.eject_backoff = 60s\nheartbeat.misses = 3");
    let c = pools.cluster();
    let (rac2, rac3) = (NodeId(1), NodeId(2));
    assert_eq!((all[1].index, all[2].index), (2, 3));
    let state = |n: NodeId| c.node(n).unwrap().state();

    // Sessions and keys on RAC3 before the crash.
    let sessions_on_rac3: Vec<String> = (0..200)
        .map(|i| format!("pre-{i}"))
        .filter(|k| c.session_route(k.as_bytes()).unwrap().node == rac3)
        .take(3)
        .collect();
    assert!(!sessions_on_rac3.is_empty());
    let key3 = key_owned_by(&pools, rac3);
    assert!(mixed_work(&pools, 0).len() >= 50);

    // ---- 1. kill -9 RAC3; heartbeats find it -------------------------------------
    let revive3 = Revive::kill(3);
    let probe = |p: &PgPool| p.get().is_ok();
    assert!(pools.heartbeat_once(probe).is_empty(), "one miss is not enough");
    assert!(pools.heartbeat_once(probe).is_empty());
    let changes = pools.heartbeat_once(probe);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((changes[0].node, changes[0].to), (rac3, NodeState::Down));

    let gets_before = pools.pool(rac3).unwrap().gets();
    let ports = mixed_work(&pools, 1);
    assert!(!ports.contains(&port_of(rac3)), "work went to the dead node: {ports:?}");
    for key in &sessions_on_rac3 {
        let mut conn = pools.acquire_session(key.as_bytes()).unwrap();
        assert_eq!(conn.route().kind, RouteKind::Repinned);
        assert_ne!(server_port(&mut conn), port_of(rac3));
    }
    let mut conn = pools.acquire_key_i64(key3).unwrap();
    assert_eq!(conn.route().kind, RouteKind::Fallback);
    assert_ne!(server_port(&mut conn), port_of(rac3));
    drop(conn);
    assert_eq!(pools.pool(rac3).unwrap().gets(), gets_before, "no connection was even attempted on RAC3");

    // Back: one good probe restores it, and its keys go home.
    revive3.restart();
    let changes = pools.heartbeat_once(probe);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((changes[0].node, changes[0].to), (rac3, NodeState::Up));
    let mut conn = pools.acquire_key_i64(key3).unwrap();
    assert_eq!(conn.route().kind, RouteKind::Affinity);
    assert_eq!(server_port(&mut conn), port_of(rac3));
    drop(conn);

    // ---- 2. kill -9 RAC2 with work on it: failures eject it, FAN confirms ---------
    let key2 = key_owned_by(&pools, rac2);
    let pinned2 = context_pinned_to(&pools, rac2);
    let gtrid = gtrid_placed_on(&pools, rac2, "prepared");
    let gid = format!("{gtrid}-1");
    {
        let mut conn = pools.acquire_tx(gtrid.as_bytes()).unwrap();
        assert_eq!(server_port(&mut conn), port_of(rac2));
        conn.batch_execute("CREATE TABLE IF NOT EXISTS racaff_ora_fo (gtrid text)").unwrap();
        conn.batch_execute(&format!(
            "BEGIN; INSERT INTO racaff_ora_fo VALUES ('{gtrid}'); PREPARE TRANSACTION '{gid}'"
        ))
        .unwrap();
    }
    assert_eq!(c.tx_prepared(gtrid.as_bytes()).unwrap(), rac2);
    let mut held = pools.acquire_key_i64(key2).unwrap();
    assert_eq!(server_port(&mut held), port_of(rac2));

    let revive2 = Revive::kill(2);

    // Failure 1: the connection in flight dies with its node.
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        let result = held.simple_query("SELECT 1");
        match held.track(result) {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(_) => panic!("the connection to the killed node kept answering"),
        }
    };
    assert!(PgPool::is_node_failure(&err), "{err:?}");
    assert_eq!(held.outcome(), Outcome::Failed);
    drop(held);

    // Failure 2: connecting is refused; below the threshold, no retry.
    let e = pools.acquire_key_i64(key2).unwrap_err();
    let Error::Pool { node, source } = &e else { panic!("{e:?}") };
    assert_eq!(node, "RAC2");
    assert!(PgPool::is_node_failure(source), "{source:?}");
    assert_eq!(state(rac2), NodeState::Up);

    // Failure 3 ejects RAC2; the same call is retried once and falls back.
    let mut conn = pools.acquire_key_i64(key2).unwrap();
    assert_eq!(conn.route().kind, RouteKind::Fallback);
    assert_ne!(server_port(&mut conn), port_of(rac2));
    drop(conn);
    assert_eq!(state(rac2), NodeState::Down);
    let m = c.metrics().nodes.into_iter().nth(1).unwrap();
    assert_eq!((m.failures, m.ejections, m.in_flight), (3, 1, 0));

    // The FAN event that follows a real failure is accepted (the node is already down).
    pools.apply_event(&fan("RAC2", "down")).unwrap();
    assert_eq!(state(rac2), NodeState::Down);

    // Nothing goes to RAC2 now: pins re-pin, sessions and transactions place elsewhere.
    let gets_before = pools.pool(rac2).unwrap().gets();
    let mut conn = pools.acquire_in(pinned2).unwrap();
    assert_eq!(conn.route().kind, RouteKind::Repinned);
    assert_ne!(server_port(&mut conn), port_of(rac2));
    drop(conn);
    let ports = mixed_work(&pools, 2);
    assert!(!ports.contains(&port_of(rac2)), "work went to the dead node: {ports:?}");
    // The prepared transaction never moves: its commit goes to RAC2 (2PC is
    // never refused for routing reasons) and fails there as a node failure,
    // retry later, until RAC2 is back; no new branch may join it meanwhile.
    let e = pools.acquire_tx_route(gtrid.as_bytes()).unwrap_err();
    let Error::Pool { node, source } = &e else { panic!("{e:?}") };
    assert_eq!(node, "RAC2");
    assert!(PgPool::is_node_failure(source), "{source:?}");
    assert_eq!(c.tx_begin(gtrid.as_bytes()).unwrap_err().kind(), ErrorKind::PreparedNodeUnavailable);
    assert_eq!(pools.pool(rac2).unwrap().gets(), gets_before + 1, "only the commit tried RAC2");

    // ---- RAC2 restarts and is announced up: keys go home, the commit goes through --
    revive2.restart();
    pools.apply_event(&fan("RAC2", "up")).unwrap();
    assert_eq!(state(rac2), NodeState::Up);
    let mut conn = pools.acquire_key_i64(key2).unwrap();
    assert_eq!(conn.route().kind, RouteKind::Affinity);
    assert_eq!(server_port(&mut conn), port_of(rac2));
    drop(conn);

    let mut conn = pools.acquire_tx_route(gtrid.as_bytes()).unwrap();
    assert_eq!(server_port(&mut conn), port_of(rac2));
    // The prepared branch survived the crash on its node.
    conn.batch_execute(&format!("COMMIT PREPARED '{gid}'")).unwrap();
    let n: i64 = conn.query_one("SELECT count(*) FROM racaff_ora_fo WHERE gtrid = $1", &[&gtrid]).unwrap().get(0);
    assert_eq!(n, 1);
    conn.batch_execute("DROP TABLE racaff_ora_fo").unwrap();
    drop(conn);
    c.tx_end(gtrid.as_bytes()).unwrap();
    assert_eq!(c.tx_count(), 0);
    c.release_context(pinned2);

    let ports = mixed_work(&pools, 3);
    assert!(ports.len() >= 50);
    assert!(c.node_ids().iter().all(|&n| state(n) == NodeState::Up));
}
