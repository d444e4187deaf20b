//! `racaffinity-feed monitor` against real PostgreSQL nodes
//! (tests/cluster/pgnodes) and a real 3-member etcd (tests/cluster/etcdnodes),
//! both on ports of this file and destroyed at the end, pass or fail:
//! a killed node is published `down` within misses × interval + probe
//! timeout + 1 s and `up` once restarted; of two monitors only the elected
//! one writes (and without the election both do, so the count can fail);
//! a leader killed with SIGKILL is replaced within the lease TTL + one
//! interval, and its successor publishes the next change; a leader paused
//! past its TTL writes nothing when it resumes.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, Etcd, Monitor, Pg};
use racaffinity::{Cluster, NodeState};

const ETCD_PORT: u16 = 25110;
const PG_PORT: u16 = 55881;

const INTERVAL: Duration = Duration::from_millis(500);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const MISSES: u32 = 2;
const TTL: Duration = Duration::from_secs(3);

/// The bound the issue sets for publishing a change after it happens.
fn detection_bound() -> Duration {
    INTERVAL * MISSES + PROBE_TIMEOUT + Duration::from_secs(1)
}

#[test]
fn the_monitor_over_real_nodes_and_etcd() {
    let etcd = Etcd::start(ETCD_PORT, "feed-tool");
    let pg = Pg::start(PG_PORT, 2);
    down_then_up_reach_a_subscribed_cluster(&etcd, &pg);
    of_two_monitors_only_the_leader_writes(&etcd, &pg);
    without_the_election_both_write(&etcd, &pg);
    a_killed_leader_is_replaced_within_the_ttl(&etcd, &pg);
    a_leader_paused_past_its_ttl_writes_nothing(&etcd, &pg);
}

fn monitor(id: &str, etcd: &Etcd, pg: &Pg, prefix: &str, extra: &[&str]) -> Monitor {
    let url = etcd.url(prefix);
    let (n1, n2) = (format!("N1={}", pg.addr(1)), format!("N2={}", pg.addr(2)));
    let mut args = vec![
        "--feed",
        &url,
        "--kind",
        "postgres",
        "--node",
        &n1,
        "--node",
        &n2,
        "--interval",
        "500ms",
        "--probe-timeout",
        "1s",
        "--misses",
        "2",
        "--lease-ttl",
        "3s",
    ];
    args.extend_from_slice(extra);
    Monitor::start(id, &args)
}

fn record(etcd: &Etcd, key: &str) -> Option<String> {
    let (_, kvs) = etcd.client().range_prefix(key).unwrap();
    kvs.into_iter().find(|kv| kv.key == key).and_then(|kv| kv.value)
}

fn leader(etcd: &Etcd, prefix: &str) -> Option<String> {
    record(etcd, &format!("{prefix}/_monitor/leader"))
}

fn has_line(m: &Monitor, start: &str) -> bool {
    m.lines().iter().any(|l| l.starts_with(start))
}

/// Kills node `i` and waits until `prefix` says it is down; the time taken.
fn kill_and_see_down(etcd: &Etcd, pg: &Pg, i: u16, prefix: &str) -> Duration {
    let key = format!("{prefix}/node/N{i}/state");
    pg.run(&["kill", &i.to_string()]);
    let start = Instant::now();
    eventually(&format!("{key} = down"), Duration::from_secs(30), || record(etcd, &key).as_deref() == Some("down"));
    eprintln!("{key}: down published {:?} after the kill", start.elapsed());
    start.elapsed()
}

fn restart_and_see_up(etcd: &Etcd, pg: &Pg, i: u16, prefix: &str) -> Duration {
    let key = format!("{prefix}/node/N{i}/state");
    pg.run(&["restart", &i.to_string()]);
    let start = Instant::now();
    eventually(&format!("{key} = up"), Duration::from_secs(30), || record(etcd, &key).as_deref() == Some("up"));
    eprintln!("{key}: up published {:?} after the restart", start.elapsed());
    start.elapsed()
}

fn down_then_up_reach_a_subscribed_cluster(etcd: &Etcd, pg: &Pg) {
    let c = Cluster::from_config_text(&format!(
        "nodes = N1, N2\ntopology.feed = {}\ntopology.feed_timeout = 1s",
        etcd.url("m1")
    ))
    .unwrap();
    let mut m = monitor("solo", etcd, pg, "m1", &[]);
    eventually("solo leads", Duration::from_secs(30), || has_line(&m, "leading as solo"));
    assert_eq!(leader(etcd, "m1").as_deref(), Some("solo"));
    eventually("both nodes probed up", Duration::from_secs(30), || {
        has_line(&m, "probe N1: up") && has_line(&m, "probe N2: up")
    });
    assert!(m.writes().is_empty(), "nodes up with no record: nothing to write: {:?}", m.lines());

    let took = kill_and_see_down(etcd, pg, 2, "m1");
    assert!(took <= detection_bound(), "down published after {took:?} (bound {:?})", detection_bound());
    eventually("the cluster sees N2 down", Duration::from_secs(30), || {
        c.node_by_name("N2").unwrap().state() == NodeState::Down
    });
    assert_eq!(c.node_by_name("N1").unwrap().state(), NodeState::Up);

    let took = restart_and_see_up(etcd, pg, 2, "m1");
    assert!(took <= detection_bound(), "up published after {took:?}");
    eventually("the cluster sees N2 up", Duration::from_secs(30), || {
        c.node_by_name("N2").unwrap().state() == NodeState::Up
    });
    // The monitor logs a write after etcd answers the put: the cluster may read the record first.
    eventually("the monitor logged its up write", Duration::from_secs(10), || m.writes().len() >= 2);
    assert_eq!(m.writes().len(), 2, "one down, one up: {:?}", m.lines());

    m.signal("-TERM");
    let status = m.wait(Duration::from_secs(15));
    assert!(status.success(), "SIGTERM: exit 0, got {status:?}");
    assert!(has_line(&m, "revoked lease"), "{:?}", m.lines());
    assert_eq!(leader(etcd, "m1"), None, "the revoked lease took the leader key with it");
    c.close();
}

/// Starts two monitors at once; (leader, follower) once one leads.
fn two(etcd: &Etcd, pg: &Pg, prefix: &str) -> (Monitor, Monitor) {
    let a = monitor("a", etcd, pg, prefix, &[]);
    let b = monitor("b", etcd, pg, prefix, &[]);
    pair(etcd, prefix, a, b)
}

fn pair(etcd: &Etcd, prefix: &str, a: Monitor, b: Monitor) -> (Monitor, Monitor) {
    eventually("one of two leads", Duration::from_secs(30), || leader(etcd, prefix).is_some());
    let (l, f) = if leader(etcd, prefix).as_deref() == Some("a") { (a, b) } else { (b, a) };
    eventually("the other follows", Duration::from_secs(30), || has_line(&f, &format!("following {}", l.id)));
    eventually("both probed", Duration::from_secs(30), || has_line(&l, "probe N2: up") && has_line(&f, "probe N2: up"));
    (l, f)
}

fn of_two_monitors_only_the_leader_writes(etcd: &Etcd, pg: &Pg) {
    let (l, f) = two(etcd, pg, "m2");
    kill_and_see_down(etcd, pg, 2, "m2");
    eventually("the follower saw it too", Duration::from_secs(30), || has_line(&f, "probe N2: down"));
    restart_and_see_up(etcd, pg, 2, "m2");
    eventually("the follower saw it too", Duration::from_secs(30), || {
        f.lines().iter().filter(|l| l.starts_with("probe N2: up")).count() == 2
    });
    // The leader logs a write once etcd answers its put, which may come after the
    // test has read the value from etcd (a CI run counted 1 here with both values
    // already published): waited for, then counted exactly.
    eventually("the leader logged its second write", Duration::from_secs(10), || l.writes().len() >= 2);
    assert_eq!(l.writes().len(), 2, "the leader wrote down then up: {:?}", l.lines());
    assert!(f.writes().is_empty(), "the follower wrote: {:?}", f.lines());
    assert!(!has_line(&f, "leading"), "{:?}", f.lines());
    for mut m in [f, l] {
        m.signal("-INT");
        assert!(m.wait(Duration::from_secs(15)).success(), "SIGINT: exit 0");
    }
    assert_eq!(leader(etcd, "m2"), None, "the leader revoked its lease on SIGINT");
}

/// The control of the test above: with the election off (a hidden test
/// flag) both monitors write, and the count of writers sees it.
fn without_the_election_both_write(etcd: &Etcd, pg: &Pg) {
    let a = monitor("a", etcd, pg, "m3", &["--unsafe-no-election"]);
    let b = monitor("b", etcd, pg, "m3", &["--unsafe-no-election"]);
    eventually("both probed", Duration::from_secs(30), || has_line(&a, "probe N2: up") && has_line(&b, "probe N2: up"));
    kill_and_see_down(etcd, pg, 2, "m3");
    let wrote_down = |m: &Monitor| m.writes().iter().any(|w| w.starts_with("wrote node/N2/state = down"));
    eventually("both wrote down", Duration::from_secs(30), || wrote_down(&a) && wrote_down(&b));
    restart_and_see_up(etcd, pg, 2, "m3");
}

fn a_killed_leader_is_replaced_within_the_ttl(etcd: &Etcd, pg: &Pg) {
    let (mut l, f) = two(etcd, pg, "m4");
    l.signal("-KILL");
    let killed = Instant::now();
    l.wait(Duration::from_secs(10));
    let key = "m4/node/N2/state";
    pg.run(&["kill", "2"]);
    eventually("the follower leads", Duration::from_secs(30), || has_line(&f, &format!("leading as {}", f.id)));
    let took = killed.elapsed();
    eprintln!("m4: {} took over {took:?} after the leader's SIGKILL", f.id);
    assert!(took <= TTL + INTERVAL + Duration::from_secs(1), "took over after {took:?}");
    eventually("N2 down", Duration::from_secs(30), || record(etcd, key).as_deref() == Some("down"));
    let took = killed.elapsed();
    assert!(took <= TTL + INTERVAL + detection_bound(), "down published {took:?} after the leader was killed");
    // Logged once etcd answers the put, which may come after the test read the
    // record (a CI run of d38dda9 found the record down and no line yet).
    eventually("the new leader logged its write", Duration::from_secs(10), || {
        f.writes().iter().any(|w| w.starts_with("wrote node/N2/state = down"))
    });
    assert_eq!(leader(etcd, "m4").as_deref(), Some(f.id.as_str()));
    restart_and_see_up(etcd, pg, 2, "m4");
}

fn a_leader_paused_past_its_ttl_writes_nothing(etcd: &Etcd, pg: &Pg) {
    // Both ignore what they know of their lease's expiry (a hidden test
    // flag): what stops the paused one is the guard of its writes alone.
    let flag = ["--unsafe-trust-lease"];
    let a = monitor("a", etcd, pg, "m5", &flag);
    let b = monitor("b", etcd, pg, "m5", &flag);
    let (l, f) = pair(etcd, "m5", a, b);
    l.signal("-STOP");
    eventually("the follower leads", Duration::from_secs(30), || has_line(&f, &format!("leading as {}", f.id)));
    // A change the paused leader has not seen: it will try to publish it
    // once it resumes, still believing it leads.
    kill_and_see_down(etcd, pg, 2, "m5");
    let before = l.writes().len();
    l.signal("-CONT");
    eventually("its guarded write fails", Duration::from_secs(30), || {
        has_line(&l, "lost the lead: the leader key is no longer attached to our lease")
    });
    assert_eq!(l.writes().len(), before, "the paused leader wrote after its lease expired: {:?}", l.lines());
    restart_and_see_up(etcd, pg, 2, "m5");
    assert_eq!(l.writes().len(), before, "{:?}", l.lines());
}
