//! fork(): what the library holds across it, so that the child's calls
//! work.
//!
//! A lock another thread holds when the process forks stays held forever in
//! the child, where that thread does not exist. A metrics read holds every
//! shard of a cluster's thread-pin tallies for the whole snapshot (so no hit
//! is counted twice or missed), long enough that a fork while an exporter
//! thread reads metrics left children hung in their own first read. The
//! library's own threads (heartbeats, the feed's subscriber, a host's FAN
//! listener) take a node's health lock, the topology lock and the like, so
//! a fork at that moment left the child hung at its first state change of
//! that node. So those locks are taken through [`lock`], inside a gate
//! of their own; [`prepare_fork`] waits for metrics reads and those sections
//! in flight and keeps new ones out, and also takes the process-wide tally
//! pool; [`after_fork`] lets go, in the parent and in the child. The native
//! library calls them from its `pthread_atfork` handlers; a Rust program
//! that forks calls them itself.
//!
//! The registries an application's own calls lock per unit of work
//! (sessions, transactions, leases, context pins) are not gated: a gate on
//! them would put one shared read-modify-write on every such call. Forking
//! while other threads of the application call into the library stays the
//! application's to avoid, as with any library that locks.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::thread_hits::{self, Tally};

/// Shared by every metrics read; taken exclusively across a fork.
static GATE: RwLock<()> = RwLock::new(());
/// Shared by every section under a lock taken through [`lock`], one per
/// counter stripe (a strict placement enters one per transaction, and one
/// shared word would bounce between the cores placing them); all taken
/// exclusively across a fork, after [`GATE`]. Apart from [`GATE`]: a metrics
/// read waits on registry locks that are not gated, whose holders may be
/// about to enter a gated section, and a section under one gate never
/// waits on another lock (see [`lock`]).
static LOCKS: [RwLock<()>; STRIPES] = [const { RwLock::new(()) }; STRIPES];
const STRIPES: usize = crate::counter::STRIPES;

type Held = (
    RwLockWriteGuard<'static, ()>,
    Vec<RwLockWriteGuard<'static, ()>>,
    MutexGuard<'static, Vec<&'static Tally>>,
    MutexGuard<'static, Vec<std::sync::Weak<crate::feed::subscriber::Restart>>>,
);

thread_local! {
    // The forking thread's guards, from prepare_fork to after_fork (fork
    // runs both on that thread, and the child is a copy of it).
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

thread_local! {
    // How deep the thread is in gated sections. A nested section does not
    // take the gate again: a read lock taken twice by one thread deadlocks
    // once a writer (a fork) waits between the two.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// A section under a lock a fork waits for; see [`lock`].
pub(crate) struct Section {
    // None for a nested section, or where the thread's locals are gone
    // (its exit): that section is not gated.
    _gate: Option<RwLockReadGuard<'static, ()>>,
    counted: bool,
}

impl Drop for Section {
    fn drop(&mut self) {
        if self.counted {
            let _ = DEPTH.try_with(|d| d.set(d.get() - 1));
        }
    }
}

fn enter() -> Section {
    match DEPTH.try_with(|d| d.replace(d.get() + 1)) {
        Ok(0) => Section {
            _gate: Some(LOCKS[crate::counter::stripe()].read().unwrap_or_else(|p| p.into_inner())),
            counted: true,
        },
        Ok(_) => Section { _gate: None, counted: true },
        Err(_) => Section { _gate: None, counted: false },
    }
}

/// Held by a metrics read for its whole snapshot.
pub(crate) fn reading() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|p| p.into_inner())
}

/// A section of several gated locks in a row: they then take the gate once.
pub(crate) fn section() -> Section {
    enter()
}

/// A lock a fork must not split: its guard, taken inside the fork gate.
pub(crate) struct Gated<'a, T> {
    // Declared first, so dropped first: the lock is let go before the gate.
    guard: MutexGuard<'a, T>,
    _section: Section,
}

impl<T> Deref for Gated<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Gated<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Locks `m` (a lock the library's own threads take) inside the fork gate;
/// a poisoned lock is taken as it is, as everywhere in the core. Only for
/// locks whose sections wait on no lock but other such locks: a section
/// that waited on a registry shard could wait for a thread that waits at
/// the gate while a fork is pending, and the fork for the section.
pub(crate) fn lock<T>(m: &Mutex<T>) -> Gated<'_, T> {
    let section = enter();
    Gated { guard: m.lock().unwrap_or_else(|p| p.into_inner()), _section: section }
}

/// Call right before `fork()`: waits for metrics reads and gated sections
/// in flight, keeps new ones out and takes the process-wide locks, until
/// [`after_fork`].
pub fn prepare_fork() {
    // A fork from inside a gated section (a callback run under one of its
    // locks) would wait for itself: that fork is not gated.
    if DEPTH.try_with(Cell::get).unwrap_or(0) > 0 {
        return;
    }
    let gate = GATE.write().unwrap_or_else(|p| p.into_inner());
    let locks = LOCKS.iter().map(|l| l.write().unwrap_or_else(|p| p.into_inner())).collect();
    let pool = thread_hits::pool();
    let feeds = crate::feed::subscriber::lock_live();
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some((gate, locks, pool, feeds)));
}

/// Call right after `fork()`, in the parent and in the child, on the thread
/// that called [`prepare_fork`]. Without a matching `prepare_fork`, a no-op.
pub fn after_fork() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

/// [`after_fork`] for the child: also starts the topology feed's subscriber
/// threads again (threads are not copied by `fork()`), so a child's
/// clusters keep following the feed.
pub fn after_fork_in_child() {
    after_fork();
    crate::feed::subscriber::restart_in_child();
}
