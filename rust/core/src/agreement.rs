//! Placement that processes agree on while shared inputs are still in
//! flight (docs/semantics.md, "Agreement across processes").
//!
//! Every process receives each shared input (a FAN event, a weight, a node
//! added or removed) within `transaction.settle` of every other one. A node
//! whose inputs changed within that time may stand, in another process, as
//! it stood at any moment of that time: eligible or not, at any of the
//! weights it took. Its rendezvous score for a key is then an interval, not
//! a value. A key is placed only when one node's lowest possible score beats
//! every other node's highest; else it is refused. Two processes that both
//! place a key therefore place it on the same node: for each node, the
//! process that has seen more of its inputs holds the other's value inside
//! its interval, and in every combination that makes two different winners
//! contradict each other's bounds.

use std::sync::Arc;

use crate::hash;
use crate::node::Node;

/// Whether a node can win a key, as far as every process is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Eligible in every process.
    Eligible,
    /// Ineligible in every process.
    Ineligible,
    /// Changed within the settle time: eligible in some processes, maybe.
    Changing,
}

/// The outcome of an agreed placement.
#[derive(Debug)]
pub(crate) enum Agreed<'a> {
    /// Every process that places the key places it here.
    Owner(&'a Arc<Node>),
    /// This node's recent change leaves the winner open: refuse for now.
    Unsettled(&'a Arc<Node>),
    /// No node is eligible in any process.
    Nobody,
}

struct Bounds<'a> {
    node: &'a Arc<Node>,
    lo: f64,
    hi: f64,
    settled: bool,
}

/// The node every process places `key_hash` on, judged over `nodes` with
/// each node's [`Standing`] and the weights it may be ranked by.
pub(crate) fn agreed_owner<'a>(
    nodes: &'a [Arc<Node>],
    key_hash: u64,
    settle_ms: u64,
    standing: impl Fn(&Node) -> Standing,
) -> Agreed<'a> {
    let mut bounds: Vec<Bounds<'a>> = Vec::with_capacity(nodes.len());
    // Each node's weight window is a gated lock: the fork gate once for all.
    let _fork = crate::fork::section();
    for n in nodes {
        let st = standing(n);
        if st == Standing::Ineligible {
            continue;
        }
        let (wlo, whi) = n.weight_range(settle_ms);
        let s = hash::score(key_hash, n.seed());
        let hi = hash::weighted_score(s, f64::from(whi));
        let lo = if st == Standing::Changing { f64::NEG_INFINITY } else { hash::weighted_score(s, f64::from(wlo)) };
        bounds.push(Bounds { node: n, lo, hi, settled: st == Standing::Eligible && wlo == whi });
    }
    // The candidate: the best lowest score, ties to the lower canonical name
    // as in `rendezvous::owner`.
    let best = bounds
        .iter()
        .filter(|b| b.lo > f64::NEG_INFINITY)
        .max_by(|a, b| a.lo.total_cmp(&b.lo).then_with(|| b.node.canonical_name().cmp(a.node.canonical_name())));
    let Some(best) = best else {
        // Nobody is eligible everywhere: if somebody may be somewhere, wait.
        return match bounds.iter().max_by(|a, b| a.hi.total_cmp(&b.hi)) {
            Some(b) => Agreed::Unsettled(b.node),
            None => Agreed::Nobody,
        };
    };
    let rival = bounds
        .iter()
        .filter(|b| b.node.id() != best.node.id())
        .filter(|b| b.hi > best.lo || (b.hi == best.lo && !(b.settled && best.settled)))
        .max_by(|a, b| a.hi.total_cmp(&b.hi));
    match rival {
        Some(r) => Agreed::Unsettled(r.node),
        None => Agreed::Owner(best.node),
    }
}
