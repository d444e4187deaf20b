//! fork(): what the library holds across it, so that the child's calls
//! work.
//!
//! A lock another thread holds when the process forks stays held forever in
//! the child, where that thread does not exist. A metrics read holds every
//! shard of a cluster's thread-pin tallies for the whole snapshot (so no hit
//! is counted twice or missed), long enough that a fork while an exporter
//! thread reads metrics left children hung in their own first read. So
//! [`prepare_fork`] waits for the reads in flight and keeps new ones out,
//! and also takes the process-wide tally pool; [`after_fork`] lets go, in
//! the parent and in the child. The native library calls them from its
//! `pthread_atfork` handlers; a Rust program that forks calls them itself.

use std::cell::RefCell;
use std::sync::{MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::thread_hits::{self, Tally};

/// Shared by every metrics read; taken exclusively across a fork.
static GATE: RwLock<()> = RwLock::new(());

type Held = (
    RwLockWriteGuard<'static, ()>,
    MutexGuard<'static, Vec<&'static Tally>>,
    MutexGuard<'static, Vec<std::sync::Weak<crate::feed::subscriber::Restart>>>,
);

thread_local! {
    // The forking thread's guards, from prepare_fork to after_fork (fork
    // runs both on that thread, and the child is a copy of it).
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Held by a metrics read for its whole snapshot.
pub(crate) fn reading() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|p| p.into_inner())
}

/// Call right before `fork()`: waits for metrics reads in flight, keeps new
/// ones out and takes the process-wide locks, until [`after_fork`].
pub fn prepare_fork() {
    let gate = GATE.write().unwrap_or_else(|p| p.into_inner());
    let pool = thread_hits::pool();
    let feeds = crate::feed::subscriber::lock_live();
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some((gate, pool, feeds)));
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
