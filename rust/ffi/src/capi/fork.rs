//! `pthread_atfork` handlers: the library's locks are never held across a
//! fork by a thread the child does not have (see the core's `fork.rs`).
//! Registered once, with the first cluster.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::panic::catch_unwind;
use std::sync::{Arc, MutexGuard, Once};

use racaffinity_core::RoutingEpoch;

extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::os::raw::c_int;
}

type Held = (MutexGuard<'static, VecDeque<u32>>, MutexGuard<'static, BTreeMap<u64, Arc<RoutingEpoch>>>);

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Registers the handlers (once per process).
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: three functions that never unwind (each catches panics),
        // valid for the life of the process (the library is never unloaded
        // while a cluster exists, and these stay registered after).
        unsafe {
            pthread_atfork(Some(prepare), Some(after), Some(after_in_child));
        }
    });
}

// The core's gate first (it waits for metrics reads in flight, which take
// none of the locks below), then the library's process-wide leaf locks:
// none is ever held while another is taken, so any order is deadlock-free.
unsafe extern "C" fn prepare() {
    let _ = catch_unwind(|| {
        racaffinity_core::prepare_fork();
        let held = (super::handle::lock_free_list(), super::epoch::lock_hand_outs());
        let _ = HELD.try_with(|h| *h.borrow_mut() = Some(held));
    });
}

unsafe extern "C" fn after() {
    let _ = catch_unwind(|| {
        let _ = HELD.try_with(|h| h.borrow_mut().take());
        racaffinity_core::after_fork();
    });
}

unsafe extern "C" fn after_in_child() {
    let _ = catch_unwind(|| {
        let _ = HELD.try_with(|h| h.borrow_mut().take());
        racaffinity_core::after_fork_in_child();
    });
}
