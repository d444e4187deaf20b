//! Which Oracle errors mean "this instance is gone".
//!
//! [`INSTANCE_GONE`] is the one table. An error whose code is in it makes
//! [`OracleNodePools`](crate::OracleNodePools) report a node failure
//! ([`Outcome::Failed`](racaffinity::Outcome::Failed)); every other error is an
//! error of the unit of work and says nothing about the node.
//!
//! This module does not need the `oracle` crate: hosts whose Oracle errors come
//! from elsewhere (an ORA code in a log line, another driver) can classify codes
//! with [`is_instance_gone`].

use std::fmt;

/// An Oracle error code: a database/Net error `ORA-nnnnn` or an ODPI-C error
/// `DPI-nnnn` (the layer the `oracle` crate is built on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OracleCode {
    /// `ORA-nnnnn`: from the database, the listener or Oracle Net.
    Ora(i32),
    /// `DPI-nnnn`: from ODPI-C.
    Dpi(i32),
}

impl OracleCode {
    /// Whether this code is in [`INSTANCE_GONE`].
    pub fn is_instance_gone(self) -> bool {
        INSTANCE_GONE.iter().any(|g| g.code == self)
    }
}

impl fmt::Display for OracleCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OracleCode::Ora(n) => write!(f, "ORA-{n:05}"),
            OracleCode::Dpi(n) => write!(f, "DPI-{n:04}"),
        }
    }
}

/// One entry of [`INSTANCE_GONE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoneCode {
    /// The code.
    pub code: OracleCode,
    /// Oracle's message text for it.
    pub message: &'static str,
}

const fn ora(code: i32, message: &'static str) -> GoneCode {
    GoneCode { code: OracleCode::Ora(code), message }
}

/// Errors that mean the instance (or the path to it) is gone: the instance is
/// shutting down, starting or dead, its listener does not answer or does not
/// offer it, or the connection to it broke. The one table; sorted by code.
///
/// `DPI-1080` ("connection was closed by ORA-n") is ODPI-C wrapping the error
/// that killed a connection. When its message names that `ORA-n`, the wrapped
/// code decides (`ORA-00028` "your session has been killed" is not an instance
/// failure; `ORA-03113` is); when it names none, the entry here counts.
pub const INSTANCE_GONE: &[GoneCode] = &[
    ora(1033, "ORACLE initialization or shutdown in progress"),
    ora(1034, "ORACLE not available"),
    ora(1089, "immediate shutdown or close in progress"),
    ora(1092, "ORACLE instance terminated. Disconnection forced"),
    ora(3113, "end-of-file on communication channel"),
    ora(3114, "not connected to ORACLE"),
    ora(3135, "connection lost contact"),
    ora(12153, "TNS:not connected"),
    ora(12170, "TNS:Connect timeout occurred"),
    ora(12514, "TNS:listener does not currently know of service requested in connect descriptor"),
    ora(12521, "TNS:listener does not currently know of instance requested in connect descriptor"),
    ora(12528, "TNS:listener: all appropriate instances are blocking new connections"),
    ora(12535, "TNS:operation timed out"),
    ora(12537, "TNS:connection closed"),
    ora(12541, "TNS:no listener"),
    ora(12543, "TNS:destination host unreachable"),
    ora(12547, "TNS:lost contact"),
    ora(12570, "TNS:packet reader failure"),
    ora(12571, "TNS:packet writer failure"),
    ora(25408, "can not safely replay call"),
    GoneCode { code: OracleCode::Dpi(1080), message: "connection was closed by ORA-%d" },
];

/// Whether `ORA-<code>` means the instance is gone (is in [`INSTANCE_GONE`]).
///
/// ```
/// use racaffinity_oracle::is_instance_gone;
/// assert!(is_instance_gone(3113));   // end-of-file on communication channel
/// assert!(!is_instance_gone(1));     // unique constraint violated
/// ```
pub fn is_instance_gone(code: i32) -> bool {
    OracleCode::Ora(code).is_instance_gone()
}

/// Classifies an ODPI-C or Oracle message by its leading code, with the
/// `DPI-1080` rule of [`INSTANCE_GONE`]. For messages as ODPI-C words them:
/// `"ORA-03113: end-of-file on communication channel"`,
/// `"DPI-1080: connection was closed by ORA-3113"`. Messages without a leading
/// code are not classified (`false`).
///
/// ```
/// use racaffinity_oracle::is_instance_gone_message;
/// assert!(is_instance_gone_message("ORA-12541: TNS:no listener"));
/// assert!(is_instance_gone_message("DPI-1080: connection was closed by ORA-3113"));
/// assert!(!is_instance_gone_message("DPI-1080: connection was closed by ORA-28"));
/// assert!(!is_instance_gone_message("ORA-00942: table or view does not exist"));
/// ```
pub fn is_instance_gone_message(message: &str) -> bool {
    match leading_code(message) {
        Some(code) => classify(code, message),
        None => false,
    }
}

/// The rule: table membership, refined for `DPI-1080` by the wrapped code.
pub(crate) fn classify(code: OracleCode, message: &str) -> bool {
    if code == OracleCode::Dpi(1080) {
        if let Some(wrapped) = wrapped_ora_code(message) {
            return is_instance_gone(wrapped);
        }
    }
    code.is_instance_gone()
}

/// The code at the start of `message` (`ORA-03113: …`, `DPI-1080: …`).
pub(crate) fn leading_code(message: &str) -> Option<OracleCode> {
    let (make, rest): (fn(i32) -> OracleCode, &str) = if let Some(r) = message.strip_prefix("ORA-") {
        (OracleCode::Ora, r)
    } else if let Some(r) = message.strip_prefix("DPI-") {
        (OracleCode::Dpi, r)
    } else {
        return None;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 9 || !rest[digits..].starts_with(':') {
        return None;
    }
    rest[..digits].parse().ok().map(make)
}

/// The `n` of `… closed by ORA-n` in a DPI-1080 message's first line.
fn wrapped_ora_code(message: &str) -> Option<i32> {
    let first_line = message.lines().next()?;
    let at = first_line.find("by ORA-")? + "by ORA-".len();
    let digits: String = first_line[at..].chars().take_while(char::is_ascii_digit).take(9).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_codes_are_in_the_table() {
        for code in [3113, 3114, 3135, 12514, 12541, 1033, 1089, 1092, 25408] {
            assert!(is_instance_gone(code), "ORA-{code}");
        }
        assert!(OracleCode::Dpi(1080).is_instance_gone());
    }

    #[test]
    fn table_is_sorted_and_unique() {
        for w in INSTANCE_GONE.windows(2) {
            assert!(w[0].code < w[1].code, "{:?} before {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn work_errors_are_not_gone() {
        // unique constraint, no such table, bad credentials, session killed,
        // idle timeout, deadlock, snapshot too old, in-doubt lock, 2PC misroute.
        for code in [1, 942, 1017, 28, 2396, 60, 1555, 1591, 24756, 2049, 0, -1] {
            assert!(!is_instance_gone(code), "ORA-{code}");
        }
        assert!(!OracleCode::Dpi(1047).is_instance_gone());
        assert!(!OracleCode::Dpi(1010).is_instance_gone());
        assert!(!OracleCode::Dpi(3113).is_instance_gone(), "DPI and ORA numbers are different spaces");
    }

    #[test]
    fn display() {
        assert_eq!(OracleCode::Ora(3113).to_string(), "ORA-03113");
        assert_eq!(OracleCode::Ora(25408).to_string(), "ORA-25408");
        assert_eq!(OracleCode::Dpi(1080).to_string(), "DPI-1080");
    }

    #[test]
    fn leading_codes() {
        assert_eq!(leading_code("ORA-03113: end-of-file"), Some(OracleCode::Ora(3113)));
        assert_eq!(leading_code("DPI-1047: Cannot locate"), Some(OracleCode::Dpi(1047)));
        assert_eq!(leading_code("ORA-3113 no colon"), None);
        assert_eq!(leading_code("ORA-: x"), None);
        assert_eq!(leading_code("OCI Error: ORA-03113: x"), None);
        assert_eq!(leading_code("ORA-99999999999: overflow"), None);
        assert_eq!(leading_code(""), None);
    }

    #[test]
    fn dpi_1080_uses_the_wrapped_code() {
        assert!(is_instance_gone_message(
            "DPI-1080: connection was closed by ORA-3113\nORA-03113: end-of-file on communication channel"
        ));
        assert!(is_instance_gone_message("DPI-1080: connection was closed by ORA-03135"));
        assert!(!is_instance_gone_message(
            "DPI-1080: connection was closed by ORA-28\nORA-00028: your session has been killed"
        ));
        assert!(!is_instance_gone_message("DPI-1080: connection was closed by ORA-2396"));
        // No wrapped code: the table entry counts.
        assert!(is_instance_gone_message("DPI-1080: connection was closed"));
        // Only the first line's wrapped code counts.
        assert!(is_instance_gone_message("DPI-1080: connection was closed\nclosed by ORA-00028"));
    }

    #[test]
    fn messages_without_a_leading_code_are_not_classified() {
        assert!(!is_instance_gone_message("end-of-file on communication channel"));
        assert!(!is_instance_gone_message("ORA-20001: app said ORA-03113"));
    }
}
