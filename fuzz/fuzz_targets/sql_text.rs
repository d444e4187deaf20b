//! Transaction control in SQL text: `TransactionControl::of_bytes` on
//! arbitrary bytes (what the C ABI and JNI hand it: any length, any
//! encoding that keeps ASCII).
//!
//! Properties (docs/continuity.md, "Transaction control in SQL text"):
//! - never a panic, whatever the bytes;
//! - valid UTF-8 reads the same through `of(&str)`;
//! - text that opens no quote, comment or dollar-quoted body cannot hide a
//!   statement after it: `text;COMMIT` is `Commit`, and `text;SELECT 1` reads
//!   as `text` alone (a statement that controls nothing changes nothing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use racaffinity::TransactionControl;

fuzz_target!(|data: &[u8]| {
    let control = TransactionControl::of_bytes(data);
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(TransactionControl::of(text), control, "{text:?}");
    }
    if !data.iter().any(|b| matches!(b, b'\'' | b'"' | b'$' | b'-' | b'/')) {
        let mut commit = data.to_vec();
        commit.extend_from_slice(b";COMMIT");
        assert_eq!(TransactionControl::of_bytes(&commit), TransactionControl::Commit, "{data:?}");
        let mut select = data.to_vec();
        select.extend_from_slice(b";SELECT 1");
        assert_eq!(TransactionControl::of_bytes(&select), control, "{data:?}");
    }
});
