//! Oracle per-instance connect strings, built by the core so that no binding
//! re-implements them.

use std::os::raw::c_char;

use racaffinity_core::connect::{self, InstanceAddress};

use super::buffer::{str_arg, write_str};
use super::result::c_enum;
use super::result::{guard, racaffinity_result, Failure};

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

impl racaffinity_connect_form {
    /// The connect string of this form for `addr`, built by the core (for C
    /// and Java alike).
    pub(crate) fn build(self, addr: &InstanceAddress<'_>) -> Result<String, Failure> {
        use racaffinity_connect_form::*;
        Ok(match self {
            Descriptor => connect::descriptor(addr),
            EasyConnect => connect::easy_connect(addr),
            JdbcDescriptor => connect::jdbc_descriptor_url(addr),
            JdbcEasyConnect => connect::jdbc_easy_connect_url(addr),
        }?)
    }
}

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
    let s = racaffinity_connect_form::try_from(form)?.build(addr)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::result::code_of;
    use racaffinity_core::ErrorKind;

    #[test]
    fn every_connect_form_builds_its_form() {
        let addr = InstanceAddress { host: "h", port: 1521, service: "svc", instance: "I1" };
        let got = |f: racaffinity_connect_form| f.build(&addr).unwrap();
        assert!(got(racaffinity_connect_form::Descriptor).starts_with("(DESCRIPTION="));
        assert_eq!(got(racaffinity_connect_form::EasyConnect), "h:1521/svc/I1");
        assert!(got(racaffinity_connect_form::JdbcDescriptor).starts_with("jdbc:oracle:thin:@(DESCRIPTION="));
        assert_eq!(got(racaffinity_connect_form::JdbcEasyConnect), "jdbc:oracle:thin:@//h:1521/svc/I1");
        let bad = InstanceAddress { host: "h)", ..addr };
        assert_eq!(racaffinity_connect_form::Descriptor.build(&bad).unwrap_err().code, {
            code_of(ErrorKind::InvalidArgument)
        });
    }
}
