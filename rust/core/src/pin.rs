//! Thread and context pins (seed 000's connection factory).
//!
//! A pin binds "the current unit of work" to one node: the first pick chooses
//! the node, later picks reuse it, and release ends it. C and Rust use the OS
//! thread; Java and Python keep a [`ContextKey`] in a `ThreadLocal` or
//! `ContextVar` (correct for virtual threads and asyncio, which share OS
//! threads) and pass it explicitly.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::cluster::{Cluster, Inner};
use crate::error::{Error, Result, Scope};
use crate::node::{Node, NodeId};
use crate::request::PinMove;
use crate::route::{Route, RouteKind};
use crate::thread_hits::{Registered, Tally};

/// A host-chosen key naming one pin context (a Java thread, a Python context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextKey(pub u64);

struct Slot {
    cluster: u64,
    depth: u32,
    node: Arc<Node>,
    hits: Registered,
    owner: Weak<Inner>,
}

impl Slot {
    fn new(cluster: u64, node: Arc<Node>, inner: &Arc<Inner>) -> Slot {
        let hits = inner.thread_hits.register(node.id());
        Slot { cluster, depth: 1, node, hits, owner: Arc::downgrade(inner) }
    }

    /// Moves the pin to `to`, folding the hits counted on the old node first.
    fn move_to(&mut self, to: Arc<Node>) {
        self.forget();
        if let Some(inner) = self.owner.upgrade() {
            inner.thread_hits.fold(&self.hits, &self.node, &inner.scope[Scope::Thread as usize].hits, Some(to.id()));
        }
        self.node = to;
    }

    /// Lets [`Cluster::pick`] serve this pin from [`LAST_PIN`] while the
    /// routing epoch still equals `epoch`, read before the node was checked
    /// (see crate::epoch). Only an Up node's pin: a drain ends by the clock,
    /// which moves no epoch.
    fn remember(&self, epoch: u64) {
        if self.node.accepts_new() {
            let last = LastPin { cluster: self.cluster, epoch, node: self.node.id(), hits: Some(self.hits.tally) };
            LAST_PIN.with(|l| l.set(last));
        }
    }

    /// Stops the fast path from serving, or counting into, this pin.
    fn forget(&self) {
        LAST_PIN.with(|l| {
            if l.get().hits.is_some_and(|t| std::ptr::eq(t, self.hits.tally)) {
                l.set(NO_PIN);
            }
        });
    }
}

impl Drop for Slot {
    // Runs on unpin and also when a thread exits still pinned, so the live
    // pin gauge cannot drift upwards with dead threads, and the exiting
    // thread's hits stay counted.
    fn drop(&mut self) {
        self.forget();
        if let Some(inner) = self.owner.upgrade() {
            inner.thread_hits.fold(&self.hits, &self.node, &inner.scope[Scope::Thread as usize].hits, None);
            inner.scope[Scope::Thread as usize].live.fetch_sub(1, Ordering::Relaxed);
        }
        crate::thread_hits::give_back(self.hits.tally);
    }
}

/// What a pinned `pick()` reads: the thread's last-used pin, valid while the
/// cluster's routing epoch holds. All `Copy`, so it lives in a `Cell` that
/// needs no borrow flag and no destructor (usable during thread exit).
#[derive(Clone, Copy)]
struct LastPin {
    cluster: u64,
    epoch: u64,
    node: NodeId,
    hits: Option<&'static Tally>,
}

// Epoch 0 is never current (the word starts at 1).
const NO_PIN: LastPin = LastPin { cluster: 0, epoch: 0, node: NodeId(0), hits: None };

thread_local! {
    // A Vec, not a map: a process rarely holds more than a couple of clusters,
    // and a linear scan of one or two entries beats hashing.
    static THREAD_PINS: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
    static LAST_PIN: Cell<LastPin> = const { Cell::new(NO_PIN) };
}

enum Fast {
    Hit(NodeId),
    Unpinned,
    Revalidate,
}

pub(crate) struct ContextEntry {
    /// The node itself, so a hit needs no topology snapshot.
    node: Arc<Node>,
    depth: u32,
    /// Whose rules the pin follows: `Thread` for plain pins; `Transaction`
    /// or `Session` for a UCP affinity context of that policy (its strict
    /// switch; a session context is also released by `aff=FALSE`).
    scope: Scope,
    /// The node's session epoch when pinned (session contexts).
    epoch: u32,
}

impl ContextEntry {
    /// An `aff=FALSE` advisory since the pin released a session context.
    /// A removal moves the node's session epoch too, but it breaks the pin
    /// as a Down node does (strict refuses, soft moves), as for a session
    /// entry.
    #[inline]
    fn revoked(&self) -> bool {
        self.scope == Scope::Session && self.node.session_epoch() != self.epoch && !self.node.is_removed()
    }
}

/// Context keys come from the host (our own counter, a thread id), not from
/// remote input, so a fixed mixer replaces SipHash on this hot path.
#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = crate::hash::fmix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = crate::hash::fmix64(v);
    }
}

type ContextMap = HashMap<u64, ContextEntry, BuildHasherDefault<KeyHasher>>;

const CONTEXT_SHARDS: usize = 64;

/// Registry of explicit context pins.
pub(crate) struct ContextPins {
    shards: Box<[Shard]>,
}

/// A shard's map, and its entry count as of the last unlock: an unpinned
/// context's route (the path of every borrow that does not pin) sees its
/// shard empty with one load instead of a lock and unlock, two atomic
/// read-modify-writes.
#[repr(align(64))]
struct Shard {
    map: Mutex<ContextMap>,
    len: AtomicUsize,
}

/// A locked shard; its count is published as the lock is let go, so a
/// reader that sees 0 linearizes before any insert still under the lock.
struct ShardGuard<'a> {
    map: MutexGuard<'a, ContextMap>,
    len: &'a AtomicUsize,
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ContextMap;
    fn deref(&self) -> &ContextMap {
        &self.map
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut ContextMap {
        &mut self.map
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let n = self.map.len();
        if self.len.load(Ordering::Relaxed) != n {
            self.len.store(n, Ordering::Release);
        }
    }
}

impl ContextPins {
    pub fn new() -> Self {
        ContextPins {
            shards: (0..CONTEXT_SHARDS)
                .map(|_| Shard { map: Mutex::new(ContextMap::default()), len: AtomicUsize::new(0) })
                .collect(),
        }
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(crate::hash::fmix64(key) >> 58) as usize % CONTEXT_SHARDS]
    }

    #[inline]
    fn lock(&self, key: u64) -> ShardGuard<'_> {
        let s = self.shard(key);
        ShardGuard { map: s.map.lock().unwrap_or_else(|p| p.into_inner()), len: &s.len }
    }

    /// Whether `key` has no entry, known without the lock: its shard held
    /// none when last unlocked. `false` says nothing.
    #[inline]
    fn surely_absent(&self, key: u64) -> bool {
        self.shard(key).len.load(Ordering::Acquire) == 0
    }
}

/// Scope guard of a thread pin; dropping it releases one level of pinning.
///
/// Not `Send`: it must be dropped on the thread it pinned.
#[must_use = "the pin is released when the guard drops"]
#[derive(Debug)]
pub struct ThreadPin<'c> {
    cluster: &'c Cluster,
    route: Route,
    _not_send: PhantomData<*const ()>,
}

impl ThreadPin<'_> {
    /// The pinned node at the time the guard was taken.
    pub fn node(&self) -> NodeId {
        self.route.node
    }
    /// How the pin was obtained.
    pub fn route(&self) -> Route {
        self.route
    }
}

impl Drop for ThreadPin<'_> {
    fn drop(&mut self) {
        self.cluster.unpin_thread_level();
    }
}

/// Scope guard of a context pin.
#[must_use = "the pin is released when the guard drops"]
#[derive(Debug)]
pub struct ContextPin<'c> {
    cluster: &'c Cluster,
    key: ContextKey,
    route: Route,
}

impl ContextPin<'_> {
    /// The pinned node at the time the guard was taken.
    pub fn node(&self) -> NodeId {
        self.route.node
    }
    /// The context's key.
    pub fn key(&self) -> ContextKey {
        self.key
    }
}

impl Drop for ContextPin<'_> {
    fn drop(&mut self) {
        self.cluster.unpin_context(self.key);
    }
}

impl Cluster {
    /// Checks an existing pin's node; re-pins (soft) or refuses (strict),
    /// by the rules of `scope`.
    fn revalidate(&self, node: &Node, scope: Scope) -> Result<Option<(Arc<Node>, RouteKind)>> {
        if node.accepts_existing(self.clock()) {
            return Ok(None);
        }
        if self.is_strict(scope) {
            return Err(self.refuse(scope, node));
        }
        let (n, kind) = self.new_pin(scope)?;
        Ok(Some((n, if kind == RouteKind::Panic { kind } else { RouteKind::Repinned })))
    }

    fn new_pin(&self, scope: Scope) -> Result<(Arc<Node>, RouteKind)> {
        let topo = self.topo();
        let session = scope == Scope::Session;
        let (id, panic) = self.balanced_in(&topo, Some(scope), |n| !session || n.affinity_advised())?;
        Ok((topo.node(id).expect("chosen from live").clone(), if panic { RouteKind::Panic } else { RouteKind::Placed }))
    }

    /// Pins the calling OS thread (or joins its existing pin) until the guard drops.
    pub fn pin_thread(&self) -> Result<ThreadPin<'_>> {
        let route = self.thread_route(true)?;
        Ok(ThreadPin { cluster: self, route, _not_send: PhantomData })
    }

    /// Guard-less [`Cluster::pin_thread`] for hosts that pair calls
    /// themselves (the C ABI): pair every success with [`Cluster::leave_thread_pin`].
    pub fn enter_thread_pin(&self) -> Result<Route> {
        self.thread_route(true)
    }

    /// Releases one level of the calling thread's pin; returns whether the
    /// pin is now gone (false also when there was none).
    pub fn leave_thread_pin(&self) -> bool {
        self.unpin_thread_level()
    }

    /// The node of the calling thread's pin, if any.
    pub fn thread_pinned_node(&self) -> Option<NodeId> {
        let id = self.inner.id;
        // During thread exit the pins are already gone (see `thread_route`).
        THREAD_PINS.try_with(|p| p.borrow().iter().find(|s| s.cluster == id).map(|s| s.node.id())).ok().flatten()
    }

    /// Releases the calling thread's pin at every nesting level (e.g. at
    /// transaction completion). Returns whether a pin existed.
    pub fn unpin_thread(&self) -> bool {
        let id = self.inner.id;
        THREAD_PINS
            .try_with(|p| {
                let mut v = p.borrow_mut();
                match v.iter().position(|s| s.cluster == id) {
                    Some(i) => {
                        v.swap_remove(i);
                        true
                    }
                    None => false,
                }
            })
            .unwrap_or(false)
    }

    fn unpin_thread_level(&self) -> bool {
        let id = self.inner.id;
        THREAD_PINS
            .try_with(|p| {
                let mut v = p.borrow_mut();
                let Some(i) = v.iter().position(|s| s.cluster == id) else { return false };
                v[i].depth -= 1;
                if v[i].depth > 0 {
                    return false;
                }
                v.swap_remove(i);
                true
            })
            .unwrap_or(false)
    }

    /// Routes through the thread pin. `enter` starts or deepens a pin scope;
    /// otherwise only an existing pin (or `thread.auto_pin`) applies.
    fn thread_route(&self, enter: bool) -> Result<Route> {
        let id = self.inner.id;
        let epoch = self.routing_epoch();
        // `try_with` fails only while the thread is exiting (a host's
        // pthread-key destructor runs after Rust's thread-locals are gone):
        // its pins were released then, and it can hold no new one.
        let hit = THREAD_PINS.try_with(|p| -> Result<Option<Route>> {
            let mut v = p.borrow_mut();
            let Some(slot) = v.iter_mut().find(|s| s.cluster == id) else {
                return Ok(None);
            };
            if enter && slot.depth == u32::MAX {
                return Err(pin_too_deep());
            }
            let kind = match self.revalidate(&slot.node, Scope::Thread)? {
                None => RouteKind::Affinity,
                Some((n, kind)) => {
                    slot.move_to(n);
                    kind
                }
            };
            slot.remember(epoch);
            if enter {
                slot.depth += 1;
            }
            Ok(Some(Route::new(slot.node.id(), kind)))
        });
        let route = match hit {
            Ok(hit) => match hit? {
                Some(r) => r,
                None if enter || self.inner.config.thread.auto_pin => {
                    let (node, kind) = self.new_pin(Scope::Thread)?;
                    let r = Route::new(node.id(), kind);
                    let slot = Slot::new(id, node, &self.inner);
                    self.inner.scope[Scope::Thread as usize].live.fetch_add(1, Ordering::Relaxed);
                    let pushed = THREAD_PINS.try_with(|p| {
                        let mut v = p.borrow_mut();
                        // Pins left on clusters that were closed or dropped
                        // can never be released by their handle: drop them
                        // here, so they hold no memory and slow no scan.
                        v.retain(|s| s.owner.upgrade().is_some_and(|inner| !inner.closed.load(Ordering::Acquire)));
                        slot.remember(epoch);
                        v.push(slot);
                    });
                    if pushed.is_err() {
                        return Err(thread_exiting());
                    }
                    r
                }
                None => return self.pick_balanced(),
            },
            Err(_) if enter => return Err(thread_exiting()),
            Err(_) => return self.pick_balanced(),
        };
        self.count(&self.topo(), Some(Scope::Thread), route);
        Ok(route)
    }

    /// Picks a node for the calling thread: its pin if pinned, else the
    /// load-balancing policy (or a new pin with `thread.auto_pin`).
    #[inline]
    pub fn pick(&self) -> Result<Route> {
        let id = self.inner.id;
        // Fast path: the thread's last-used pin while nothing that could
        // alter a route changed; its hit counted in the pin's own tally.
        let last = LAST_PIN.with(Cell::get);
        if last.cluster == id && last.epoch == self.routing_epoch() {
            if let Some(hits) = last.hits {
                hits.hit();
                return Ok(Route::new(last.node, RouteKind::Affinity));
            }
        }
        self.pick_listed()
    }

    /// [`Cluster::pick`]'s fast path alone, for [`Cluster::acquire`]: the
    /// thread's last-used pin's node and the routing epoch read before it
    /// was checked (what a host lease needs), its hit counted; `None` where
    /// `pick()` would go on to [`Cluster::pick_listed`].
    #[inline]
    pub(crate) fn pick_last_pin(&self) -> Option<(NodeId, u64)> {
        let last = LAST_PIN.with(Cell::get);
        let epoch = self.routing_epoch();
        if last.cluster == self.inner.id && last.epoch == epoch {
            if let Some(hits) = last.hits {
                hits.hit();
                return Some((last.node, epoch));
            }
        }
        None
    }

    /// [`Cluster::pick`] when the last-used pin did not answer: another
    /// cluster's pin, an unhealthy node, or no pin.
    fn pick_listed(&self) -> Result<Route> {
        let id = self.inner.id;
        let epoch = self.routing_epoch();
        let fast = THREAD_PINS
            .try_with(|p| {
                let v = p.borrow();
                let Some(s) = v.iter().find(|s| s.cluster == id) else { return Fast::Unpinned };
                if !s.node.accepts_existing(self.clock()) {
                    return Fast::Revalidate;
                }
                s.remember(epoch);
                s.hits.tally.hit();
                Fast::Hit(s.node.id())
            })
            .unwrap_or(Fast::Unpinned);
        match fast {
            Fast::Hit(node) => Ok(Route::new(node, RouteKind::Affinity)),
            Fast::Unpinned if !self.inner.config.thread.auto_pin => self.pick_balanced(),
            _ => self.thread_route(false),
        }
    }

    // ---- explicit contexts --------------------------------------------------

    /// A fresh context key, unique within this cluster.
    pub fn new_context_key(&self) -> ContextKey {
        ContextKey(self.inner.next_context.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts (or deepens) a pin for `key`; the guard releases one level.
    pub fn pin_context_guard(&self, key: ContextKey) -> Result<ContextPin<'_>> {
        let route = self.pin_context(key)?;
        Ok(ContextPin { cluster: self, key, route })
    }

    /// Starts (or deepens) a pin for `key`. Pair with [`Cluster::unpin_context`].
    pub fn pin_context(&self, key: ContextKey) -> Result<Route> {
        self.context_route(key, true, Scope::Thread)
    }

    /// Starts (or deepens) a pin for `key` that follows the rules of
    /// `scope`: UCP's connection affinity context. `Transaction` obeys
    /// `transaction.strict` (`UseStrictXAAffinity`); `Session` obeys
    /// `session.strict` (`UseStrictWebSessionAffinity`), prefers instances
    /// advising affinity, and is released when its instance withdraws
    /// affinity (`aff=FALSE`). `Thread` is [`Cluster::pin_context`]. An
    /// existing pin keeps the scope it was made with.
    pub fn pin_context_for(&self, key: ContextKey, scope: Scope) -> Result<Route> {
        if scope == Scope::Data {
            return Err(Error::InvalidArgument(
                "a context pin follows the thread, transaction or session rules".into(),
            ));
        }
        self.context_route(key, true, scope)
    }

    /// Picks for `key`: its pin if pinned, else load balancing (or auto-pin).
    pub fn pick_in(&self, key: ContextKey) -> Result<Route> {
        self.context_route(key, false, Scope::Thread)
    }

    /// The node `key` is pinned to, if any.
    pub fn context_pinned_node(&self, key: ContextKey) -> Option<NodeId> {
        self.inner.contexts.lock(key.0).get(&key.0).filter(|e| !e.revoked()).map(|e| e.node.id())
    }

    /// Releases one level of `key`'s pin; returns whether the pin is now gone.
    pub fn unpin_context(&self, key: ContextKey) -> bool {
        let mut m = self.inner.contexts.lock(key.0);
        let Some(e) = m.get_mut(&key.0) else { return false };
        e.depth -= 1;
        if e.depth == 0 {
            let scope = e.scope;
            m.remove(&key.0);
            self.inner.scope[scope as usize].live.fetch_sub(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Releases `key`'s pin at every level. Returns whether a pin existed.
    pub fn release_context(&self, key: ContextKey) -> bool {
        let removed = self.inner.contexts.lock(key.0).remove(&key.0);
        if let Some(e) = &removed {
            self.inner.scope[e.scope as usize].live.fetch_sub(1, Ordering::Relaxed);
        }
        removed.is_some()
    }

    fn context_route(&self, key: ContextKey, enter: bool, scope: Scope) -> Result<Route> {
        match self.context_route_or_unpinned(key, enter, scope)? {
            Some(r) => Ok(r),
            None => self.pick_balanced(),
        }
    }

    /// [`Cluster::context_route`], or `None` where that would be an unpinned
    /// [`Cluster::pick_balanced`] (no pin, none to make), which the caller
    /// then makes itself: [`Cluster::pick_in_host_leased`] asks the picked
    /// node whether it is `Up`, where a route from here needs a snapshot.
    pub(crate) fn context_route_or_unpinned(
        &self,
        key: ContextKey,
        enter: bool,
        scope: Scope,
    ) -> Result<Option<Route>> {
        if !enter && !self.inner.config.thread.auto_pin && self.inner.contexts.surely_absent(key.0) {
            return Ok(None);
        }
        let mut m = self.inner.contexts.lock(key.0);
        if m.get(&key.0).is_some_and(ContextEntry::revoked) {
            // The instance withdrew affinity: the context is released, as
            // UCP releases a web-session context; a new one may be placed.
            if let Some(e) = m.remove(&key.0) {
                self.inner.scope[e.scope as usize].live.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if enter && m.get(&key.0).is_some_and(|e| e.depth == u32::MAX) {
            return Err(pin_too_deep());
        }
        let route = match m.get_mut(&key.0) {
            // The hot path: a healthy pin, no snapshot load.
            Some(e) if e.node.accepts_existing(self.clock()) => {
                if enter {
                    e.depth += 1;
                }
                e.node.counters.affinity_hits.incr();
                self.inner.scope[e.scope as usize].hits.incr();
                return Ok(Some(Route::new(e.node.id(), RouteKind::Affinity)));
            }
            Some(e) => {
                // The node may have come back since the check above.
                let kind = match self.revalidate(&e.node, e.scope)? {
                    None => RouteKind::Affinity,
                    Some((n, kind)) => {
                        // The new node's session epoch: the old one's would
                        // read as its withdrawal of affinity and release the pin.
                        e.epoch = n.session_epoch();
                        e.node = n;
                        kind
                    }
                };
                if enter {
                    e.depth += 1;
                }
                Route::new(e.node.id(), kind)
            }
            None if enter || self.inner.config.thread.auto_pin => {
                // A key this cluster never issued could collide with one it
                // issues later, which would then start out pinned.
                if key.0 == 0 || key.0 >= self.inner.next_context.load(Ordering::Relaxed) {
                    return Err(Error::InvalidArgument(format!(
                        "context key {} was not issued by this cluster (use new_context_key)",
                        key.0
                    )));
                }
                let (n, kind) = self.new_pin(scope)?;
                let id = n.id();
                let epoch = n.session_epoch();
                m.insert(key.0, ContextEntry { node: n, depth: 1, scope, epoch });
                self.inner.scope[scope as usize].live.fetch_add(1, Ordering::Relaxed);
                Route::new(id, kind)
            }
            None => return Ok(None),
        };
        drop(m);
        self.count(&self.topo(), Some(scope), route);
        Ok(Some(route))
    }
}

impl Cluster {
    /// Where a pin of `scope` on `node` goes once `failed` could not give a
    /// connection ([`Cluster::reroute`]): it stays on a usable node other
    /// than `failed` (another caller moved it already); a strict scope keeps
    /// it where it is; else it moves, as [`Cluster::revalidate`] moves a pin
    /// off a Down node.
    fn pin_after_failure(&self, node: &Node, scope: Scope, failed: NodeId) -> Result<PinAfterFailure> {
        if node.id() != failed && node.accepts_existing(self.clock()) {
            return Ok(PinAfterFailure::Keep);
        }
        if self.is_strict(scope) {
            return Ok(PinAfterFailure::Stay);
        }
        let topo = self.topo();
        let session = scope == Scope::Session;
        let chosen = self.balanced_in(&topo, Some(scope), |n| n.id() != failed && (!session || n.affinity_advised()));
        match chosen {
            Ok((id, _)) if id == failed => Ok(PinAfterFailure::Stay),
            Ok((id, panic)) => Ok(PinAfterFailure::Move(
                topo.node(id).expect("chosen from live").clone(),
                if panic { RouteKind::Panic } else { RouteKind::Repinned },
            )),
            Err(Error::NoNodeAvailable { .. }) => Ok(PinAfterFailure::Stay),
            Err(e) => Err(e),
        }
    }

    /// [`Cluster::reroute`] of a context's pin (a Java thread's, or a UCP
    /// affinity context of the transaction or session policy).
    pub(crate) fn context_reroute(&self, key: ContextKey, failed: NodeId) -> Result<PinMove> {
        let mut m = self.inner.contexts.lock(key.0);
        let Some(e) = m.get_mut(&key.0).filter(|e| !e.revoked()) else { return Ok(PinMove::Unpinned) };
        let scope = e.scope;
        let route = match self.pin_after_failure(&e.node, scope, failed)? {
            PinAfterFailure::Keep => Route::new(e.node.id(), RouteKind::Affinity),
            PinAfterFailure::Stay => return Ok(PinMove::Stay),
            PinAfterFailure::Move(n, kind) => {
                e.epoch = n.session_epoch();
                e.node = n;
                Route::new(e.node.id(), kind)
            }
        };
        drop(m);
        self.count(&self.topo(), Some(scope), route);
        Ok(PinMove::To(route))
    }

    /// [`Cluster::reroute`] of the calling OS thread's pin.
    pub(crate) fn thread_reroute(&self, failed: NodeId) -> Result<PinMove> {
        let id = self.inner.id;
        let moved = THREAD_PINS.try_with(|p| -> Result<PinMove> {
            let mut v = p.borrow_mut();
            let Some(slot) = v.iter_mut().find(|s| s.cluster == id) else { return Ok(PinMove::Unpinned) };
            Ok(match self.pin_after_failure(&slot.node, Scope::Thread, failed)? {
                PinAfterFailure::Keep => PinMove::To(Route::new(slot.node.id(), RouteKind::Affinity)),
                PinAfterFailure::Stay => PinMove::Stay,
                PinAfterFailure::Move(n, kind) => {
                    slot.move_to(n);
                    PinMove::To(Route::new(slot.node.id(), kind))
                }
            })
        });
        let moved = moved.unwrap_or(Ok(PinMove::Unpinned))?;
        if let PinMove::To(r) = moved {
            self.count(&self.topo(), Some(Scope::Thread), r);
        }
        Ok(moved)
    }
}

enum PinAfterFailure {
    Keep,
    Stay,
    Move(Arc<Node>, RouteKind),
}

fn thread_exiting() -> Error {
    Error::InvalidArgument(
        "the calling thread is exiting and can hold no thread pin; pin a context instead".to_string(),
    )
}

impl ContextPins {
    /// Drops every context pin (the cluster is closing).
    /// Empties the registry; returns how many pins it held, per scope.
    pub(crate) fn clear(&self) -> [usize; 4] {
        let mut per_scope = [0; 4];
        for s in self.shards.iter() {
            let mut g = ShardGuard { map: s.map.lock().unwrap_or_else(|p| p.into_inner()), len: &s.len };
            for e in std::mem::take(&mut *g).values() {
                per_scope[e.scope as usize] += 1;
            }
        }
        per_scope
    }
}

/// One more level on a pin already `u32::MAX` deep: the depth would wrap
/// to 0, and the next unpin underflow (a pin never released). Only a host
/// that enters pins without leaving them gets there.
fn pin_too_deep() -> Error {
    Error::InvalidArgument(format!("the pin is nested {} levels deep already: every pin needs its unpin", u32::MAX))
}

#[cfg(test)]
mod tests {
    use crate::{Cluster, ErrorKind};

    /// A host that enters pins and never leaves them (a C caller's
    /// unbalanced calls) reaches the depth's limit after 2^32 - 1 pins; set
    /// there directly. One more pin must be refused with a typed error, not
    /// wrap the depth to 0 (release builds; debug builds panicked) so that
    /// the next unpin underflowed and the pin was never released.
    #[test]
    fn a_context_pin_at_the_depth_limit_is_refused_and_kept() {
        let c = Cluster::from_config_text("nodes = A, B").unwrap();
        let key = c.new_context_key();
        let node = c.pin_context(key).unwrap().node;
        c.inner.contexts.lock(key.0).get_mut(&key.0).unwrap().depth = u32::MAX;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.pin_context(key).map_err(|e| e.kind())));
        assert_eq!(r.map_err(|_| "panicked"), Ok(Err(ErrorKind::InvalidArgument)));
        assert!(!c.unpin_context(key), "one unpin leaves u32::MAX - 1 levels");
        assert_eq!(c.context_pinned_node(key), Some(node));
    }

    #[test]
    fn a_thread_pin_at_the_depth_limit_is_refused_and_kept() {
        let c = Cluster::from_config_text("nodes = A, B").unwrap();
        let node = c.enter_thread_pin().unwrap().node;
        let id = c.inner.id;
        super::THREAD_PINS.with(|p| p.borrow_mut().iter_mut().find(|s| s.cluster == id).unwrap().depth = u32::MAX);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.enter_thread_pin().map_err(|e| e.kind())));
        assert_eq!(r.map_err(|_| "panicked"), Ok(Err(ErrorKind::InvalidArgument)));
        assert!(!c.leave_thread_pin(), "one unpin leaves u32::MAX - 1 levels");
        assert_eq!(c.thread_pinned_node(), Some(node));
        c.unpin_thread();
    }
}
