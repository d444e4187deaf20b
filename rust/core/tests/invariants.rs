//! Properties the README's Semantics section promises under any sequence of
//! inputs (issue [core-semantics]):
//! (a) no new affinity is placed on a Down, Draining or removed node while a
//!     node that takes new work exists;
//! (b) two processes fed the same shared inputs place every transaction,
//!     stateless session and partition identically, whatever else each does;
//! (c) an operator's Down or Draining survives every automatic input until
//!     the operator lifts it.

mod common;

use common::cluster_with_clock;
use proptest::prelude::*;
use racaffinity::{
    Cluster, DataKey, DownCause, ManualClock, NodeId, NodeSpec, NodeState, Outcome, RouteKind, RouteRequest,
};

const NAMES: [&str; 5] = ["A", "B", "C", "D", "E"];
const CONFIG: &str = "nodes = A, B, C, D\nsession.mode = stateless\nhealth.eject_after_failures = 2\n\
                      health.eject_backoff = 1s\nhealth.eject_backoff_max = 8s\nheartbeat.misses = 2";

/// An input every process sees (events, advisories, operators, topology, time).
#[derive(Debug, Clone)]
enum Shared {
    Fan(usize, &'static str, &'static str),
    Advisory(Vec<(usize, u8, bool)>),
    Admin(usize, NodeState),
    Add(usize),
    Remove(usize),
    Advance(u64),
}

/// An input only one process sees (its own leases, probes and picks).
#[derive(Debug, Clone)]
enum Local {
    Probe(usize, bool),
    Report(usize, bool),
    Lease(usize, Outcome),
    PickAndRelease(Outcome),
    Sessionless(u16),
}

#[derive(Debug, Clone)]
enum Step {
    Shared(Shared),
    Local(Local),
}

fn node_ix() -> impl Strategy<Value = usize> {
    0..NAMES.len()
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![Just(Outcome::Ok), Just(Outcome::Failed), Just(Outcome::Neutral)]
}

fn state() -> impl Strategy<Value = NodeState> {
    prop_oneof![Just(NodeState::Up), Just(NodeState::Draining), Just(NodeState::Down)]
}

fn step() -> impl Strategy<Value = Step> {
    let shared = prop_oneof![
        (node_ix(), prop_oneof![Just("up"), Just("down")], prop_oneof![Just("FAILURE"), Just("USER")])
            .prop_map(|(n, s, r)| Shared::Fan(n, s, r)),
        prop::collection::vec((node_ix(), 0u8..=100, any::<bool>()), 1..4).prop_map(Shared::Advisory),
        (node_ix(), state()).prop_map(|(n, s)| Shared::Admin(n, s)),
        node_ix().prop_map(Shared::Add),
        node_ix().prop_map(Shared::Remove),
        (0u64..3_000).prop_map(Shared::Advance),
    ];
    let local = prop_oneof![
        (node_ix(), any::<bool>()).prop_map(|(n, ok)| Local::Probe(n, ok)),
        (node_ix(), any::<bool>()).prop_map(|(n, ok)| Local::Report(n, ok)),
        (node_ix(), outcome()).prop_map(|(n, o)| Local::Lease(n, o)),
        outcome().prop_map(Local::PickAndRelease),
        any::<u16>().prop_map(Local::Sessionless),
    ];
    prop_oneof![3 => shared.prop_map(Step::Shared), 2 => local.prop_map(Step::Local)]
}

fn live(c: &Cluster, ix: usize) -> Option<NodeId> {
    c.node_by_name(NAMES[ix]).ok().map(|n| n.id())
}

fn apply_shared(c: &Cluster, clock: &ManualClock, s: &Shared) {
    match s {
        Shared::Fan(n, status, reason) => {
            let line = format!(
                "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={} status={status} reason={reason}",
                NAMES[*n]
            );
            let _ = c.apply_event(&line); // an unknown (removed) instance changes nothing
        }
        Shared::Advisory(entries) => {
            let mut seen = Vec::new();
            let body: String = entries
                .iter()
                .filter(|(n, _, _)| {
                    !seen.contains(n) && {
                        seen.push(*n);
                        true
                    }
                })
                .map(|(n, p, aff)| {
                    format!(
                        "{{instance={} percent={p} flag=GOOD aff={}}}",
                        NAMES[*n],
                        if *aff { "TRUE" } else { "FALSE" }
                    )
                })
                .collect();
            let _ = c.apply_event(&format!("VERSION=1.0 database=orcl service=svc {{ {body} }}"));
        }
        Shared::Admin(n, st) => {
            let _ = c.set_node_state(NAMES[*n], *st);
        }
        Shared::Add(n) => {
            let _ = c.add_node(NodeSpec::new(NAMES[*n]));
        }
        Shared::Remove(n) => {
            let _ = c.remove_node(NAMES[*n]);
        }
        Shared::Advance(ms) => clock.advance_ms(*ms),
    }
}

fn apply_local(c: &Cluster, l: &Local) {
    match l {
        Local::Probe(n, ok) => {
            if let Some(id) = live(c, *n) {
                c.report_probe(id, *ok).unwrap();
            }
        }
        Local::Report(n, ok) => {
            if let Some(id) = live(c, *n) {
                c.report_outcome(id, *ok).unwrap();
            }
        }
        Local::Lease(n, o) => {
            if let Some(id) = live(c, *n) {
                c.begin_lease(id);
                c.end_lease(id, *o);
            }
        }
        Local::PickAndRelease(o) => {
            if let Ok(r) = c.pick_balanced() {
                c.lease(r).release(*o);
            }
        }
        Local::Sessionless(k) => {
            let _ = c.route_key_i64(i64::from(*k));
        }
    }
}

/// The operator's layer as the model keeps it.
fn admin_model(model: &mut [NodeState; 5], s: &Shared) {
    match s {
        Shared::Admin(n, st) => model[*n] = *st,
        // A node added anew starts without operator state.
        Shared::Add(n) => model[*n] = NodeState::Up,
        _ => {}
    }
}

fn check_placements(c: &Cluster, probe: u64) -> Result<(), TestCaseError> {
    let usable = c.node_ids().into_iter().any(|id| c.node(id).unwrap().state() == NodeState::Up);
    if !usable {
        return Ok(());
    }
    let takes_new = |id: NodeId| {
        let n = c.node(id).unwrap();
        n.state() == NodeState::Up && !n.is_removed()
    };
    let g = format!("new-{probe}");
    let r = c.tx_begin(g.as_bytes()).unwrap();
    c.tx_complete(g.as_bytes()).unwrap();
    prop_assert!(takes_new(r.node), "transaction placed on {:?} ({:?})", c.node_name(r.node), r.kind);
    let ctx = c.new_context_key();
    let p = c.pin_context(ctx).unwrap();
    c.release_context(ctx);
    prop_assert!(takes_new(p.node), "pin placed on {:?}", c.node_name(p.node));
    let s = c.session_route(format!("s-{probe}").as_bytes()).unwrap();
    if s.kind != RouteKind::Affinity {
        prop_assert!(takes_new(s.node), "session placed on {:?} ({:?})", c.node_name(s.node), s.kind);
    }
    Ok(())
}

/// What must agree across processes: placements of new transactions (also
/// with a data key whose owner may be down), stateless sessions, partitions.
fn placements(c: &Cluster, probe: u64) -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..6u64 {
        let g = format!("agree-{probe}-{i}");
        let key = DataKey::Int((probe * 7 + i) as i64);
        let name = |r: racaffinity::Result<racaffinity::Route>| match r {
            Ok(r) => c.node_name(r.node).unwrap(),
            Err(e) => format!("{:?}", e.kind()),
        };
        let r = c.tx_begin_for(g.as_bytes(), &RouteRequest { key: Some(key), ..Default::default() });
        let _ = c.tx_complete(g.as_bytes());
        v.push(format!("tx {g} -> {}", name(r)));
        v.push(format!("session {i} -> {}", name(c.session_route(format!("agree-s-{i}").as_bytes()))));
        let p = c.partition_of(key).unwrap();
        v.push(format!("partition {p} -> {:?}", c.partition_owner(p).ok().and_then(|n| c.node_name(n))));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn new_affinities_never_land_on_an_unusable_node_and_operator_state_survives(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let clock = ManualClock::new(0);
        let c = cluster_with_clock(CONFIG, &clock);
        let mut admin = [NodeState::Up; 5];
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Shared(sh) => {
                    apply_shared(&c, &clock, sh);
                    admin_model(&mut admin, sh);
                }
                Step::Local(l) => apply_local(&c, l),
            }
            check_placements(&c, i as u64)?;
            for (ix, want) in admin.iter().enumerate() {
                let Some(id) = live(&c, ix) else { continue };
                let n = c.node(id).unwrap();
                match want {
                    NodeState::Down => {
                        prop_assert_eq!(n.state(), NodeState::Down, "{} lost the operator's Down", NAMES[ix]);
                        prop_assert_eq!(n.down_cause(), DownCause::Admin);
                    }
                    NodeState::Draining => prop_assert_ne!(
                        n.state(), NodeState::Up, "{} lost the operator's drain", NAMES[ix]
                    ),
                    NodeState::Up => {}
                }
            }
        }
    }

    #[test]
    fn processes_fed_the_same_shared_inputs_place_alike(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let (clock_p, clock_q) = (ManualClock::new(0), ManualClock::new(0));
        let (p, q) = (cluster_with_clock(CONFIG, &clock_p), cluster_with_clock(CONFIG, &clock_q));
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Shared(sh) => {
                    apply_shared(&p, &clock_p, sh);
                    apply_shared(&q, &clock_q, sh);
                }
                // Only p routes keys: a soft fallback's random draw must not
                // move what both place. Probes and outcomes change a
                // process's own view of health, so both get them here; a
                // pick's trial goes to a random node, so neither does.
                Step::Local(l @ Local::Sessionless(_)) => apply_local(&p, l),
                Step::Local(l @ (Local::Probe(..) | Local::Report(..) | Local::Lease(..))) => {
                    apply_local(&p, l);
                    apply_local(&q, l);
                }
                Step::Local(Local::PickAndRelease(_)) => {}
            }
            prop_assert_eq!(placements(&p, i as u64), placements(&q, i as u64));
        }
    }
}
