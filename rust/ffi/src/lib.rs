//! `libracaffinity`: the one native library that C programs link, the JAR
//! bundles and Python loads. It converts arguments, calls the core and maps
//! errors; it holds no routing logic.
//!
//! Module layout: `capi/` holds the C ABI, one module per concept; the JNI
//! exports live beside it in `jni/`; `ops` holds the body of each operation
//! both offer, so the two layers only convert arguments and map errors.
//!
//! Safety contract at the boundary (see the README's C section):
//! - every function may be called from many threads at once;
//! - NULL arguments, stale/foreign/freed handles, invalid UTF-8 and oversized
//!   inputs return result codes, never undefined behaviour;
//! - no panic crosses the boundary: it becomes `RACAFFINITY_RESULT_PANIC`.

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_camel_case_types)]

pub mod capi;
pub mod jni;
mod ops;
