//! Conversions at the boundary: C strings and byte spans in, caller buffers out.

use std::ffi::CStr;
use std::os::raw::c_char;

use super::result::{racaffinity_result, Failure};

/// Largest string or byte argument accepted (config text, event lines).
pub const RACAFFINITY_MAX_STRING_BYTES: usize = 1048576;
/// Longest gtrid (XA's MAXGTRIDSIZE).
pub const RACAFFINITY_MAX_GTRID_BYTES: usize = 64;
/// A buffer this large holds the XA transaction key of every gtrid of
/// 1..=`RACAFFINITY_MAX_GTRID_BYTES` bytes (`racaffinity_xa_transaction_key`).
pub const RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES: usize = 64;
/// Longest session or data key.
pub const RACAFFINITY_MAX_KEY_BYTES: usize = 1024;

const MAX_STRING_BYTES: usize = RACAFFINITY_MAX_STRING_BYTES;
const _: () = assert!(RACAFFINITY_MAX_GTRID_BYTES == racaffinity_core::MAX_GTRID_BYTES);
const _: () = assert!(RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES == racaffinity_core::MAX_XA_TRANSACTION_KEY_BYTES);
const _: () = assert!(RACAFFINITY_MAX_KEY_BYTES == racaffinity_core::MAX_KEY_BYTES);

/// A string or byte argument over the size cap, from C or Java alike.
pub(crate) fn too_long(arg: &str, len: usize) -> Failure {
    Failure::new(
        racaffinity_result::InvalidArgument,
        format!("`{arg}` is {len} bytes; the limit is {MAX_STRING_BYTES}"),
    )
}

/// Borrows a NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for the call.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract. The scan
    // is bounded only by the NUL, so the length cap is checked afterwards.
    let c = unsafe { CStr::from_ptr(p) };
    let bytes = c.to_bytes();
    if bytes.len() > MAX_STRING_BYTES {
        return Err(too_long(name, bytes.len()));
    }
    std::str::from_utf8(bytes)
        .map_err(|e| Failure::new(racaffinity_result::InvalidUtf8, format!("`{name}` is not valid UTF-8: {e}")))
}

/// Borrows a byte span argument. A zero length accepts any pointer (even NULL).
///
/// # Safety
/// For `len > 0`, `p` must be NULL or valid for reading `len` bytes.
pub(crate) unsafe fn bytes_arg<'a>(p: *const u8, len: usize, name: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(name));
    }
    if len > MAX_STRING_BYTES {
        return Err(too_long(name, len));
    }
    // SAFETY: non-NULL and valid for `len` bytes per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A checked out-pointer. Calls take it *before* doing any work, so a NULL
/// output never leaves a registered branch, session or pin behind.
pub(crate) struct Out<T>(std::ptr::NonNull<T>);

impl<T> Out<T> {
    /// Writes the output; returns `Ok` so it can end a call body.
    #[inline]
    pub fn set(self, v: T) -> Result<(), Failure> {
        // SAFETY: `out_arg` checked non-NULL, and its caller vouched that the
        // pointer is writable for the duration of the call.
        unsafe { self.0.as_ptr().write(v) };
        Ok(())
    }
}

/// Checks a required out-pointer.
///
/// # Safety
/// `out` must be NULL or valid for writing a `T` until the call returns.
#[inline]
pub(crate) unsafe fn out_arg<T>(out: *mut T, name: &str) -> Result<Out<T>, Failure> {
    std::ptr::NonNull::new(out).map(Out).ok_or_else(|| Failure::null(name))
}

/// Writes an optional output: a NULL `out` means the caller does not want it.
///
/// # Safety
/// `out` must be NULL or valid for writing a `T`.
#[inline]
pub(crate) unsafe fn write_opt<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-NULL and writable per the caller's contract.
        unsafe { out.write(v) };
    }
}

/// Copies `s` into a caller buffer with a trailing NUL. `*out_len` receives the
/// size including the NUL, so on BUFFER_TOO_SMALL it is the size to allocate.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
pub(crate) unsafe fn write_str(s: &str, buf: *mut c_char, cap: usize, out_len: *mut usize) -> Result<(), Failure> {
    let need = s.len() + 1;
    if !out_len.is_null() {
        // SAFETY: non-NULL and writable per the caller's contract.
        unsafe { out_len.write(need) };
    }
    if buf.is_null() {
        return Err(Failure::null("buf"));
    }
    if cap < need {
        return Err(Failure::new(
            racaffinity_result::BufferTooSmall,
            format!("buffer holds {cap} bytes; {need} are needed"),
        ));
    }
    // SAFETY: `buf` is valid for `cap >= need` bytes; the source is a distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

/// Copies the bytes `b` into a caller buffer (no terminator: bytes, not
/// text). `*out_len` receives their length first, so on BUFFER_TOO_SMALL it
/// is the size to allocate.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes.
pub(crate) unsafe fn write_bytes(b: &[u8], buf: *mut u8, cap: usize, out_len: Out<usize>) -> Result<(), Failure> {
    out_len.set(b.len())?;
    if buf.is_null() {
        return Err(Failure::null("buf"));
    }
    if cap < b.len() {
        return Err(Failure::new(
            racaffinity_result::BufferTooSmall,
            format!("buffer holds {cap} bytes; {} are needed", b.len()),
        ));
    }
    // SAFETY: `buf` is valid for `cap >= b.len()` bytes; the source is a distinct Rust slice.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf, b.len()) };
    Ok(())
}
