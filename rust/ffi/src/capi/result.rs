//! Result codes, the last-error message and the panic guard.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use racaffinity_core::{Error, ErrorKind};

use super::buffer::write_str;

/// Result of every call. Values are stable: new codes are only ever added.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_result {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// The cluster handle is stale, freed, foreign or corrupt.
    InvalidHandle = 2,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = 3,
    /// An argument is out of range or oversized.
    InvalidArgument = 4,
    /// The caller's buffer is too small; the needed size was written.
    BufferTooSmall = 5,
    /// A panic was caught at the boundary (a bug: please report it).
    Panic = 6,
    /// Config text is invalid.
    Config = 7,
    /// No node of that name (or id).
    UnknownNode = 8,
    /// A node of that name exists.
    DuplicateNode = 9,
    /// Every node is unavailable and the panic policy is `fail`.
    NoNodeAvailable = 10,
    /// A strict affinity's node is unavailable.
    StrictAffinity = 11,
    /// A prepared transaction's node is unavailable; it never moves.
    PreparedNodeUnavailable = 12,
    /// The gtrid is not registered.
    UnknownTransaction = 13,
    /// Malformed or unsupported event text.
    EventParse = 14,
    /// An event for another database or service.
    ForeignEvent = 15,
    /// Too many live cluster handles in this process.
    TooManyHandles = 16,
    /// The lease was already released, or belongs to another cluster.
    InvalidLease = 17,
}

impl racaffinity_result {
    /// Static description of a code.
    pub fn message(self) -> &'static str {
        use racaffinity_result::*;
        match self {
            Ok => "success",
            NullArgument => "a required pointer argument was NULL",
            InvalidHandle => "invalid cluster handle (stale, freed, foreign or corrupt)",
            InvalidUtf8 => "a string argument is not valid UTF-8",
            InvalidArgument => "an argument is out of range or oversized",
            BufferTooSmall => "the buffer is too small; the needed size was written to the length out-pointer",
            Panic => "internal panic caught at the library boundary (a bug)",
            Config => "invalid configuration",
            UnknownNode => "unknown node",
            DuplicateNode => "a node with that name already exists",
            NoNodeAvailable => "no node available and the panic policy is `fail`",
            StrictAffinity => "strict affinity: the owning node is unavailable",
            PreparedNodeUnavailable => "the prepared transaction's node is unavailable; prepared branches never move",
            UnknownTransaction => "unknown transaction id",
            EventParse => "malformed or unsupported event text",
            ForeignEvent => "event for another database or service",
            TooManyHandles => "too many live cluster handles in this process",
            InvalidLease => "lease already released or from another cluster",
        }
    }

    /// Every code, for tests and bindings' tables.
    pub(crate) const ALL: [racaffinity_result; 18] = {
        use racaffinity_result::*;
        [
            Ok,
            NullArgument,
            InvalidHandle,
            InvalidUtf8,
            InvalidArgument,
            BufferTooSmall,
            Panic,
            Config,
            UnknownNode,
            DuplicateNode,
            NoNodeAvailable,
            StrictAffinity,
            PreparedNodeUnavailable,
            UnknownTransaction,
            EventParse,
            ForeignEvent,
            TooManyHandles,
            InvalidLease,
        ]
    };
}

/// The one table from core error kinds to result codes.
pub(crate) fn code_of(kind: ErrorKind) -> racaffinity_result {
    match kind {
        ErrorKind::Config => racaffinity_result::Config,
        ErrorKind::InvalidArgument => racaffinity_result::InvalidArgument,
        ErrorKind::UnknownNode => racaffinity_result::UnknownNode,
        ErrorKind::DuplicateNode => racaffinity_result::DuplicateNode,
        ErrorKind::NoNodeAvailable => racaffinity_result::NoNodeAvailable,
        ErrorKind::StrictAffinity => racaffinity_result::StrictAffinity,
        ErrorKind::PreparedNodeUnavailable => racaffinity_result::PreparedNodeUnavailable,
        ErrorKind::UnknownTransaction => racaffinity_result::UnknownTransaction,
        ErrorKind::EventParse => racaffinity_result::EventParse,
        ErrorKind::ForeignEvent => racaffinity_result::ForeignEvent,
        ErrorKind::UnknownLease => racaffinity_result::InvalidLease,
        _ => racaffinity_result::InvalidArgument,
    }
}

/// A failed call: the code plus the detail kept for `racaffinity_last_error_message`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: racaffinity_result,
    pub detail: String,
}

impl Failure {
    pub fn new(code: racaffinity_result, detail: impl Into<String>) -> Self {
        Failure { code, detail: detail.into() }
    }
    pub fn null(arg: &str) -> Self {
        Failure::new(racaffinity_result::NullArgument, format!("`{arg}` is NULL"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure { code: code_of(e.kind()), detail: e.to_string() }
    }
}

pub(crate) type CallResult = Result<(), Failure>;

/// Longest detail kept per thread; a longer one is cut at a character
/// boundary and ends in `…`.
const MAX_DETAIL: usize = 1024;

/// A fixed buffer, not a `String`: a type without a destructor keeps the
/// thread-local usable during thread exit (a host's pthread-key destructor
/// runs after Rust's thread-locals were torn down), and it never registers a
/// destructor that would run too late and leak.
struct Detail {
    len: usize,
    bytes: [u8; MAX_DETAIL],
}

impl Detail {
    fn set(&mut self, msg: &str) {
        let mut end = msg.len();
        let cut = end > MAX_DETAIL;
        if cut {
            end = MAX_DETAIL - '…'.len_utf8();
            while !msg.is_char_boundary(end) {
                end -= 1;
            }
        }
        self.bytes[..end].copy_from_slice(&msg.as_bytes()[..end]);
        self.len = end;
        if cut {
            let ell = '…'.len_utf8();
            '…'.encode_utf8(&mut self.bytes[end..end + ell]);
            self.len += ell;
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Detail> = const { RefCell::new(Detail { len: 0, bytes: [0; MAX_DETAIL] }) };
}

/// Runs a call body: catches panics and records the error detail per thread.
#[inline]
pub(crate) fn guard(f: impl FnOnce() -> CallResult) -> racaffinity_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => racaffinity_result::Ok,
        Ok(Err(fail)) => {
            set_last_error(fail.detail);
            fail.code
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".into());
            set_last_error(format!("panic caught at the library boundary: {msg}"));
            racaffinity_result::Panic
        }
    }
}

fn set_last_error(msg: String) {
    // A failing allocation or TLS teardown must not turn into a second panic.
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.set(&msg);
        }
    });
}

/// Writes the static description of result code `code` into `buf` (NUL-terminated).
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_result_message(
    code: u32,
    buf: *mut std::os::raw::c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        let code = racaffinity_result::ALL.get(code as usize).copied().ok_or_else(|| {
            Failure::new(racaffinity_result::InvalidArgument, format!("{code} is not a racaffinity_result"))
        })?;
        // SAFETY: the caller guarantees `buf`/`out_len` per this function's contract.
        unsafe { write_str(code.message(), buf, cap, out_len) }
    })
}

/// Writes the detailed message of the calling thread's last failed call
/// (empty if none) into `buf` (NUL-terminated).
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_last_error_message(
    buf: *mut std::os::raw::c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    let msg = LAST_ERROR.try_with(|e| e.borrow().as_str().to_string()).unwrap_or_default();
    // Not through `guard`: a BUFFER_TOO_SMALL here must not overwrite the
    // message being asked for.
    // SAFETY: the caller guarantees `buf`/`out_len` per this function's contract.
    match catch_unwind(AssertUnwindSafe(|| unsafe { write_str(&msg, buf, cap, out_len) })) {
        Ok(Ok(())) => racaffinity_result::Ok,
        Ok(Err(f)) => f.code,
        Err(_) => racaffinity_result::Panic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_detail_is_cut_at_a_character_boundary() {
        let mut d = Detail { len: 0, bytes: [0; MAX_DETAIL] };
        let long = "é".repeat(MAX_DETAIL);
        d.set(&long);
        assert!(d.as_str().ends_with('…'));
        assert!(d.as_str().len() <= MAX_DETAIL);
        d.set("short");
        assert_eq!(d.as_str(), "short");
    }
}
