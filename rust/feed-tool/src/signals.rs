//! SIGTERM and SIGINT set a flag the monitor's loop reads (std has no signal
//! API; a handler that only stores an atomic is async-signal-safe).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handlers for SIGTERM and SIGINT.
pub fn install() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe; `signal` has no other precondition.
    unsafe {
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}

/// Whether SIGTERM or SIGINT came.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}
