//! UCP's planned maintenance and partition topology in the Rust node pools,
//! over local PostgreSQL nodes (issue [ucp-parity]):
//! - a FAN drain closes a draining node's idle connections at once and
//!   retires busy ones as they come back, so the node holds none of ours
//!   when its drain timeout ends;
//! - a partition-map loader the application supplies runs at start, after
//!   HA events and on its period; a failing one keeps the last good map and
//!   shows in the metrics.

mod common;

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{config, nodes, server_port, PgNode};
use postgres::{Client, NoTls};
use racaffinity::{Cluster, NodeState};
use racaffinity_oracle::{NodePool, NodePools};

/// A pool that keeps idle connections, as real pools do.
struct IdlePool {
    dsn: String,
    idle: Arc<Mutex<Vec<Client>>>,
    retired: AtomicUsize,
}

struct Pooled {
    client: Option<Client>,
    home: Arc<Mutex<Vec<Client>>>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            self.home.lock().unwrap().push(c);
        }
    }
}

impl Deref for Pooled {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().unwrap()
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap()
    }
}

impl IdlePool {
    fn new(node: &PgNode, app: &str) -> IdlePool {
        IdlePool {
            dsn: format!("{} connect_timeout=5 application_name={app}", node.dsn),
            idle: Arc::default(),
            retired: AtomicUsize::new(0),
        }
    }
    fn idle(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

impl NodePool for IdlePool {
    type Connection = Pooled;
    type Error = postgres::Error;

    fn get(&self) -> Result<Pooled, postgres::Error> {
        let reuse = self.idle.lock().unwrap().pop();
        let client = match reuse {
            Some(c) => c,
            None => Client::connect(&self.dsn, NoTls)?,
        };
        Ok(Pooled { client: Some(client), home: self.idle.clone() })
    }

    fn is_node_failure(err: &postgres::Error) -> bool {
        err.is_closed() || err.as_db_error().is_none()
    }

    fn close_idle(&self) {
        self.idle.lock().unwrap().clear();
    }

    fn retire(&self, mut conn: Pooled) {
        conn.client.take();
        self.retired.fetch_add(1, Ordering::SeqCst);
    }
}

fn pools(app: &str, extra: &str) -> NodePools<IdlePool> {
    let nodes = nodes();
    let cluster = Cluster::from_config_text(&config(nodes, extra)).unwrap();
    NodePools::new(cluster, nodes.iter().map(|n| IdlePool::new(n, app)).collect()).unwrap()
}

/// Our sessions on `node`, as the server itself counts them.
fn backends(node: &PgNode, app: &str) -> i64 {
    let mut admin = Client::connect(&node.dsn, NoTls).unwrap();
    admin.query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&app]).unwrap().get(0)
}

fn wait_backends(node: &PgNode, app: &str, want: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = backends(node, app);
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fan(instance: &str, status: &str, extra: &str) -> String {
    format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={instance} status={status} {extra}")
}

#[test]
fn a_drain_closes_idle_connections_at_once_and_retires_busy_ones_as_they_return() {
    let app = format!("racaff-drain-{}", std::process::id());
    let p = pools(&app, "");
    let rac2 = p.cluster().node_by_name("RAC2").unwrap().id();
    let node2 = &nodes()[1];
    {
        // Three connections to RAC2, returned: the pool keeps them idle.
        let held: Vec<_> = (0..3).map(|_| p.acquire_node(rac2).unwrap()).collect();
        drop(held);
    }
    assert_eq!(p.pool(rac2).unwrap().idle(), 3);
    let mut busy = p.acquire_node(rac2).unwrap();
    assert_eq!(wait_backends(node2, &app, 3), 3);

    p.apply_event(&fan("RAC2", "down", "reason=USER drain_timeout=1")).unwrap();
    assert_eq!(p.cluster().node(rac2).unwrap().state(), NodeState::Draining);
    assert_eq!(p.pool(rac2).unwrap().idle(), 0, "idle connections to a draining node close at once");
    assert_eq!(wait_backends(node2, &app, 1), 1, "only the busy connection is left on the server");

    // In-flight work finishes on its node; its connection is then retired.
    assert_eq!(server_port(&mut busy), node2.port);
    drop(busy);
    assert_eq!(p.pool(rac2).unwrap().retired.load(Ordering::SeqCst), 1);
    assert_eq!(p.pool(rac2).unwrap().idle(), 0);
    assert_eq!(wait_backends(node2, &app, 0), 0, "the draining node holds none of our connections");

    // New work avoids it; `status=up` brings it back for new work.
    for _ in 0..30 {
        assert_ne!(p.acquire().unwrap().node(), rac2);
    }
    p.apply_event(&fan("RAC2", "up", "")).unwrap();
    assert!((0..60).any(|_| p.acquire().unwrap().node() == rac2), "load returns to RAC2 after status=up");
}

/// The partition map lives in a table on node 1, as an application keeps it.
fn map_table(c: &mut Client, table: &str, owner: &str, partitions: u32) {
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (part int, node text)")).unwrap();
    for part in 0..partitions as i32 {
        c.execute(&format!("INSERT INTO {table} VALUES ($1, $2)"), &[&part, &owner]).unwrap();
    }
}

#[test]
fn the_partition_map_follows_its_table_with_no_request_failing() {
    let table = format!("partmap_{}", std::process::id());
    let node1 = &nodes()[0];
    let mut admin = Client::connect(&node1.dsn, NoTls).unwrap();
    map_table(&mut admin, &table, "RAC2", 16);

    let mut p = pools("racaff-loader", "data.partitions = 16\n");
    let reader = Mutex::new(Client::connect(&node1.dsn, NoTls).unwrap());
    let query = format!("SELECT part, node FROM {table}");
    let epoch = p
        .set_partition_loader("table", Duration::from_millis(100), move || {
            let rows = reader.lock().unwrap().query(query.as_str(), &[])?;
            Ok(rows.iter().map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, String>(1))).collect())
        })
        .expect("the first load");
    assert_eq!(epoch, p.cluster().partition_map_epoch());
    let owner_port = |p: &NodePools<IdlePool>, key: i64| server_port(&mut p.acquire_key_i64(key).unwrap());
    for key in 0..64 {
        assert_eq!(owner_port(&p, key), nodes()[1].port, "key {key} goes to RAC2 as the table says");
    }

    // Traffic runs while the table changes and the pools reload.
    let p = Arc::new(p);
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let (p, stop, failures) = (p.clone(), stop.clone(), failures.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match p.acquire_key_i64((n % 64) as i64) {
                    Ok(mut c) => {
                        if c.simple_query("SELECT 1").is_err() {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                n += 1;
            }
            n
        })
    };
    admin.execute(&format!("UPDATE {table} SET node = 'RAC3' WHERE part % 2 = 0"), &[]).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let reloaded = p.maintain();
    assert!(matches!(reloaded, Some(Ok(_))), "the period elapsed: maintain reloads ({reloaded:?})");
    for key in 0..64 {
        let part = p.cluster().partition_of(racaffinity::DataKey::Int(key)).unwrap();
        let want = if part % 2 == 0 { nodes()[2].port } else { nodes()[1].port };
        assert_eq!(owner_port(&p, key), want, "key {key} (partition {part}) follows the table");
    }

    // A failing loader keeps the last good map and shows in the metrics.
    let epoch = p.cluster().partition_map_epoch();
    admin.batch_execute(&format!("ALTER TABLE {table} RENAME TO {table}_gone")).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert!(p.maintain().is_some_and(|r| r.is_err()));
    assert_eq!(p.cluster().partition_map_epoch(), epoch, "a failed load changes nothing");
    let m = p.cluster().metrics().to_json();
    assert!(m.contains(r#""load_failures":1"#), "{m}");
    assert!(m.contains(&table), "the last load error is in the metrics: {m}");
    // An HA event triggers a reload at once (it fails again here: counted).
    p.apply_event(&fan("RAC1", "down", "reason=FAILURE")).unwrap();
    assert!(p.cluster().metrics().to_json().contains(r#""load_failures":2"#));

    stop.store(true, Ordering::Relaxed);
    let requests = traffic.join().unwrap();
    assert!(requests > 0);
    assert_eq!(failures.load(Ordering::SeqCst), 0, "no request failed over {requests} during the reloads");
    admin.batch_execute(&format!("DROP TABLE {table}_gone")).unwrap();
}
