//! Result codes, the last-error message and the panic guard.

use std::any::Any;
use std::cell::RefCell;
use std::fmt::Display;
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
    /// The topology feed did not take an operator's change; nothing changed.
    FeedUnavailable = 18,
}

/// A `#[repr(C)]` enum of the boundary: its values and its checked
/// conversion from the `uint32_t` a caller passes.
pub(crate) trait CEnum: Copy + TryFrom<u32, Error = InvalidEnumValue> + 'static {
    /// The C type name, for messages.
    const NAME: &'static str;
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
}

/// A `uint32_t` that is no value of the enum `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidEnumValue {
    /// The enum's C type name.
    pub name: &'static str,
    /// The value passed.
    pub value: u32,
}

impl From<InvalidEnumValue> for Failure {
    fn from(e: InvalidEnumValue) -> Self {
        bad_enum(e.name, e.value)
    }
}

/// Derives [`CEnum`] (the `ALL` list and `TryFrom<u32>`) for a `#[repr(C)]`
/// enum from its variant names; with `=> CoreEnum`, also the conversions
/// both ways to the core enum whose variants have the same names.
///
/// The enum itself stays a plain item beside the invocation because cbindgen
/// does not expand macros, and the header must keep it. Drift cannot creep in
/// anyway: the list is matched with no wildcard, so a missing variant does not
/// compile (a repeated one is an unreachable pattern, denied by clippy), an
/// unknown name does not resolve, and values are compared by discriminant,
/// never looked up by position.
macro_rules! c_enum {
    ($name:ident { $($v:ident),+ $(,)? }) => {
        impl $crate::capi::result::CEnum for $name {
            const NAME: &'static str = stringify!($name);
            const ALL: &'static [$name] = &[$($name::$v),+];
        }

        impl TryFrom<u32> for $name {
            type Error = $crate::capi::result::InvalidEnumValue;

            fn try_from(v: u32) -> Result<Self, Self::Error> {
                #[allow(dead_code)]
                const fn every_variant_is_listed(e: $name) {
                    match e {
                        $($name::$v)|+ => {}
                    }
                }
                $(
                    if v == $name::$v as u32 {
                        return Ok($name::$v);
                    }
                )+
                Err($crate::capi::result::InvalidEnumValue { name: stringify!($name), value: v })
            }
        }
    };
    ($name:ident => $core:ident { $($v:ident),+ $(,)? }) => {
        c_enum!($name { $($v),+ });

        impl From<$core> for $name {
            #[inline]
            fn from(x: $core) -> Self {
                match x {
                    $($core::$v => $name::$v),+
                }
            }
        }

        impl From<$name> for $core {
            #[inline]
            fn from(x: $name) -> Self {
                match x {
                    $($name::$v => $core::$v),+
                }
            }
        }
    };
}
pub(crate) use c_enum;

/// The failure for a value that is no variant of the enum `what`.
pub(crate) fn bad_enum(what: &str, v: impl Display) -> Failure {
    Failure::new(racaffinity_result::InvalidArgument, format!("{v} is not a valid {what}"))
}

c_enum!(racaffinity_result {
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
    FeedUnavailable,
});

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
            FeedUnavailable => "the topology feed did not take the change; nothing changed",
        }
    }
}

/// The one table from core error kinds to result codes. `ErrorKind` is
/// `#[non_exhaustive]`, so the compiler cannot see a kind missing here; the
/// unit test `every_core_error_kind_has_its_own_code` reads the core's list.
macro_rules! kind_codes {
    ($($kind:ident => $code:ident),+ $(,)?) => {
        pub(crate) fn code_of(kind: ErrorKind) -> racaffinity_result {
            match kind {
                $(ErrorKind::$kind => racaffinity_result::$code,)+
                _ => racaffinity_result::InvalidArgument,
            }
        }

        /// Every kind the table names.
        #[cfg(test)]
        pub(crate) const MAPPED_KINDS: &[ErrorKind] = &[$(ErrorKind::$kind),+];
    };
}

kind_codes! {
    Config => Config,
    InvalidArgument => InvalidArgument,
    UnknownNode => UnknownNode,
    DuplicateNode => DuplicateNode,
    NoNodeAvailable => NoNodeAvailable,
    StrictAffinity => StrictAffinity,
    PreparedNodeUnavailable => PreparedNodeUnavailable,
    UnknownTransaction => UnknownTransaction,
    EventParse => EventParse,
    ForeignEvent => ForeignEvent,
    UnknownLease => InvalidLease,
    FeedUnavailable => FeedUnavailable,
}

/// A failed call: the code plus the detail kept for `racaffinity_last_error_message`.
///
/// Boxed, so a call body's `Result<(), Failure>` is one word returned in a
/// register: unboxed (a code and a `String`) it went through the stack, and
/// re-reading it as 16 bytes after narrower stores stalled store forwarding
/// on every successful call (`perf annotate` of `racaffinity_cluster_route`).
#[derive(Debug)]
pub(crate) struct Failure(Box<FailureDetail>);

#[derive(Debug)]
pub(crate) struct FailureDetail {
    pub code: racaffinity_result,
    pub detail: String,
}

impl std::ops::Deref for Failure {
    type Target = FailureDetail;
    fn deref(&self) -> &FailureDetail {
        &self.0
    }
}

impl Failure {
    #[cold]
    pub fn new(code: racaffinity_result, detail: impl Into<String>) -> Self {
        Failure(Box::new(FailureDetail { code, detail: detail.into() }))
    }

    /// The detail, moved out.
    pub fn into_detail(self) -> String {
        self.0.detail
    }
    pub fn null(arg: &str) -> Self {
        Failure::new(racaffinity_result::NullArgument, format!("`{arg}` is NULL"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::new(code_of(e.kind()), e.to_string())
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
            let code = fail.code;
            set_last_error(fail.into_detail());
            code
        }
        Err(payload) => {
            set_last_error(panic_message(&*payload));
            racaffinity_result::Panic
        }
    }
}

/// The message of a panic caught at the boundary (C's last error, Java's
/// `NativePanicException`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    format!("panic caught at the library boundary (a bug): {msg}")
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
        let code = racaffinity_result::try_from(code)?;
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

/// Replaces the calling thread's last-error message with `message` (NULL:
/// empty; cut like any detail; bytes that are not UTF-8 become U+FFFD).
/// For a binding whose finalizers call the library: read the message with
/// `racaffinity_last_error_message` before a finalizer's calls and put it
/// back after, so an error the thread is about to raise with the message of
/// its own failed call never carries the finalizer's.
///
/// # Safety
/// `message` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_last_error_set(message: *const std::os::raw::c_char) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let msg = if message.is_null() {
            String::new()
        } else {
            // SAFETY: per this function's contract.
            unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy().into_owned()
        };
        set_last_error(msg);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variant names of the core's `ErrorKind`, read from its source:
    /// the enum is `#[non_exhaustive]`, so no match here can list them.
    fn core_error_kinds() -> Vec<String> {
        let src = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../core/src/error.rs"));
        let body = src.split("pub enum ErrorKind {").nth(1).expect("rust/core/src/error.rs defines ErrorKind");
        let body = &body[..body.find('}').expect("ErrorKind's closing brace")];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('#'))
            .map(|l| l.trim_end_matches(',').to_string())
            .collect()
    }

    #[test]
    fn every_core_error_kind_has_its_own_code() {
        let kinds = core_error_kinds();
        assert!(kinds.len() >= 11, "parsed {kinds:?}");
        let mapped: Vec<String> = MAPPED_KINDS.iter().map(|k| format!("{k:?}")).collect();
        for k in &kinds {
            assert!(mapped.contains(k), "ErrorKind::{k} has no result code: add it to `kind_codes!` in capi/result.rs");
        }
        assert_eq!(mapped.len(), kinds.len(), "kind_codes! names a kind twice: {mapped:?}");
        // Only InvalidArgument itself may land on the fallback code.
        for &k in MAPPED_KINDS {
            let code = code_of(k);
            assert!(code != racaffinity_result::InvalidArgument || k == ErrorKind::InvalidArgument, "{k:?}");
            assert!(!matches!(code, racaffinity_result::Ok | racaffinity_result::Panic), "{k:?} -> {code:?}");
        }
        assert_eq!(code_of(ErrorKind::UnknownLease), racaffinity_result::InvalidLease);
        assert_eq!(code_of(ErrorKind::UnknownNode), racaffinity_result::UnknownNode);
    }

    #[test]
    fn every_code_is_its_index_and_has_its_own_message() {
        // Java's `exceptionClasses()` and Python's tables index by code.
        for (i, &c) in racaffinity_result::ALL.iter().enumerate() {
            assert_eq!(c as usize, i, "{c:?}");
            assert!(!c.message().is_empty(), "{c:?}");
        }
        let mut messages: Vec<_> = racaffinity_result::ALL.iter().map(|c| c.message()).collect();
        messages.sort_unstable();
        messages.dedup();
        assert_eq!(messages.len(), racaffinity_result::ALL.len(), "two codes share a message");
    }

    #[test]
    fn an_unknown_code_has_no_message() {
        let mut buf = [0 as std::os::raw::c_char; 64];
        let mut len = 0usize;
        let n = racaffinity_result::ALL.len() as u32;
        // SAFETY: `buf` is valid for its length and `len` is writable.
        let rc = unsafe { racaffinity_result_message(n, buf.as_mut_ptr(), buf.len(), &mut len) };
        assert_eq!(rc, racaffinity_result::InvalidArgument);
        // SAFETY: as above.
        let rc = unsafe { racaffinity_result_message(n - 1, buf.as_mut_ptr(), buf.len(), &mut len) };
        assert_eq!(rc, racaffinity_result::Ok);
        assert_eq!(len, racaffinity_result::FeedUnavailable.message().len() + 1);
    }

    #[test]
    fn a_panic_becomes_the_panic_code_and_its_message() {
        let rc = guard(|| panic!("inside"));
        assert_eq!(rc, racaffinity_result::Panic);
        let msg = LAST_ERROR.with(|e| e.borrow().as_str().to_string());
        assert_eq!(msg, "panic caught at the library boundary (a bug): inside");
    }

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

    #[test]
    fn a_panic_message_names_the_boundary_and_the_payload() {
        let p: Box<dyn Any + Send> = Box::new("boom");
        assert_eq!(panic_message(&*p), "panic caught at the library boundary (a bug): boom");
        let p: Box<dyn Any + Send> = Box::new(String::from("bang"));
        assert!(panic_message(&*p).ends_with(": bang"));
        let p: Box<dyn Any + Send> = Box::new(42);
        assert!(panic_message(&*p).ends_with("non-string panic payload"));
    }
}
