//! Feed records (issue [fleet-feed], the core's half): a fleet's shared
//! inputs as key/value records versioned by the log's revision. Applied in
//! any order, twice, or again after a full re-read, they end in one state.

mod common;

use proptest::prelude::*;
use racaffinity::{Cluster, ErrorKind, FeedOutcome, NodeState};

const CONFIG: &str = "nodes = A, B, C\nnode.B.weight = 2\ntransaction.strict = true\ndata.partitions = 16";

type Record = (u64, &'static str, Option<&'static str>);

/// A log of a fleet: revisions in order, several records per key.
const LOG: &[Record] = &[
    (10, "node/A/state", Some("draining timeout=30s")),
    (11, "node/B/weight", Some("5")),
    (12, "node/E", Some("present weight=3")),
    (13, "partition_map", Some("0=A, 1=B, 2=E")),
    (14, "node/A/state", Some("down")),
    (15, "node/C/state", Some("draining")),
    (16, "node/B/weight", None),
    (17, "node/C/state", None),
    (
        18,
        "fan/ons-1",
        Some("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=A status=up timestamp=2020-01-01 00:00:00"),
    ),
    (19, "node/F", Some("present")),
    (20, "node/F", None),
    (21, "partition_map", Some("0=B,1=B")),
    // A removal is a record, for a configured node too.
    (22, "node/C", Some("removed")),
    (23, "node/G", Some("present")),
    (24, "node/G", Some(" removed ")),
];

fn state(c: &Cluster) -> Vec<String> {
    let mut v: Vec<String> = ["A", "B", "C", "E", "F", "G"]
        .iter()
        .filter_map(|n| c.node_by_name(n).ok())
        .map(|n| format!("{}:{}:{}:{}", n.name(), n.state(), n.shared_state(), n.weight()))
        .collect();
    v.push(c.topology_fingerprint());
    v
}

fn apply_all(c: &Cluster, records: &[Record]) {
    for (v, k, val) in records {
        // A record about a node this cluster has not added yet is refused
        // here; the subscriber re-reads the full state after such a refusal.
        let _ = c.apply_feed_record(*v, k, *val);
    }
}

#[test]
fn the_log_in_order_gives_the_expected_state() {
    let c = common::cluster(CONFIG);
    apply_all(&c, LOG);
    let a = c.node_by_name("A").unwrap();
    assert_eq!(a.state(), NodeState::Up, "the relayed FAN up (revision 18) beats the down of revision 14");
    assert_eq!(c.node_by_name("B").unwrap().weight(), 2, "a deleted weight is the configured one");
    assert!(c.node_by_name("C").is_err(), "a configured node removed by a `removed` record");
    assert!(c.node_by_name("G").is_err(), "added then removed by a record");
    assert_eq!(c.node_by_name("E").unwrap().weight(), 3);
    assert!(c.node_by_name("F").is_err(), "added then removed");
    assert_eq!(c.node_name(c.partition_owner(0).unwrap()).unwrap(), "B");
}

#[test]
fn a_record_seen_twice_or_late_changes_nothing() {
    let c = common::cluster(CONFIG);
    assert_eq!(c.apply_feed_record(5, "node/A/state", Some("down")).unwrap(), FeedOutcome::Applied);
    assert_eq!(c.apply_feed_record(5, "node/A/state", Some("down")).unwrap(), FeedOutcome::Stale);
    assert_eq!(c.apply_feed_record(4, "node/A/state", Some("up")).unwrap(), FeedOutcome::Stale);
    assert_eq!(c.node_by_name("A").unwrap().state(), NodeState::Down);
    assert_eq!(c.apply_feed_record(6, "node/A/state", None).unwrap(), FeedOutcome::Applied);
    assert_eq!(c.node_by_name("A").unwrap().state(), NodeState::Up);
}

/// A FAN line that would take node B down.
const B_DOWN: &str =
    "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=B status=down reason=FAILURE timestamp=2020-01-01 00:00:00";

#[test]
fn bad_records_are_refused_with_a_reason_and_change_nothing() {
    let c = common::cluster(CONFIG);
    let before = state(&c);
    for (key, value, kind, says) in [
        ("nodes/A/state", Some("down"), ErrorKind::InvalidArgument, "unknown key"),
        ("node/A/state", Some("sideways"), ErrorKind::InvalidArgument, "unknown node state"),
        ("node/A/state", Some("down timeout=5s"), ErrorKind::InvalidArgument, "unexpected"),
        ("node/A/weight", Some("0"), ErrorKind::InvalidArgument, "weight must be"),
        ("node/A/weight", Some("heavy"), ErrorKind::InvalidArgument, "not a number"),
        ("node/Z/state", Some("down"), ErrorKind::UnknownNode, "Z"),
        ("node/bad name", Some("present"), ErrorKind::InvalidArgument, "node name"),
        // No node can have such a name: a key of no known form, not an unknown node.
        ("node//state", Some("down"), ErrorKind::InvalidArgument, "node name"),
        ("node//state", None, ErrorKind::InvalidArgument, "node name"),
        ("node/bad name/state", Some("down"), ErrorKind::InvalidArgument, "node name"),
        ("node//weight", Some("3"), ErrorKind::InvalidArgument, "node name"),
        ("node//weight", None, ErrorKind::InvalidArgument, "node name"),
        // Numbers are digits, as in the config and FAN lines: no sign.
        ("node/A/weight", Some("+5"), ErrorKind::InvalidArgument, "not a number"),
        ("node/G", Some("present weight=+3"), ErrorKind::InvalidArgument, "bad weight"),
        ("node/A/state", Some("draining timeout=30s since=+1700000000"), ErrorKind::InvalidArgument, "since"),
        ("partition_map", Some("+0=B"), ErrorKind::InvalidArgument, "not a number"),
        ("node/G", Some("absent"), ErrorKind::InvalidArgument, "expected `present`"),
        // An attribute given twice is ambiguous, as a FAN line's repeated key:
        // refused, not read as its last value.
        ("node/A/state", Some("draining timeout=30s timeout=1h"), ErrorKind::InvalidArgument, "twice"),
        ("node/A/state", Some("draining timeout=30s since=1 since=2"), ErrorKind::InvalidArgument, "twice"),
        ("node/G", Some("present weight=3 weight=5"), ErrorKind::InvalidArgument, "twice"),
        ("node/G", Some("present address=h:1 address=h:2"), ErrorKind::InvalidArgument, "twice"),
        ("partition_map", Some("0=A,0=B"), ErrorKind::InvalidArgument, "mapped twice"),
        ("partition_map", Some("99=A"), ErrorKind::InvalidArgument, "out of range"),
        ("partition_map", Some("x"), ErrorKind::InvalidArgument, "not <partition>=<node>"),
        ("fan/1", Some("not an event"), ErrorKind::EventParse, ""),
        // The key is `fan/<id>`: a record with no id is of no known form.
        ("fan/", Some(B_DOWN), ErrorKind::InvalidArgument, "fan/<id>"),
        ("fan/", None, ErrorKind::InvalidArgument, "fan/<id>"),
    ] {
        let e = c.apply_feed_record(100, key, value).unwrap_err();
        assert_eq!(e.kind(), kind, "{key}: {e}");
        assert!(e.to_string().contains(says), "{key}: {e}");
    }
    let huge = "0=A,".repeat(70_000);
    assert_eq!(c.apply_feed_record(100, "partition_map", Some(&huge)).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(state(&c), before, "nothing changed");
}

/// What a full re-read gives: the last record of each key (a deleted key
/// as its deletion at its revision).
fn snapshot() -> Vec<Record> {
    let mut last: Vec<Record> = Vec::new();
    for r in LOG {
        last.retain(|l| l.1 != r.1);
        last.push(*r);
    }
    last
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The log delivered in any order, with records repeated, to three
    /// clusters, each followed by a full re-read (what a subscriber does
    /// after refusing a record about a node it has not added yet): all end
    /// in the state of the log applied in order.
    #[test]
    fn any_order_with_repeats_ends_in_the_state_of_the_log(
        orders in prop::collection::vec(Just(LOG.to_vec()).prop_shuffle(), 3),
        repeats in prop::collection::vec(0..LOG.len(), 0..8),
    ) {
        let reference = common::cluster(CONFIG);
        apply_all(&reference, LOG);
        for order in orders {
            let c = common::cluster(CONFIG);
            let mut records = order.clone();
            records.extend(repeats.iter().map(|i| LOG[*i]));
            apply_all(&c, &records);
            apply_all(&c, &snapshot());
            prop_assert_eq!(state(&c), state(&reference));
        }
    }
}

#[test]
fn a_refused_record_names_its_kind_once() {
    let c = common::cluster(CONFIG);
    for (key, value) in [("node/A/weight", "0"), ("node/A/state", "sideways"), ("node/Q", "present weight=0")] {
        let e = c.apply_feed_record(1, key, Some(value)).unwrap_err();
        assert_eq!(e.to_string().matches("invalid argument").count(), 1, "{e}");
    }
}

#[test]
fn a_membership_records_weight_is_a_versioned_weight_wherever_the_node_came_from() {
    // One process has E in its config (weight 1); another gets E from the
    // feed. The record's weight must end the same in both, in any order.
    let records: [Record; 2] = [(10, "node/E", Some("present weight=3")), (8, "node/E/weight", Some("5"))];
    for order in [[0, 1], [1, 0]] {
        let configured = common::cluster("nodes = A, B, C, E\ntransaction.strict = true\ndata.partitions = 16");
        let added = common::cluster(CONFIG);
        for i in order {
            let (v, k, val) = records[i];
            let _ = configured.apply_feed_record(v, k, val);
            let _ = added.apply_feed_record(v, k, val);
        }
        // The weight record is older than the membership record: 3 wins.
        let w = |c: &Cluster| c.node_by_name("E").unwrap().weight();
        assert_eq!((w(&configured), w(&added)), (3, 3), "order {order:?}");
    }
}

#[test]
fn an_addition_every_subscriber_would_refuse_is_refused_before_it_is_written() {
    // N6403 and N15384 share a session-token id: the record would be
    // refused by every subscriber, so the call must not write it at all
    // (here etcd is unreachable: a write attempt would say FeedUnavailable).
    let c = common::cluster("nodes = N6403\ntopology.feed = etcd://127.0.0.1:1/t\ntopology.feed_timeout = 100ms");
    let e = c.add_node(racaffinity::NodeSpec::new("N15384")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}
