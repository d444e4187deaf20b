//! Load-balancing policies for picks that no affinity decides.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use crate::counter::{stripe, STRIPES};
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

/// The balancer's random draws: a splitmix64 sequence per counter stripe
/// (the calling thread's, [`crate::counter::stripe`]), each cell on a cache
/// line of its own. A thread-local generator cost a `__tls_get_addr` call and
/// a `RefCell` borrow per draw inside the shared library (the general-dynamic
/// TLS model), about a tenth of an unpinned pick from Java. The step is a
/// relaxed load and store, not a read-modify-write: two threads sharing a
/// stripe may now and then draw the same number, which costs a balancing
/// decision nothing (each still draws uniformly), while a locked add would
/// cost every draw an atomic instruction.
pub(crate) struct Draws {
    cells: [DrawCell; STRIPES],
}

#[repr(align(64))]
struct DrawCell(AtomicU64);

/// The splitmix64 increment (an odd constant: the sequence visits all 2^64 states).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl Default for Draws {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // Each RandomState gets fresh keys (OS-seeded per thread, then bumped
        // per instance), so the sequences differ per cell, cluster and process.
        let seed = |i: usize| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.finish()
        };
        Draws { cells: std::array::from_fn(|i| DrawCell(AtomicU64::new(seed(i)))) }
    }
}

impl fmt::Debug for Draws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Draws")
    }
}

impl Draws {
    /// A uniformly distributed 64-bit number.
    #[inline]
    fn next_u64(&self) -> u64 {
        let cell = &self.cells[stripe()].0;
        let s = cell.load(Ordering::Relaxed).wrapping_add(GAMMA);
        cell.store(s, Ordering::Relaxed);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`), by the high half of a 64 × 64-bit
    /// product: a bias of at most n / 2^64, which no cluster size can show.
    #[inline]
    pub(crate) fn below(&self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    #[inline]
    fn index(&self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// Two distinct positions in `0..len` (`len >= 2`), uniform over the
    /// ordered pairs, from one draw: each half of the number scaled by a
    /// multiply, as [`Draws::below`]. The division and two remainders this
    /// took before cost a sixth of an unpinned pick (a `div` is 20–40 cycles).
    #[inline]
    fn two_distinct(&self, len: usize) -> (usize, usize) {
        debug_assert!(len >= 2);
        let x = self.next_u64();
        let scale = |half: u64, n: usize| ((u128::from(half) * n as u128) >> 32) as usize;
        let a = scale(x >> 32, len);
        let b = a + 1 + scale(x & 0xFFFF_FFFF, len - 1);
        (a, if b >= len { b - len } else { b })
    }
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
    draws: Draws,
    /// `Some(spill_percent)` when `local.machine` or `local.zone` is set.
    locality: Option<u32>,
}

/// Result of a balanced choice.
pub(crate) enum Choice<'a, N> {
    Node(&'a N),
    /// Every node was unavailable and the panic policy allowed trying one anyway.
    Panic(&'a N),
}

impl Balancer {
    pub fn new(policy: Policy, panic: PanicPolicy, local: &LocalConfig) -> Self {
        Balancer {
            policy,
            panic,
            rr: AtomicU64::new(0),
            draws: Draws::default(),
            locality: local.is_set().then_some(local.spill_percent),
        }
    }

    /// Chooses among `nodes` that accept new work, preferring those that pass
    /// `prefer` (a preference, never a reason to leave the usable set: a node
    /// advising against session affinity still beats a Down one).
    ///
    /// With `allow_trial`, an ejected node whose back-off elapsed gets the
    /// pick as its half-open trial, so recovery is noticed without waiting
    /// for an operator. Only one-shot leased picks may allow it.
    #[inline]
    pub fn choose<'a, N: Deref<Target = Node>>(
        &self,
        nodes: &'a [N],
        clock: &dyn Clock,
        health: &HealthConfig,
        allow_trial: bool,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<Choice<'a, N>> {
        let (mut n_usable, mut n_preferred) = (0, 0);
        for n in nodes {
            if n.accepts_new() {
                n_usable += 1;
                n_preferred += usize::from(prefer(n));
            } else if allow_trial && n.try_trial(clock, health) {
                return Ok(Choice::Node(n));
            }
        }
        if n_usable == nodes.len() && (n_preferred == 0 || n_preferred == n_usable) && self.locality.is_none() {
            // The common case: every node is a candidate, at its own
            // position, so no candidate list is built (filling one byte by
            // byte and copying it was a sixth of an unpinned pick).
            let idx = match nodes.len() {
                0 => return self.panic_choice(nodes),
                1 => 0,
                len => self.pick_of(nodes, len, |k| k),
            };
            return Ok(Choice::Node(&nodes[idx]));
        }
        let mut usable = Candidates::new();
        let mut n_preferred = 0;
        for (i, n) in nodes.iter().enumerate() {
            if n.accepts_new() {
                usable.push(i);
                n_preferred += usize::from(prefer(n));
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
            len => self.pick_of(nodes, len, |k| c.get(k)),
        };
        Ok(Choice::Node(&nodes[idx]))
    }

    /// The policy's choice among `len >= 2` candidates, the `k`-th of which
    /// is `nodes[at(k)]`.
    #[inline]
    fn pick_of<N: Deref<Target = Node>>(&self, nodes: &[N], len: usize, at: impl Fn(usize) -> usize) -> usize {
        match self.policy {
            Policy::Random => at(self.draws.index(len)),
            Policy::RoundRobin => at((self.rr.fetch_add(1, Ordering::Relaxed) % len as u64) as usize),
            Policy::Weighted => weighted(nodes, len, at, &self.draws),
            Policy::LeastOutstanding => {
                let (a, b) = self.draws.two_distinct(len);
                let (ia, ib) = (at(a), at(b));
                if nodes[ib].in_flight() < nodes[ia].in_flight() {
                    ib
                } else {
                    ia
                }
            }
        }
    }

    fn panic_choice<'a, N>(&self, nodes: &'a [N]) -> Result<Choice<'a, N>> {
        if self.panic == PanicPolicy::Fail || nodes.is_empty() {
            return Err(Error::NoNodeAvailable { scope: None });
        }
        let i = self.draws.index(nodes.len());
        Ok(Choice::Panic(&nodes[i]))
    }
}

/// The nearest locality tier of `c` that has a usable node and is not over
/// its share of the load: this machine, else this zone (which includes this
/// machine's nodes). `None`: use all of `c`.
fn nearest_tier<N: Deref<Target = Node>>(nodes: &[N], c: &Candidates, spill_percent: u32) -> Option<Candidates> {
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
fn overloaded<N: Deref<Target = Node>>(nodes: &[N], t: &Candidates, all: &Candidates, spill_percent: u32) -> bool {
    let sum = |c: &Candidates, f: &dyn Fn(&Node) -> i128| (0..c.len()).map(|k| f(&nodes[c.get(k)])).sum::<i128>();
    let (load_t, load_all) = (sum(t, &|n| n.in_flight().max(0).into()), sum(all, &|n| n.in_flight().max(0).into()));
    let (cap_t, cap_all) = (sum(t, &|n| n.weight().into()), sum(all, &|n| n.weight().into()));
    // load_t / load_all > spill% × cap_t / cap_all, in integers.
    load_all > 0 && load_t * cap_all * 100 > i128::from(spill_percent) * cap_t * load_all
}

fn weighted<N: Deref<Target = Node>>(nodes: &[N], len: usize, at: impl Fn(usize) -> usize, draws: &Draws) -> usize {
    let total: u64 = (0..len).map(|k| u64::from(nodes[at(k)].effective_weight())).sum();
    if total == 0 {
        return at(draws.index(len));
    }
    let mut x = draws.below(total);
    for k in 0..len {
        let i = at(k);
        let w = u64::from(nodes[i].effective_weight());
        if x < w {
            return i;
        }
        x -= w;
    }
    // Weights can change concurrently (RLB advisories); the last candidate is
    // as good as any when the sum moved under us.
    at(len - 1)
}

/// Live nodes the balanced pick reads without loading the topology
/// snapshot: a hazard-pointer store and release per load (two atomic
/// read-modify-writes and a thread-local lookup) were a third of an
/// unpinned pick from Java. A sequence lock over the live node ids instead:
/// a pick copies them and checks the sequence did not move, with plain
/// loads, then finds each node in a table that only ever gains entries (a
/// node's id is never reused, and the cluster keeps every node it ever had,
/// as `Topology::by_id` does).
pub(crate) struct LiveNodes {
    /// Odd while a change is written.
    seq: AtomicU64,
    /// Over [`LIVE_CAP`] when the cluster has more live nodes than slots,
    /// or a node's id is past the table: picks then use the snapshot.
    len: AtomicUsize,
    ids: [AtomicU32; LIVE_CAP],
    by_id: Box<[OnceLock<Arc<Node>>]>,
}

/// Live nodes a pick can read from [`LiveNodes`]; larger clusters pick from
/// the snapshot (a RAC cluster has a handful of instances).
pub(crate) const LIVE_CAP: usize = 16;
/// Node ids [`LiveNodes`] covers, as the host lease table does.
const BY_ID_CAP: usize = crate::epoch::HOST_LEASE_NODES;

impl LiveNodes {
    pub(crate) fn new(live: &[Arc<Node>]) -> Self {
        let s = LiveNodes {
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            ids: [const { AtomicU32::new(0) }; LIVE_CAP],
            by_id: (0..BY_ID_CAP).map(|_| OnceLock::new()).collect(),
        };
        s.publish(live);
        s
    }

    /// Publishes the live nodes of a new snapshot, after it was stored.
    /// Callers serialize (the topology lock): one writer at a time.
    pub(crate) fn publish(&self, live: &[Arc<Node>]) {
        let mut covered = live.len() <= LIVE_CAP;
        for n in live {
            match self.by_id.get(n.id().0 as usize) {
                // An id is set once: the node of an id never changes.
                Some(slot) => drop(slot.set(n.clone())),
                None => covered = false,
            }
        }
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        if covered {
            for (slot, n) in self.ids.iter().zip(live) {
                slot.store(n.id().0, Ordering::Relaxed);
            }
            self.len.store(live.len(), Ordering::Relaxed);
        } else {
            self.len.store(LIVE_CAP + 1, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// `f` of the live nodes: `None` when there are none or more than this
    /// can hold, or a change kept being written while this read. (A closure,
    /// so the copy stays in this frame: returned by value, its 8-byte stores
    /// were read back with 16-byte loads, which the store buffer cannot
    /// forward.)
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&[&Node]) -> R) -> Option<R> {
        let mut ids = [0u32; LIVE_CAP];
        for _ in 0..64 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let n = self.len.load(Ordering::Relaxed);
            if n == 0 || n > LIVE_CAP {
                return None;
            }
            for (id, slot) in ids.iter_mut().zip(&self.ids[..n]) {
                *id = slot.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            let node = |id: u32| self.by_id.get(id as usize).and_then(OnceLock::get).map(|a| &**a);
            let first = node(ids[0])?;
            let mut nodes = [first; LIVE_CAP];
            for (slot, &id) in nodes.iter_mut().zip(&ids[..n]).skip(1) {
                *slot = node(id)?;
            }
            return Some(f(&nodes[..n]));
        }
        None
    }
}

impl fmt::Debug for LiveNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LiveNodes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::epoch::RoutingEpoch;
    use crate::node::{NodeId, NodeSpec};

    #[test]
    fn two_distinct_draws_every_ordered_pair_about_equally_often() {
        let d = Draws::default();
        for len in 2..=6usize {
            let draws = 12_000 * len * (len - 1);
            let mut seen = vec![0usize; len * len];
            for _ in 0..draws {
                let (a, b) = d.two_distinct(len);
                assert!(a < len && b < len && a != b, "len {len}: ({a}, {b})");
                seen[a * len + b] += 1;
            }
            let expected = (draws / (len * (len - 1))) as f64;
            for a in 0..len {
                for b in (0..len).filter(|&b| b != a) {
                    let got = seen[a * len + b] as f64;
                    assert!(
                        (got / expected - 1.0).abs() < 0.06,
                        "len {len}: ({a}, {b}) {got} times, {expected} expected"
                    );
                }
            }
        }
    }

    #[test]
    fn below_spreads_evenly() {
        let d = Draws::default();
        for n in [3u64, 7, 1000] {
            let draws = 30_000 * n.min(10);
            let mut seen = vec![0u64; n as usize];
            for _ in 0..draws {
                seen[d.below(n) as usize] += 1;
            }
            if n <= 10 {
                for (i, &k) in seen.iter().enumerate() {
                    let share = k as f64 / draws as f64 * n as f64;
                    assert!((share - 1.0).abs() < 0.05, "{i} of {n}: {share}");
                }
            } else {
                // Large ranges: every tenth still gets its share.
                for tenth in seen.chunks(n as usize / 10) {
                    let share = tenth.iter().sum::<u64>() as f64 / draws as f64 * 10.0;
                    assert!((share - 1.0).abs() < 0.05, "{share}");
                }
            }
        }
    }

    fn nodes(n: u32) -> Vec<Arc<Node>> {
        let routing = Arc::new(RoutingEpoch::default());
        (0..n)
            .map(|i| {
                let spec = NodeSpec::new(format!("N{i}"));
                Arc::new(Node::new(
                    NodeId(i),
                    &spec,
                    &LocalConfig::default(),
                    Arc::new(SystemClock::new()),
                    routing.clone(),
                ))
            })
            .collect()
    }

    fn ids(live: &LiveNodes) -> Option<Vec<u32>> {
        live.with(|ns| ns.iter().map(|n| n.id().0).collect())
    }

    #[test]
    fn live_nodes_read_what_was_published_and_give_up_past_their_size() {
        let all = nodes(LIVE_CAP as u32 + 1);
        let live = LiveNodes::new(&all[..3]);
        assert_eq!(ids(&live), Some(vec![0, 1, 2]));
        live.publish(&[all[0].clone(), all[2].clone()]);
        assert_eq!(ids(&live), Some(vec![0, 2]));
        live.publish(&all[..LIVE_CAP]);
        assert_eq!(ids(&live), Some((0..LIVE_CAP as u32).collect()));
        // More than the slots, and none: the snapshot answers.
        live.publish(&all);
        assert_eq!(ids(&live), None);
        live.publish(&[]);
        assert_eq!(ids(&live), None);
        live.publish(&all[5..7]);
        assert_eq!(ids(&live), Some(vec![5, 6]));
    }

    #[test]
    fn live_nodes_past_the_id_table_are_read_from_the_snapshot() {
        let routing = Arc::new(RoutingEpoch::default());
        let far = Arc::new(Node::new(
            NodeId(BY_ID_CAP as u32),
            &NodeSpec::new("FAR"),
            &LocalConfig::default(),
            Arc::new(SystemClock::new()),
            routing,
        ));
        let near = nodes(1);
        let live = LiveNodes::new(&[near[0].clone(), far]);
        assert_eq!(ids(&live), None);
        live.publish(&near);
        assert_eq!(ids(&live), Some(vec![0]));
    }

    /// A read sees one published list whole, never a mix of two, while
    /// another thread keeps publishing.
    #[test]
    fn live_nodes_reads_never_mix_two_lists() {
        let all = nodes(8);
        let (a, b): (Vec<_>, Vec<_>) = (all[..3].to_vec(), all[3..8].to_vec());
        let live = Arc::new(LiveNodes::new(&a));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (live, stop) = (live.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    live.publish(if n % 2 == 0 { &b } else { &a });
                    n += 1;
                }
                n
            })
        };
        let (mut reads, mut of_b) = (0, 0);
        let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < until {
            if let Some(got) = ids(&live) {
                reads += 1;
                match got.as_slice() {
                    [0, 1, 2] => {}
                    [3, 4, 5, 6, 7] => of_b += 1,
                    other => panic!("a mixed read: {other:?}"),
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let publishes = writer.join().unwrap();
        assert!(reads > 1000 && publishes > 1000, "{reads} reads, {publishes} publishes");
        assert!(of_b > 0 && of_b < reads, "{of_b} of {reads} reads saw the second list");
    }
}
