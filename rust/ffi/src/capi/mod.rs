//! The C ABI. Names follow `racaffinity_<noun>_<verb>`; every call returns a
//! [`result::racaffinity_result`] and writes outputs through out-pointers.

pub mod buffer;
mod call;
pub mod cluster;
pub mod connect;
pub mod continuity;
pub mod data;
pub mod epoch;
pub mod event;
mod fork;
pub mod handle;
pub mod metrics;
pub mod pick;
pub mod request;
pub mod result;
pub mod session;
#[cfg(feature = "testing")]
pub mod testing;
pub mod token;
pub mod transaction;
pub mod types;
pub mod ucp;
