//! Load-balancing policies for picks that no affinity decides.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::node::{HealthConfig, LocalConfig, Locality, Node};

/// How an unpinned pick chooses among available nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// Uniformly random (seed 000/002's behaviour without runtime load balancing).
    Random,
    /// Strict rotation over available nodes (WebLogic's default).
    RoundRobin,
    /// Random, proportional to static weight, or to RLB percent once advisories arrive.
    Weighted,
    /// Power of two random choices, taking the one with fewer in-flight leases.
    #[default]
    LeastOutstanding,
}

impl Policy {
    /// Config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::RoundRobin => "round_robin",
            Policy::Weighted => "weighted",
            Policy::LeastOutstanding => "least_outstanding",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Policy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "random" => Ok(Policy::Random),
            "round_robin" => Ok(Policy::RoundRobin),
            "weighted" => Ok(Policy::Weighted),
            "least_outstanding" => Ok(Policy::LeastOutstanding),
            _ => Err(Error::config(
                "policy",
                format!("unknown policy `{s}` (expected random, round_robin, weighted or least_outstanding)"),
            )),
        }
    }
}

/// What a pick does when no node is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PanicPolicy {
    /// Pick among every node regardless of state: a down-marked node may be
    /// back, and failing outright would turn a flapping detector into an outage.
    #[default]
    TryAll,
    /// Return [`Error::NoNodeAvailable`].
    Fail,
}

impl PanicPolicy {
    /// Config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            PanicPolicy::TryAll => "try_all",
            PanicPolicy::Fail => "fail",
        }
    }
}

impl std::str::FromStr for PanicPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "try_all" => Ok(PanicPolicy::TryAll),
            "fail" => Ok(PanicPolicy::Fail),
            _ => Err(Error::config("panic", format!("unknown panic policy `{s}` (expected try_all or fail)"))),
        }
    }
}

thread_local! {
    static RNG: RefCell<SmallRng> = RefCell::new(SmallRng::seed_from_u64(thread_seed()));
}

fn thread_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState gets fresh keys (OS-seeded per thread, then bumped per
    // instance), so this differs per thread and per process.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}

#[inline]
pub(crate) fn with_rng<T>(f: impl FnOnce(&mut SmallRng) -> T) -> T {
    RNG.with(|r| f(&mut r.borrow_mut()))
}

/// Candidate node indices. Clusters of up to 64 nodes (all real RAC
/// clusters) use a small inline array of `u8`, so a pick allocates nothing.
struct Candidates {
    inline: [u8; 64],
    len: usize,
    spill: Vec<u32>,
}

impl Candidates {
    #[inline]
    fn new() -> Self {
        Candidates { inline: [0; 64], len: 0, spill: Vec::new() }
    }
    #[inline]
    fn push(&mut self, i: usize) {
        if self.len < 64 && i < 64 && self.spill.is_empty() {
            self.inline[self.len] = i as u8;
        } else {
            if self.spill.is_empty() {
                self.spill.extend(self.inline[..self.len].iter().map(|&b| u32::from(b)));
            }
            self.spill.push(i as u32);
        }
        self.len += 1;
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn get(&self, k: usize) -> usize {
        if self.spill.is_empty() {
            usize::from(self.inline[k])
        } else {
            self.spill[k] as usize
        }
    }
}

/// The balancing state of one cluster.
#[derive(Debug, Default)]
pub(crate) struct Balancer {
    pub policy: Policy,
    pub panic: PanicPolicy,
    rr: AtomicU64,
    /// `Some(spill_percent)` when `local.machine` or `local.zone` is set.
    locality: Option<u32>,
}

/// Result of a balanced choice.
pub(crate) enum Choice<'a> {
    Node(&'a Arc<Node>),
    /// Every node was unavailable and the panic policy allowed trying one anyway.
    Panic(&'a Arc<Node>),
}

impl Balancer {
    pub fn new(policy: Policy, panic: PanicPolicy, local: &LocalConfig) -> Self {
        Balancer { policy, panic, rr: AtomicU64::new(0), locality: local.is_set().then_some(local.spill_percent) }
    }

    /// Chooses among `nodes` that accept new work, preferring those that pass
    /// `prefer` (a preference, never a reason to leave the usable set: a node
    /// advising against session affinity still beats a Down one).
    ///
    /// With `allow_trial`, an ejected node whose back-off elapsed gets the
    /// pick as its half-open trial, so recovery is noticed without waiting
    /// for an operator. Only one-shot leased picks may allow it.
    #[inline]
    pub fn choose<'a>(
        &self,
        nodes: &'a [Arc<Node>],
        clock: &dyn Clock,
        health: &HealthConfig,
        allow_trial: bool,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<Choice<'a>> {
        let mut usable = Candidates::new();
        let mut n_preferred = 0;
        for (i, n) in nodes.iter().enumerate() {
            if n.accepts_new() {
                usable.push(i);
                n_preferred += usize::from(prefer(n));
            } else if allow_trial && n.try_trial(clock, health) {
                return Ok(Choice::Node(n));
            }
        }
        // Only a mixed set needs a second list; the common case (no
        // preference, or all alike) allocates nothing more.
        let mixed;
        let mut c = if n_preferred == 0 || n_preferred == usable.len() {
            &usable
        } else {
            let mut p = Candidates::new();
            for k in 0..usable.len() {
                if prefer(&nodes[usable.get(k)]) {
                    p.push(usable.get(k));
                }
            }
            mixed = p;
            &mixed
        };
        let near;
        if let Some(spill) = self.locality {
            if let Some(tier) = nearest_tier(nodes, c, spill) {
                near = tier;
                c = &near;
            }
        }
        let idx = match c.len() {
            0 => return self.panic_choice(nodes),
            1 => c.get(0),
            len => match self.policy {
                Policy::Random => c.get(with_rng(|r| r.gen_range(0..len))),
                Policy::RoundRobin => c.get((self.rr.fetch_add(1, Ordering::Relaxed) % len as u64) as usize),
                Policy::Weighted => weighted(nodes, c),
                Policy::LeastOutstanding => {
                    // One draw gives both distinct positions.
                    let (a, b) = with_rng(|r| {
                        let x = r.gen_range(0..len * (len - 1));
                        let a = x / (len - 1);
                        (a, (a + 1 + x % (len - 1)) % len)
                    });
                    let (ia, ib) = (c.get(a), c.get(b));
                    if nodes[ib].in_flight() < nodes[ia].in_flight() {
                        ib
                    } else {
                        ia
                    }
                }
            },
        };
        Ok(Choice::Node(&nodes[idx]))
    }

    fn panic_choice<'a>(&self, nodes: &'a [Arc<Node>]) -> Result<Choice<'a>> {
        if self.panic == PanicPolicy::Fail || nodes.is_empty() {
            return Err(Error::NoNodeAvailable { scope: None });
        }
        let i = with_rng(|r| r.gen_range(0..nodes.len()));
        Ok(Choice::Panic(&nodes[i]))
    }
}

/// The nearest locality tier of `c` that has a usable node and is not over
/// its share of the load: this machine, else this zone (which includes this
/// machine's nodes). `None`: use all of `c`.
fn nearest_tier(nodes: &[Arc<Node>], c: &Candidates, spill_percent: u32) -> Option<Candidates> {
    for tier in [Locality::Machine, Locality::Zone] {
        let mut t = Candidates::new();
        for k in 0..c.len() {
            if nodes[c.get(k)].locality() <= tier {
                t.push(c.get(k));
            }
        }
        if t.len() == 0 || t.len() == c.len() {
            if t.len() == c.len() {
                return None;
            }
            continue;
        }
        if spill_percent == 0 || !overloaded(nodes, &t, c, spill_percent) {
            return Some(t);
        }
    }
    None
}

/// Whether tier `t`'s share of the in-flight leases of `all` exceeds
/// `spill_percent` % of its share of their capacity (static weight).
fn overloaded(nodes: &[Arc<Node>], t: &Candidates, all: &Candidates, spill_percent: u32) -> bool {
    let sum = |c: &Candidates, f: &dyn Fn(&Node) -> i128| (0..c.len()).map(|k| f(&nodes[c.get(k)])).sum::<i128>();
    let (load_t, load_all) = (sum(t, &|n| n.in_flight().max(0).into()), sum(all, &|n| n.in_flight().max(0).into()));
    let (cap_t, cap_all) = (sum(t, &|n| n.weight().into()), sum(all, &|n| n.weight().into()));
    // load_t / load_all > spill% × cap_t / cap_all, in integers.
    load_all > 0 && load_t * cap_all * 100 > i128::from(spill_percent) * cap_t * load_all
}

fn weighted(nodes: &[Arc<Node>], c: &Candidates) -> usize {
    let total: u64 = (0..c.len()).map(|k| u64::from(nodes[c.get(k)].effective_weight())).sum();
    if total == 0 {
        return c.get(with_rng(|r| r.gen_range(0..c.len())));
    }
    let mut x = with_rng(|r| r.gen_range(0..total));
    for k in 0..c.len() {
        let i = c.get(k);
        let w = u64::from(nodes[i].effective_weight());
        if x < w {
            return i;
        }
        x -= w;
    }
    // Weights can change concurrently (RLB advisories); the last candidate is
    // as good as any when the sum moved under us.
    c.get(c.len() - 1)
}
