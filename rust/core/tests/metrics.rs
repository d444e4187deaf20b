//! Metrics snapshot, JSON and Prometheus text.

mod common;

use common::cluster;
use racaffinity::{NodeState, Outcome, Scope};

fn exercised() -> racaffinity::Cluster {
    let c = cluster("name = orcl\nnodes = A, B, C\ntransaction.strict = true");
    let pin = c.pin_thread().unwrap();
    c.pick().unwrap();
    c.tx_begin(b"g1").unwrap();
    c.tx_begin(b"g1").unwrap();
    c.session_route(b"s1").unwrap();
    c.route_key(b"k").unwrap();
    let owner = c.tx_begin(b"g2").unwrap().node;
    c.set_node_state(&c.node_name(owner).unwrap(), NodeState::Down).unwrap();
    let _ = c.tx_begin(b"g2");
    let l = c.lease(c.pick_balanced().unwrap());
    l.release(Outcome::Failed);
    drop(pin);
    c
}

#[test]
fn snapshot_counts_every_kind_of_routing() {
    let c = exercised();
    let m = c.metrics();
    assert_eq!(m.cluster, "orcl");
    assert_eq!(m.nodes.len(), 3);
    let sc = |s: Scope| &m.scopes[s as usize];
    assert_eq!(sc(Scope::Thread).live, 0);
    assert_eq!(sc(Scope::Thread).placements, 1);
    assert_eq!(sc(Scope::Thread).hits, 1);
    assert_eq!(sc(Scope::Transaction).live, 2);
    assert_eq!(sc(Scope::Transaction).placements, 2);
    assert_eq!(sc(Scope::Transaction).hits, 1);
    assert_eq!(sc(Scope::Transaction).strict_refusals, 1);
    assert!(sc(Scope::Transaction).strict);
    assert_eq!(sc(Scope::Session).live, 1);
    assert_eq!(sc(Scope::Data).hits, 1);
    assert_eq!(m.total_picks(), 8);
    assert_eq!(m.nodes.iter().map(|n| n.failures).sum::<u64>(), 1);
    assert_eq!(m.nodes.iter().map(|n| n.state_changes).sum::<u64>(), 1);
    assert_eq!(m.nodes.iter().map(|n| n.strict_refusals).sum::<u64>(), 1);
    assert_eq!(m.nodes.iter().map(|n| n.in_flight).sum::<i64>(), 0);
}

#[test]
fn json_is_valid_and_carries_the_snapshot() {
    let c = exercised();
    let m = c.metrics();
    let v: serde_json::Value = serde_json::from_str(&m.to_json()).expect("valid JSON");
    assert_eq!(v["cluster"], "orcl");
    assert_eq!(v["hash_version"], "racaffinity-hrw-v2");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(v["scopes"]["transaction"]["live"], 2);
    assert_eq!(v["scopes"]["transaction"]["strict_refusals"], 1);
    let picks: u64 = v["nodes"].as_array().unwrap().iter().map(|n| n["picks"].as_u64().unwrap()).sum();
    assert_eq!(picks, m.total_picks());
    assert_eq!(v["nodes"].as_array().unwrap().iter().filter(|n| n["state"] == "down").count(), 1);
}

#[test]
fn prometheus_text_is_well_formed() {
    let c = exercised();
    let text = c.metrics().to_prometheus();
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(typed.insert(name.to_string()), "TYPE given twice for {name}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        // name{labels} value
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
        value.parse::<f64>().unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(typed.contains(name), "sample before its TYPE: {line}");
        assert!(series.contains("cluster=\"orcl\""), "{line}");
    }
    assert!(text.contains("racaffinity_affinities{cluster=\"orcl\",scope=\"transaction\"} 2"));
    assert!(text.contains("racaffinity_node_failures_total{cluster=\"orcl\",node="));
    assert_eq!(text.matches("state=\"down\"} 1").count(), 1);
}

#[test]
fn the_topology_fingerprint_changes_with_the_routing_view_and_agrees_across_processes() {
    let (p, q) = (common::cluster("nodes = A, B, C"), common::cluster("nodes = A, B, C"));
    let f0 = p.topology_fingerprint();
    assert_eq!(f0.len(), 8);
    assert_eq!(f0, q.topology_fingerprint(), "same view, same fingerprint");
    p.set_node_state("B", racaffinity::NodeState::Draining).unwrap();
    let f1 = p.topology_fingerprint();
    assert_ne!(f1, f0);
    // RLB percents steer balancing only, never a placement; session advice does.
    p.apply_event("VERSION=1.0 database=orcl service=svc { {instance=A percent=60 flag=GOOD aff=TRUE} }").unwrap();
    assert_eq!(p.topology_fingerprint(), f1);
    p.apply_event("VERSION=1.0 database=orcl service=svc { {instance=A percent=60 flag=GOOD aff=FALSE} }").unwrap();
    assert_ne!(p.topology_fingerprint(), f1);
    // Traffic changes no routing view.
    let f2 = p.topology_fingerprint();
    for _ in 0..10 {
        p.pick_balanced().unwrap();
    }
    assert_eq!(p.topology_fingerprint(), f2);
    assert!(p.metrics().to_json().contains(&format!(r#""fingerprint":"{f2}""#)));
    assert!(p.metrics().to_prometheus().contains(&format!("fingerprint=\"{f2}\"")));
}

#[test]
fn a_failed_partition_map_load_is_counted_and_its_message_stays_valid_json() {
    let c = cluster("nodes = A, B\ndata.partitions = 8");
    c.replace_partition_map(&[(1, "B")], "table").unwrap();
    let epoch = c.partition_map_epoch();
    c.partition_map_load_failed("table", "relation \"partmap\"\ndoes not exist\t\u{1}").unwrap();
    c.partition_map_load_failed("table", &"x".repeat(2000)).unwrap();
    assert_eq!(
        c.partition_map_load_failed("bad source", "x").unwrap_err().kind(),
        racaffinity::ErrorKind::InvalidArgument
    );
    assert_eq!(c.partition_map_epoch(), epoch, "a failed load changes no map");
    assert_eq!(c.partition_owner(1).map(|n| c.node_name(n).unwrap()).unwrap(), "B");
    let m = c.metrics();
    assert_eq!(m.partition_map_load_failures, 2);
    assert!(m.partition_map_last_error.as_deref().unwrap().len() <= 512);
    c.partition_map_load_failed("table", "relation \"partmap\"\ndoes not exist\t\u{1}").unwrap();
    let v: serde_json::Value = serde_json::from_str(&c.metrics().to_json()).expect("valid JSON");
    assert_eq!(v["partition_map"]["load_failures"], 3);
    assert_eq!(v["partition_map"]["last_error"], "table: relation \"partmap\"\ndoes not exist\t\u{1}");
    assert!(c.metrics().to_prometheus().contains("racaffinity_partition_map_load_failures_total{cluster=\""));
}

/// A Prometheus counter never goes down: removing a node keeps its picks in
/// `racaffinity_locality_picks_total` (and its spans in the cluster's
/// `tx_spans`), as Prometheus would otherwise read a counter reset.
#[test]
fn locality_picks_never_decrease_when_a_node_is_removed() {
    let c = cluster(
        "nodes = A, B\nnode.A.zone = z1\nnode.B.zone = z2\nlocal.zone = z1\npolicy = round_robin\nlocality.spill_percent = 0",
    );
    let series = |c: &racaffinity::Cluster| -> Vec<(String, u64)> {
        c.metrics()
            .to_prometheus()
            .lines()
            .filter(|l| l.starts_with("racaffinity_locality_picks_total{"))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    };
    for _ in 0..100 {
        c.pick().unwrap();
    }
    let before = series(&c);
    assert_eq!(before.iter().map(|(_, v)| v).sum::<u64>(), 100, "{before:?}");
    c.remove_node("A").unwrap();
    let after = series(&c);
    for ((k, b), (_, a)) in before.iter().zip(&after) {
        assert!(a >= b, "{k} went from {b} to {a}");
    }
}

/// Counters are u64 and Prometheus prints them as written: a count past
/// i64::MAX is that count, not a negative one. Reachable: a host counts
/// the hits it served from its cache in one call (`count_host_hits`, any
/// u64). Before, every node counter went through `as i64`, and this one
/// read -9223372036854775808.
#[test]
fn a_counter_past_i64_max_is_printed_as_it_is() {
    let c = cluster("name = big\nnodes = A, B");
    let a = c.node_ids()[0];
    c.count_host_hits(a, 1 << 63).unwrap();
    let text = c.metrics().to_prometheus();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{cluster=\"big\",node=\"A\"}}")))
            .unwrap_or_else(|| panic!("no {name} of A in\n{text}"))
            .to_string()
    };
    assert!(line("racaffinity_node_affinity_hits_total").ends_with(" 9223372036854775808"), "{text}");
    // The scope's count of the same hits (a u64 printed as one already).
    assert!(text.contains("racaffinity_affinity_hits_total{cluster=\"big\",scope=\"thread\"} 9223372036854775808"));
    // A gauge that can go below zero is still signed.
    assert!(line("racaffinity_node_in_flight").ends_with(" 0"));
}

/// The fingerprint is an info-style series (its value is always 1, the
/// information is in a label): named `_info`, as Prometheus and OpenMetrics
/// name them. The name without the suffix stays one release, marked
/// deprecated in its HELP, so dashboards and alerts that compare
/// fingerprints across processes keep working until they move.
#[test]
fn the_fingerprint_series_is_named_info() {
    let c = cluster("name = fp\nnodes = A, B");
    let f = c.topology_fingerprint();
    let text = c.metrics().to_prometheus();
    assert!(text.contains("# TYPE racaffinity_topology_fingerprint_info gauge\n"), "{text}");
    assert!(text.contains(&format!("racaffinity_topology_fingerprint_info{{cluster=\"fp\",fingerprint=\"{f}\"}} 1\n")));
    assert!(text.contains("# HELP racaffinity_topology_fingerprint Deprecated"), "{text}");
    assert!(text.contains(&format!("racaffinity_topology_fingerprint{{cluster=\"fp\",fingerprint=\"{f}\"}} 1\n")));
}
