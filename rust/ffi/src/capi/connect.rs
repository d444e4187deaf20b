//! Oracle per-instance connect strings, built by the core so that no binding
//! re-implements them.

use std::os::raw::c_char;

use racaffinity_core::connect::{self, InstanceAddress};

use super::buffer::{str_arg, write_str};
use super::result::{guard, racaffinity_result, Failure};
use super::types::c_enum;
use crate::ops;

/// Which connect-string form to build.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_connect_form {
    /// `(DESCRIPTION=…(INSTANCE_NAME=…))`
    Descriptor = 0,
    /// `host:port/service/instance`
    EasyConnect = 1,
    /// `jdbc:oracle:thin:@(DESCRIPTION=…)`
    JdbcDescriptor = 2,
    /// `jdbc:oracle:thin:@//host:port/service/instance`
    JdbcEasyConnect = 3,
}

c_enum!(racaffinity_connect_form { Descriptor, EasyConnect, JdbcDescriptor, JdbcEasyConnect });

/// Like `racaffinity_connect_string`, from a listener `address` (`host`,
/// `host:port` or `[v6]:port`, as in `node.<N>.address`); `default_port`
/// applies when the address has none.
///
/// # Safety
/// String arguments must be NULL or NUL-terminated; `buf` NULL or valid for
/// `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_address_connect_string(
    form: u32,
    address: *const c_char,
    default_port: u16,
    service: *const c_char,
    instance: *const c_char,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (address, service, instance) =
            unsafe { (str_arg(address, "address")?, str_arg(service, "service")?, str_arg(instance, "instance")?) };
        let (host, port) = connect::split_host_port(address, default_port)?;
        // SAFETY: per this function's contract.
        unsafe { write_connect_string(form, &InstanceAddress { host, port, service, instance }, buf, cap, out_len) }
    })
}

/// Builds the string into the caller's buffer: the two C entry points differ
/// only in how they get the host and port.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
unsafe fn write_connect_string(
    form: u32,
    addr: &InstanceAddress<'_>,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> Result<(), Failure> {
    let s = ops::connect_string(racaffinity_connect_form::try_from(form)?, addr)?;
    // SAFETY: per this function's contract.
    unsafe { write_str(&s, buf, cap, out_len) }
}

/// Builds a per-instance connect string (`form` is a `racaffinity_connect_form`)
/// with INSTANCE_NAME set. Values that would break the syntax are INVALID_ARGUMENT.
///
/// # Safety
/// String arguments must be NULL or NUL-terminated; `buf` NULL or valid for
/// `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_connect_string(
    form: u32,
    host: *const c_char,
    port: u16,
    service: *const c_char,
    instance: *const c_char,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (host, service, instance) =
            unsafe { (str_arg(host, "host")?, str_arg(service, "service")?, str_arg(instance, "instance")?) };
        // SAFETY: per this function's contract.
        unsafe { write_connect_string(form, &InstanceAddress { host, port, service, instance }, buf, cap, out_len) }
    })
}
