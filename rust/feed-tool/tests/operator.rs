//! The operator commands of `racaffinity-feed` against a real 3-member etcd
//! (tests/cluster/etcdnodes): each writes its documented record and a core
//! cluster subscribed to the same prefix applies it; bad input and an
//! unreachable etcd write nothing and say why.
//!
//! One etcd cluster serves the file (one test, scenarios in turn under
//! their own prefixes), destroyed at the end, pass or fail.

mod common;

use std::time::Duration;

use common::{eventually, revision_of, text, tool, tool_with, Etcd};
use racaffinity::feed::etcd::Guarded;
use racaffinity::{Cluster, NodeState};

const BASE_PORT: u16 = 25090;

#[test]
fn operator_commands_over_a_real_etcd() {
    let etcd = Etcd::start(BASE_PORT, "feed-tool");
    bad_input_writes_nothing(&etcd);
    each_command_reaches_a_subscribed_cluster(&etcd);
    the_guarded_put_writes_only_for_the_holder(&etcd);
    a_written_record_is_not_reported_as_unwritten_when_stdout_fails(&etcd);
}

/// Status 1 says "nothing written" (the help): a script retries or alerts
/// on it. A record that was written, whose line could not be printed (a
/// closed pipe), is done: status 0, and the line goes to stderr.
fn a_written_record_is_not_reported_as_unwritten_when_stdout_fails(etcd: &Etcd) {
    struct ClosedPipe;
    impl std::io::Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }
    let url = etcd.url("stdout/");
    let args: Vec<String> = ["down", "A", "--feed", &url].iter().map(|a| a.to_string()).collect();
    let mut err = Vec::new();
    let code = racaffinity_feed_tool::run(&args, None, &mut ClosedPipe, &mut err);
    let err = String::from_utf8_lossy(&err);
    let (_, kvs) = etcd.client().range_prefix("stdout/node/A/state").unwrap();
    assert_eq!(kvs.first().and_then(|kv| kv.value.clone()).as_deref(), Some("down"), "the record is written");
    assert_eq!(code, 0, "stderr: {err}");
    assert!(err.contains("wrote node/A/state = down at revision"), "stderr: {err}");
}

/// The monitor's writes: `put_if_holder` writes only while the leader key is
/// attached to the writer's lease (and, when asked, the key holds a value).
fn the_guarded_put_writes_only_for_the_holder(etcd: &Etcd) {
    let kv = etcd.client();
    let (mine, theirs) = (kv.lease_grant(30).unwrap(), kv.lease_grant(30).unwrap());
    assert!(kv.claim("g/_monitor/leader", "me", mine).unwrap().0);
    let before = etcd.revision();
    assert_eq!(
        kv.put_if_holder("g/_monitor/leader", theirs, "g/node/A/state", "down", None).unwrap(),
        Guarded::NotHolder
    );
    assert_eq!(
        kv.put_if_holder("g/_monitor/leader", mine, "g/node/A/state", "up", Some("down")).unwrap(),
        Guarded::ValueDiffers
    );
    assert_eq!(etcd.revision(), before, "nothing written");
    let Guarded::Written(rev) = kv.put_if_holder("g/_monitor/leader", mine, "g/node/A/state", "down", None).unwrap()
    else {
        panic!("the holder writes")
    };
    assert_eq!(etcd.revision(), rev);
    assert!(matches!(
        kv.put_if_holder("g/_monitor/leader", mine, "g/node/A/state", "up", Some("down")).unwrap(),
        Guarded::Written(_)
    ));
    // The lease gone, its key goes, and its holder writes nothing more.
    kv.lease_revoke(mine).unwrap();
    let before = etcd.revision();
    assert_eq!(
        kv.put_if_holder("g/_monitor/leader", mine, "g/node/A/state", "down", None).unwrap(),
        Guarded::NotHolder
    );
    assert_eq!(etcd.revision(), before);
    kv.lease_revoke(theirs).unwrap();
}

fn applied_up_to(c: &Cluster, rev: u64) {
    eventually(&format!("revision {rev} applied"), Duration::from_secs(30), || {
        c.metrics().feed.expect("subscribed").revision >= rev
    });
}

fn state(c: &Cluster, node: &str) -> NodeState {
    c.node_by_name(node).unwrap().state()
}

fn each_command_reaches_a_subscribed_cluster(etcd: &Etcd) {
    let url = etcd.url("ops");
    let c = Cluster::from_config_text(&format!("nodes = A, B, C\ntopology.feed = {url}\ntopology.feed_timeout = 1s"))
        .unwrap();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--feed", &url]);
        let out = tool(&all);
        let rev = revision_of(&out);
        applied_up_to(&c, rev);
        (rev, text(&out.stdout))
    };

    let (_, out) = run(&["drain", "B", "--timeout", "30s"]);
    assert!(out.starts_with("wrote node/B/state = draining timeout=30s at revision "), "{out}");
    assert_eq!(state(&c, "B"), NodeState::Draining);
    // Dated: the writer's wall clock starts the timeout, for every subscriber.
    let now_s = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let before = now_s();
    let (_, out) = run(&["drain", "A", "--timeout", "1h", "--dated"]);
    let since: u64 = out
        .strip_prefix("wrote node/A/state = draining timeout=1h since=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a dated drain record: {out}"));
    assert!((before..=now_s()).contains(&since), "since={since} is when the tool wrote it");
    assert_eq!(state(&c, "A"), NodeState::Draining);
    let (_, out) = run(&["up", "A"]);
    assert!(out.starts_with("wrote node/A/state = up"), "{out}");
    run(&["down", "C"]);
    assert_eq!(state(&c, "C"), NodeState::Down);
    run(&["up", "C"]);
    assert_eq!(state(&c, "C"), NodeState::Up);

    run(&["weight", "A", "7"]);
    assert_eq!(c.node_by_name("A").unwrap().weight(), 7);
    let (_, out) = run(&["reset-weight", "A"]);
    assert!(out.starts_with("deleted node/A/weight at revision "), "{out}");
    assert_eq!(c.node_by_name("A").unwrap().weight(), 1, "the configured weight again");

    let owner = |p: u32| c.node_name(c.partition_owner(p).unwrap()).unwrap();
    run(&["partition-map", "0=C,1=C,2=C,3=C"]);
    assert_eq!((0..4).map(owner).collect::<Vec<_>>(), ["C"; 4]);
    // From stdin, one entry per line; RACAFF_FEED in place of --feed.
    let out = tool_with(&["partition-map", "-"], &[("RACAFF_FEED", &url)], Some("0=A\n1=B\n2=A\n3=B\n"));
    applied_up_to(&c, revision_of(&out));
    assert_eq!((0..4).map(owner).collect::<Vec<_>>(), ["A", "B", "A", "B"]);
    let file = std::env::temp_dir().join(format!("feed-tool-map-{}", std::process::id()));
    std::fs::write(&file, "0=B, 1=A\n").unwrap();
    run(&["partition-map", "--file", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!((owner(0), owner(1)), ("B".into(), "A".into()));

    let (_, out) = run(&["add", "D", "--weight", "3", "--address", "127.0.0.1:5999"]);
    assert!(out.starts_with("wrote node/D = present weight=3 address=127.0.0.1:5999 at revision "), "{out}");
    let d = c.node_by_name("D").expect("D added");
    assert_eq!((d.weight(), d.address().as_deref()), (3, Some("127.0.0.1:5999")));
    // Moving a node: its record put again with the new address (and the
    // weight it had: the record is written whole), for an added node and a
    // configured one alike.
    run(&["add", "D", "--weight", "3", "--address", "127.0.0.1:6001"]);
    let d = c.node_by_name("D").unwrap();
    assert_eq!((d.weight(), d.address().as_deref()), (3, Some("127.0.0.1:6001")), "the address moved");
    run(&["add", "A", "--address", "127.0.0.1:6002"]);
    assert_eq!(c.node_by_name("A").unwrap().address().as_deref(), Some("127.0.0.1:6002"));
    run(&["remove", "D"]);
    assert!(c.node_by_name("D").is_err(), "D removed");

    let line = "INSTANCE VERSION=1.0 service=orcl database=orcl instance=A host=h1 status=down reason=FAILURE \
                timestamp=2026-11-29 08:00:00";
    let (_, out) = run(&["fan", line]);
    assert!(out.starts_with("wrote fan/instance-A = INSTANCE "), "{out}");
    assert_eq!(state(&c, "A"), NodeState::Down);

    let out = tool(&["show", "--feed", &url]);
    assert!(out.status.success());
    let shown = text(&out.stdout);
    for key in ["node/B/state\tdraining timeout=30s", "node/C/state\tup", "partition_map\t0=B,1=A", "fan/instance-A\t"]
    {
        assert!(shown.contains(key), "`{key}` in\n{shown}");
    }
    assert!(!shown.contains("node/A/weight"), "deleted records are gone:\n{shown}");
    assert!(shown.contains("node/D\tremoved"), "a removal is a record:\n{shown}");
    let f = c.metrics().feed.unwrap();
    assert_eq!(f.refused, 0, "every record the tool wrote was applied: {f:?}");
    c.close();
}

fn bad_input_writes_nothing(etcd: &Etcd) {
    let url = etcd.url("bad");
    let before = etcd.revision();
    let expect = |args: &[&str], code: i32, says: &str| {
        let out = tool(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}{}", text(&out.stdout));
        assert!(err.contains(says), "{args:?}: `{says}` not in: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed {}", text(&out.stdout));
    };
    let f = url.as_str();
    expect(&["down", "A", "--feed", "http://127.0.0.1:1/p"], 2, "expected etcd://");
    expect(&["down", "A", "--feed", "etcd://127.0.0.1:2379"], 2, "no key prefix");
    expect(&["down", "A"], 2, "no feed");
    expect(&["frobnicate", "A", "--feed", f], 2, "unknown command `frobnicate`");
    expect(&[], 2, "no command");
    expect(&["down", "--feed", f], 2, "takes 1 argument");
    expect(&["down", "A", "--color", "--feed", f], 2, "no option --color");
    expect(&["down", "no/such", "--feed", f], 2, "contains `/`");
    expect(&["weight", "A", "0", "--feed", f], 2, "weight must be 1..=1000000");
    expect(&["weight", "A", "heavy", "--feed", f], 2, "not a number");
    expect(&["drain", "A", "--timeout", "30", "--feed", f], 2, "needs a unit");
    expect(&["drain", "A", "--timeout", "3w", "--feed", f], 2, "unknown duration unit");
    expect(&["partition-map", "0=A,0=B", "--feed", f], 2, "mapped twice");
    expect(&["partition-map", "zero=A", "--feed", f], 2, "not a number");
    expect(&["partition-map", "8=A", "--partitions", "8", "--feed", f], 2, "out of range");
    expect(&["partition-map", "--file", "/nonexistent/map", "--feed", f], 2, "/nonexistent/map");
    expect(&["add", "D", "--weight", "-1", "--feed", f], 2, "bad weight");
    expect(&["fan", "hello world", "--feed", f], 2, "event");
    assert_eq!(etcd.revision(), before, "nothing was written");

    // Nobody listens on port 1: no member reachable, status 1.
    expect(&["down", "A", "--feed", "etcd://127.0.0.1:1/bad"], 1, "no etcd member reachable");
    expect(&["show", "--feed", "etcd://127.0.0.1:1/bad"], 1, "no etcd member reachable");
    let help = tool(&["help"]);
    assert!(help.status.success() && text(&help.stdout).contains("exit status"));
}
