//! `NodePools` over real local PostgreSQL servers standing in for RAC instances
//! (`tests/cluster/pgnodes`): every connection is checked by asking the server
//! which port it listens on. No test here kills a node (see `failover_pg.rs`).

mod common;

use std::thread;

use common::{nodes, pools, port_of, server_port, PgPool};
use racaffinity::{DataKey, Outcome, RouteKind};
use racaffinity_oracle::{Error, NodePool};

#[test]
fn pinned_threads_get_every_connection_from_one_node() {
    let pools = pools("");
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let pin = pools.cluster().pin_thread().unwrap();
                let want = port_of(pin.node());
                for _ in 0..8 {
                    let mut conn = pools.acquire().unwrap();
                    assert_eq!(conn.node(), pin.node());
                    assert_eq!(server_port(&mut conn), want);
                }
            });
        }
    });
    for n in pools.cluster().metrics().nodes {
        assert_eq!(n.in_flight, 0, "{}", n.name);
    }
}

#[test]
fn context_pins_route_acquire_in() {
    let pools = pools("");
    let key = pools.cluster().new_context_key();
    let node = pools.cluster().pin_context(key).unwrap().node;
    for _ in 0..6 {
        let mut conn = pools.acquire_in(key).unwrap();
        assert_eq!(server_port(&mut conn), port_of(node));
    }
    assert!(pools.cluster().unpin_context(key));
}

/// Two branches of each global transaction, from two threads, each `PREPARE
/// TRANSACTION`ed; then `COMMIT PREPARED` through `acquire_tx_route`. A commit on
/// any other node would fail: the prepared branch exists only where it ran.
#[test]
fn transaction_branches_and_two_phase_commit_stay_on_one_node() {
    let pools = pools("");
    let table = format!("racaff_ora_tx_{}", std::process::id());
    let prefix = "racaff-ora-tx-";
    for n in nodes() {
        let mut c = postgres::Client::connect(&n.dsn, postgres::NoTls).unwrap();
        // Leftovers of an aborted earlier run would hold prepared-transaction slots.
        for row in c.query("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1", &[&format!("{prefix}%")]).unwrap() {
            let gid: String = row.get(0);
            c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'")).unwrap();
        }
        c.batch_execute(&format!("CREATE TABLE IF NOT EXISTS {table} (gtrid text, branch int, port int)")).unwrap();
    }

    let gtrids: Vec<String> = (0..12).map(|i| format!("g{i}-{}", std::process::id())).collect();
    let mut per_node = [0usize; 3];
    for gtrid in &gtrids {
        let g = gtrid.as_bytes();
        // Phase one: each branch from its own thread, as two app-server threads would.
        let ports: Vec<u16> = thread::scope(|s| {
            let branches: Vec<_> = (1..=2)
                .map(|branch| {
                    let (pools, table) = (&pools, &table);
                    s.spawn(move || {
                        let mut conn = pools.acquire_tx(g).unwrap();
                        let port = server_port(&mut conn);
                        conn.batch_execute(&format!(
                            "BEGIN; INSERT INTO {table} VALUES ('{gtrid}', {branch}, inet_server_port()); \
                             PREPARE TRANSACTION '{prefix}{gtrid}-{branch}'"
                        ))
                        .unwrap();
                        conn.release(Outcome::Ok);
                        port
                    })
                })
                .collect();
            branches.into_iter().map(|b| b.join().unwrap()).collect()
        });
        assert_eq!(ports[0], ports[1], "{gtrid}: split transaction");
        let owner = pools.cluster().tx_prepared(g).unwrap();
        assert_eq!(port_of(owner), ports[0]);
        per_node[owner.0 as usize] += 1;

        // A 2PC command on another node fails for real (this is what affinity prevents),
        // and is not a node failure.
        let other = pools.cluster().node_ids().into_iter().find(|&n| n != owner).unwrap();
        let mut conn = pools.acquire_node(other).unwrap();
        let e = conn.batch_execute(&format!("COMMIT PREPARED '{prefix}{gtrid}-1'")).unwrap_err();
        let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(db.code(), &postgres::error::SqlState::UNDEFINED_OBJECT, "{db}");
        assert!(db.message().contains("does not exist"), "{db}");
        assert!(!PgPool::is_node_failure(&e));
        drop(conn);

        // Phase two: through the transaction's route.
        for branch in 1..=2 {
            let mut conn = pools.acquire_tx_route(g).unwrap();
            assert_eq!(conn.route().kind, RouteKind::Affinity);
            assert_eq!(server_port(&mut conn), ports[0]);
            let r = conn.batch_execute(&format!("COMMIT PREPARED '{prefix}{gtrid}-{branch}'"));
            conn.track(r).unwrap();
            pools.cluster().tx_end(g).unwrap();
        }
    }
    assert_eq!(pools.cluster().tx_count(), 0);

    // Every row is on its transaction's node, and nothing is left in doubt.
    let mut rows = 0;
    for n in nodes() {
        let mut c = postgres::Client::connect(&n.dsn, postgres::NoTls).unwrap();
        let wrong: i64 =
            c.query_one(&format!("SELECT count(*) FROM {table} WHERE port <> inet_server_port()"), &[]).unwrap().get(0);
        assert_eq!(wrong, 0);
        let count: i64 = c.query_one(&format!("SELECT count(*) FROM {table}"), &[]).unwrap().get(0);
        assert_eq!(count as usize, 2 * per_node[n.index as usize - 1], "node {}", n.index);
        rows += count;
        let in_doubt: i64 = c
            .query_one("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE $1", &[&format!("{prefix}%")])
            .unwrap()
            .get(0);
        assert_eq!(in_doubt, 0, "node {}", n.index);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
    assert_eq!(rows as usize, 2 * gtrids.len());
}

#[test]
fn sessions_land_on_their_node_for_every_request() {
    let pools = pools("");
    for s in 0..9 {
        let key = format!("JSESSIONID={s:04x}");
        let mut first = None;
        for _ in 0..5 {
            let mut conn = pools.acquire_session(key.as_bytes()).unwrap();
            let node = pools.cluster().session_node(key.as_bytes()).unwrap();
            assert_eq!(conn.node(), node);
            let port = server_port(&mut conn);
            assert_eq!(port, port_of(node));
            assert_eq!(*first.get_or_insert(port), port, "{key} moved");
        }
    }
}

#[test]
fn data_keys_land_on_their_owner() {
    let pools = pools("");
    let c = pools.cluster();
    let mut owners = std::collections::HashSet::new();
    for id in 0..12i64 {
        let owner = c.partition_owner(c.partition_of(DataKey::Int(id)).unwrap()).unwrap();
        let mut conn = pools.acquire_key_i64(id).unwrap();
        assert_eq!(conn.route().kind, RouteKind::Affinity);
        assert_eq!(server_port(&mut conn), port_of(owner));
        owners.insert(owner);

        let key = format!("customer-{id}");
        let owner = c.partition_owner(c.partition_of(DataKey::Bytes(key.as_bytes())).unwrap()).unwrap();
        let mut conn = pools.acquire_key(key.as_bytes()).unwrap();
        assert_eq!(server_port(&mut conn), port_of(owner));
    }
    assert!(owners.len() > 1, "12 keys should spread over more than one node");
}

#[test]
fn sql_errors_are_not_node_failures() {
    let pools = pools("");
    let mut conn = pools.acquire().unwrap();
    let node = conn.node();
    let r = conn.batch_execute("SELECT * FROM no_such_table_racaffinity");
    let e = conn.track(r).unwrap_err();
    assert!(!PgPool::is_node_failure(&e), "{e:?}");
    assert_eq!(conn.outcome(), Outcome::Ok);
    drop(conn);
    let m = pools.cluster().metrics().nodes.into_iter().nth(node.0 as usize).unwrap();
    assert_eq!(m.failures, 0);
    assert!(m.successes >= 1);
}

#[test]
fn bad_credentials_are_a_pool_error_but_not_a_node_failure() {
    let mut node = nodes()[0].clone();
    node.dsn = node.dsn.replace("user=postgres", "user=no_such_role_racaffinity");
    let cluster = racaffinity::Cluster::from_config_text("nodes = RAC1\nhealth.eject_after_failures = 1").unwrap();
    let pools = racaffinity_oracle::NodePools::new(cluster, vec![PgPool::new(&node)]).unwrap();
    let e = pools.acquire().unwrap_err();
    let Error::Pool { node, source } = &e else { panic!("{e:?}") };
    assert_eq!(node, "RAC1");
    assert!(!PgPool::is_node_failure(source), "{source:?}");
    assert_eq!(pools.cluster().metrics().nodes[0].failures, 0);
    assert_eq!(pools.cluster().node(racaffinity::NodeId(0)).unwrap().state(), racaffinity::NodeState::Up);
}

#[test]
fn heartbeats_over_live_nodes_change_nothing() {
    let pools = pools("");
    for _ in 0..3 {
        assert!(pools.heartbeat_once(|p| p.get().is_ok()).is_empty());
    }
    assert!(pools.cluster().metrics().nodes.iter().all(|n| n.probe_misses == 0));
}
