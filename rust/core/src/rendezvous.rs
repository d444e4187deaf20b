//! Rendezvous (highest-random-weight) placement over a node set; see
//! [`crate::hash`] for the versioned function.

use std::sync::Arc;

use crate::hash;
use crate::node::Node;

/// Which weight rendezvous ranks by. Only the static weight: placements that
/// processes must agree on cannot depend on advisories, which reach each
/// process at its own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Weights {
    /// `node.<N>.weight`.
    Static,
}

impl Weights {
    #[inline]
    fn of(self, n: &Node) -> u32 {
        match self {
            Weights::Static => n.weight(),
        }
    }
}

/// The node that owns `key_hash` among the nodes passing `eligible`.
///
/// Equal weights compare integer scores (cheap); unequal weights use the
/// logarithmic weighted form so shares follow the weights.
#[inline]
pub(crate) fn owner<'a>(
    nodes: &'a [Arc<Node>],
    key_hash: u64,
    weights: Weights,
    mut eligible: impl FnMut(&Node) -> bool,
) -> Option<&'a Arc<Node>> {
    let mut best: Option<(&'a Arc<Node>, u64)> = None;
    let mut first_weight = None;
    let mut uneven = false;
    for n in nodes {
        if !eligible(n) {
            continue;
        }
        let w = weights.of(n);
        match first_weight {
            None => first_weight = Some(w),
            Some(f) if f != w => uneven = true,
            _ => {}
        }
        let s = hash::score(key_hash, n.seed());
        best = match best {
            Some((b, bs)) if bs > s || (bs == s && b.canonical_name() < n.canonical_name()) => Some((b, bs)),
            _ => Some((n, s)),
        };
    }
    if !uneven {
        return best.map(|(n, _)| n);
    }
    weighted_owner(nodes, key_hash, weights, eligible)
}

fn weighted_owner<'a>(
    nodes: &'a [Arc<Node>],
    key_hash: u64,
    weights: Weights,
    mut eligible: impl FnMut(&Node) -> bool,
) -> Option<&'a Arc<Node>> {
    let mut best: Option<(&'a Arc<Node>, f64)> = None;
    let mut zero_only: Option<(&'a Arc<Node>, u64)> = None;
    for n in nodes {
        if !eligible(n) {
            continue;
        }
        let s = hash::score(key_hash, n.seed());
        let w = weights.of(n);
        if w == 0 {
            // Weight 0 (RLB BLOCKED) only wins when nothing else is eligible.
            zero_only = match zero_only {
                Some((b, bs)) if bs > s || (bs == s && b.canonical_name() < n.canonical_name()) => Some((b, bs)),
                _ => Some((n, s)),
            };
            continue;
        }
        let ws = hash::weighted_score(s, f64::from(w));
        best = match best {
            Some((b, bs)) if bs > ws || (bs == ws && b.canonical_name() < n.canonical_name()) => Some((b, bs)),
            _ => Some((n, ws)),
        };
    }
    best.map(|(n, _)| n).or(zero_only.map(|(n, _)| n))
}

/// Every node passing `eligible`, in `key_hash`'s rendezvous order: the first
/// is [`owner`], the second the owner once the first is gone, and so on.
pub(crate) fn ranking<'a>(
    nodes: &'a [Arc<Node>],
    key_hash: u64,
    mut eligible: impl FnMut(&Node) -> bool,
) -> Vec<&'a Arc<Node>> {
    let mut ranked: Vec<&'a Arc<Node>> = Vec::with_capacity(nodes.len());
    while let Some(n) =
        owner(nodes, key_hash, Weights::Static, |n| eligible(n) && !ranked.iter().any(|r| r.id() == n.id()))
    {
        ranked.push(n);
    }
    ranked
}
