//! Oracle per-instance connect strings, built by the core so that no binding
//! re-implements them.

use std::os::raw::c_char;

use racaffinity_core::connect::{self, InstanceAddress};

use super::buffer::{str_arg, write_str};
use super::result::{guard, racaffinity_result};

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
        let addr = InstanceAddress { host, port, service, instance };
        let s = match form {
            0 => connect::descriptor(&addr),
            1 => connect::easy_connect(&addr),
            2 => connect::jdbc_descriptor_url(&addr),
            3 => connect::jdbc_easy_connect_url(&addr),
            _ => {
                return Err(super::result::Failure::new(
                    racaffinity_result::InvalidArgument,
                    format!("{form} is not a racaffinity_connect_form"),
                ))
            }
        }?;
        // SAFETY: per this function's contract.
        unsafe { write_str(&s, buf, cap, out_len) }
    })
}
