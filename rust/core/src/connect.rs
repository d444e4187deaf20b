//! Oracle connect strings that pin a connection to one RAC instance.
//!
//! Each node pool connects to exactly one instance. Naming the instance
//! (`INSTANCE_NAME`) makes the listener hand the connection to that instance instead of
//! balancing it server-side, which would defeat client-side affinity.
//!
//! Every part is validated against a strict character set before it is spliced into
//! the string: these strings are parsed by Oracle Net, and a value containing `)`,
//! `=` or `/` could otherwise rewrite the descriptor (for example an instance named
//! `X)(INSTANCE_NAME=Y`).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};

/// Address of one instance's listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstanceAddress<'a> {
    /// DNS name, IPv4 address, or IPv6 address (bare `::1` or bracketed `[::1]`).
    pub host: &'a str,
    /// Listener port, 1 to 65535.
    pub port: u16,
    /// Database service name.
    pub service: &'a str,
    /// Instance name (`INSTANCE_NAME`) to pin the connection to.
    pub instance: &'a str,
}

impl InstanceAddress<'_> {
    /// Checks every field against the rules the builders apply.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first invalid field and why.
    pub fn validate(&self) -> Result<()> {
        self.checked().map(|_| ())
    }

    fn checked(&self) -> Result<Host<'_>> {
        let host = check_host(self.host)?;
        if self.port == 0 {
            return Err(invalid("port 0 is not a valid listener port (expected 1 to 65535)"));
        }
        check_service(self.service)?;
        check_instance(self.instance)?;
        Ok(host)
    }
}

/// Full connect descriptor, exactly
/// `(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=h)(PORT=p)))(CONNECT_DATA=(SERVICE_NAME=s)(INSTANCE_NAME=i)))`.
///
/// An IPv6 host is written without brackets, as Oracle's documentation writes
/// descriptor addresses (`(HOST=2001:db8::1)`); the parentheses already delimit it.
///
/// # Errors
/// [`Error::InvalidArgument`] if any field is invalid (see [`InstanceAddress::validate`]).
pub fn descriptor(addr: &InstanceAddress<'_>) -> Result<String> {
    let host = addr.checked()?;
    Ok(format!(
        "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST={})(PORT={})))\
         (CONNECT_DATA=(SERVICE_NAME={})(INSTANCE_NAME={})))",
        host.text, addr.port, addr.service, addr.instance
    ))
}

/// Easy Connect string `host:port/service/instance`, with an IPv6 host bracketed
/// (`[::1]:1521/svc/inst`) because Easy Connect requires it.
///
/// # Errors
/// [`Error::InvalidArgument`] if any field is invalid (see [`InstanceAddress::validate`]).
pub fn easy_connect(addr: &InstanceAddress<'_>) -> Result<String> {
    let host = addr.checked()?;
    Ok(format!("{}:{}/{}/{}", host.for_url(), addr.port, addr.service, addr.instance))
}

/// JDBC thin URL carrying the full descriptor: `jdbc:oracle:thin:@` + [`descriptor`].
///
/// # Errors
/// [`Error::InvalidArgument`] if any field is invalid (see [`InstanceAddress::validate`]).
pub fn jdbc_descriptor_url(addr: &InstanceAddress<'_>) -> Result<String> {
    Ok(format!("jdbc:oracle:thin:@{}", descriptor(addr)?))
}

/// JDBC thin Easy Connect URL: `jdbc:oracle:thin:@//host:port/service/instance`.
///
/// # Errors
/// [`Error::InvalidArgument`] if any field is invalid (see [`InstanceAddress::validate`]).
pub fn jdbc_easy_connect_url(addr: &InstanceAddress<'_>) -> Result<String> {
    Ok(format!("jdbc:oracle:thin:@//{}", easy_connect(addr)?))
}

/// Splits `host:port`, `host`, `[ipv6]:port` or `[ipv6]` into a host and a port,
/// using `default_port` when none is given. The returned host has no brackets.
///
/// A bare IPv6 address is refused even without a port: in `2001:db8::1:1521` the
/// last group could be meant as the port, and guessing would connect somewhere else.
///
/// # Errors
/// [`Error::InvalidArgument`] if the host is invalid (see [`InstanceAddress::host`]),
/// the port is not a number in 1..=65535, brackets are malformed, or no port is given
/// and `default_port` is 0.
pub fn split_host_port(s: &str, default_port: u16) -> Result<(&str, u16)> {
    if s.is_empty() {
        return Err(invalid("host:port is empty"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let close =
            rest.find(']').ok_or_else(|| invalid(format!("host {} has `[` without a closing `]`", quote(s))))?;
        let host = &rest[..close];
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(invalid(format!("host {} in brackets is not a valid IPv6 address", quote(host))));
        }
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => {
                return Err(invalid(format!(
                    "unexpected {} after `]` in {} (expected `:port`)",
                    quote(after),
                    quote(s)
                )))
            }
        };
        (host, port)
    } else {
        let mut parts = s.splitn(3, ':');
        let host = parts.next().unwrap_or("");
        let port = parts.next();
        if parts.next().is_some() {
            return Err(invalid(format!(
                "{} has more than one `:`; write an IPv6 host in brackets, e.g. `[::1]:1521`",
                quote(s)
            )));
        }
        check_host_name_or_v4(host)?;
        (host, port)
    };
    let port = match port {
        Some(p) => parse_port(p)?,
        None if default_port == 0 => return Err(invalid(format!("no port in {} and no default port", quote(s)))),
        None => default_port,
    };
    Ok((host, port))
}

/// A validated host, without brackets.
struct Host<'a> {
    text: &'a str,
    v6: bool,
}

impl Host<'_> {
    fn for_url(&self) -> String {
        if self.v6 {
            format!("[{}]", self.text)
        } else {
            self.text.to_owned()
        }
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// Quotes a value for an error message; `Debug` escapes control and quote characters
/// so hostile input cannot forge log lines, and the length is bounded.
fn quote(s: &str) -> String {
    const MAX_CHARS: usize = 64;
    if s.chars().count() <= MAX_CHARS {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX_CHARS).collect();
        format!("{head:?}…")
    }
}

fn check_host(host: &str) -> Result<Host<'_>> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| invalid(format!("host {} has `[` without a closing `]`", quote(host))))?;
        return if inner.parse::<Ipv6Addr>().is_ok() {
            Ok(Host { text: inner, v6: true })
        } else {
            Err(invalid(format!("host {} in brackets is not a valid IPv6 address", quote(inner))))
        };
    }
    // `Ipv6Addr` parsing admits only hex digits, `:` and `.`, so a successful parse
    // cannot smuggle anything into the string; zone ids (`%eth0`) do not parse.
    if host.contains(':') && host.parse::<Ipv6Addr>().is_ok() {
        return Ok(Host { text: host, v6: true });
    }
    check_host_name_or_v4(host)?;
    Ok(Host { text: host, v6: false })
}

fn check_host_name_or_v4(host: &str) -> Result<()> {
    const MAX_LEN: usize = 253;
    const MAX_LABEL: usize = 63;
    if host.is_empty() {
        return Err(invalid("host is empty"));
    }
    if let Some(bad) = host.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))) {
        let hint = if bad == ':' { " (an IPv6 address must be valid, e.g. `::1`)" } else { "" };
        return Err(invalid(format!(
            "invalid character {bad:?} in host {}: allowed are letters, digits, `-` and `.`, \
             or an IP address{hint}",
            quote(host)
        )));
    }
    // An all-numeric name would be read as an IPv4 address by resolvers, so it must
    // be a valid one rather than silently a different host.
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return match host.parse::<Ipv4Addr>() {
            Ok(_) => Ok(()),
            Err(_) => Err(invalid(format!("host {} is not a valid IPv4 address", quote(host)))),
        };
    }
    if host.len() > MAX_LEN {
        return Err(invalid(format!("host name is {} characters, over the {MAX_LEN}-character limit", host.len())));
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Err(invalid(format!("host {} has an empty label (`..` or a leading/trailing `.`)", quote(host))));
        }
        if label.len() > MAX_LABEL {
            return Err(invalid(format!(
                "host {} has a label of {} characters, over the {MAX_LABEL}-character limit",
                quote(host),
                label.len()
            )));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid(format!("host {} has a label starting or ending with `-`", quote(host))));
        }
    }
    Ok(())
}

fn parse_port(p: &str) -> Result<u16> {
    // Digits only, so `+1521` or ` 1521` are refused rather than silently accepted.
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(format!("port {} is not a number", quote(p))));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid(format!("port {} is out of range (expected 1 to 65535)", quote(p)))),
        Ok(port) => Ok(port),
    }
}

fn check_service(s: &str) -> Result<()> {
    check_name(
        "service name",
        s,
        128,
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '$' | '#'),
        "letters, digits, `_`, `.`, `-`, `$` and `#`",
    )
}

fn check_instance(s: &str) -> Result<()> {
    check_name(
        "instance name",
        s,
        64,
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '#'),
        "letters, digits, `_`, `$` and `#`",
    )?;
    if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(invalid(format!("instance name {} must start with a letter", quote(s))));
    }
    Ok(())
}

fn check_name(field: &str, s: &str, max: usize, allowed: impl Fn(char) -> bool, allowed_desc: &str) -> Result<()> {
    if s.is_empty() {
        return Err(invalid(format!("{field} is empty")));
    }
    if let Some(bad) = s.chars().find(|&c| !allowed(c)) {
        return Err(invalid(format!("invalid character {bad:?} in {field} {}: allowed are {allowed_desc}", quote(s))));
    }
    // Checked after the characters, so the length below counts ASCII bytes = chars.
    if s.len() > max {
        return Err(invalid(format!("{field} is {} characters, over the {max}-character limit", s.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const SEED: InstanceAddress<'static> =
        InstanceAddress { host: "MYDBHOST1", port: 1522, service: "MYDB", instance: "MYDB1" };

    fn with<'a>(f: impl FnOnce(&mut InstanceAddress<'a>)) -> InstanceAddress<'a> {
        let mut a: InstanceAddress<'a> = SEED;
        f(&mut a);
        a
    }

    /// Every builder must refuse `addr`, with a message containing `needle`.
    fn assert_rejected(addr: InstanceAddress<'_>, needle: &str) {
        let results = [
            addr.validate().map(|_| String::new()),
            descriptor(&addr),
            easy_connect(&addr),
            jdbc_descriptor_url(&addr),
            jdbc_easy_connect_url(&addr),
        ];
        for r in results {
            let e = r.expect_err(&format!("{addr:?} was accepted"));
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{addr:?}: {e}");
            assert!(e.to_string().contains(needle), "{addr:?}: {e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn seed_example_descriptor() {
        assert_eq!(
            descriptor(&SEED).unwrap(),
            "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))\
             (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"
        );
    }

    #[test]
    fn seed_example_easy_connect() {
        assert_eq!(easy_connect(&SEED).unwrap(), "MYDBHOST1:1522/MYDB/MYDB1");
    }

    #[test]
    fn seed_example_jdbc() {
        assert_eq!(
            jdbc_descriptor_url(&SEED).unwrap(),
            "jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))\
             (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"
        );
        assert_eq!(jdbc_easy_connect_url(&SEED).unwrap(), "jdbc:oracle:thin:@//MYDBHOST1:1522/MYDB/MYDB1");
    }

    #[test]
    fn descriptor_has_no_spaces() {
        assert!(!descriptor(&SEED).unwrap().contains(char::is_whitespace));
    }

    #[test]
    fn full_range_of_valid_values() {
        let a = InstanceAddress {
            host: "db-1.rac.example.com",
            port: 65535,
            service: "sales.example.com$X#1-a_b",
            instance: "orcl_1$#",
        };
        assert_eq!(easy_connect(&a).unwrap(), "db-1.rac.example.com:65535/sales.example.com$X#1-a_b/orcl_1$#");
        let a = with(|a| {
            a.host = "10.0.0.7";
            a.port = 1;
        });
        assert_eq!(easy_connect(&a).unwrap(), "10.0.0.7:1/MYDB/MYDB1");
        assert!(descriptor(&a).unwrap().contains("(HOST=10.0.0.7)(PORT=1)"));
    }

    #[test]
    fn ipv6_is_bracketed_in_easy_connect_only() {
        for host in ["2001:db8::1", "[2001:db8::1]"] {
            let a = with(|a| a.host = host);
            assert_eq!(easy_connect(&a).unwrap(), "[2001:db8::1]:1522/MYDB/MYDB1");
            assert_eq!(jdbc_easy_connect_url(&a).unwrap(), "jdbc:oracle:thin:@//[2001:db8::1]:1522/MYDB/MYDB1");
            assert_eq!(
                descriptor(&a).unwrap(),
                "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=2001:db8::1)(PORT=1522)))\
                 (CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))"
            );
        }
        let a = with(|a| a.host = "::ffff:10.0.0.1");
        assert_eq!(easy_connect(&a).unwrap(), "[::ffff:10.0.0.1]:1522/MYDB/MYDB1");
    }

    #[test]
    fn rejects_injection_attempts() {
        assert_rejected(with(|a| a.instance = "X)(INSTANCE_NAME=Y"), "invalid character ')' in instance name");
        assert_rejected(with(|a| a.service = "S)(SERVER=dedicated"), "invalid character ')' in service name");
        assert_rejected(with(|a| a.host = "h)(PORT=1"), "invalid character ')' in host");
        assert_rejected(with(|a| a.service = "MYDB/OTHER"), "invalid character '/' in service name");
        assert_rejected(with(|a| a.instance = "MYDB1/X"), "invalid character '/'");
        assert_rejected(with(|a| a.service = "A:dedicated"), "invalid character ':'");
        assert_rejected(with(|a| a.host = "user@host"), "invalid character '@' in host");
        assert_rejected(with(|a| a.service = "a=b"), "invalid character '='");
        assert_rejected(with(|a| a.instance = "A B"), "invalid character ' '");
        assert_rejected(with(|a| a.instance = "A\"B"), "invalid character '\"'");
        assert_rejected(with(|a| a.service = "A'B"), "invalid character '\\''");
        assert_rejected(with(|a| a.instance = "A\nB"), "invalid character '\\n'");
        assert_rejected(with(|a| a.host = "h\u{0}"), "invalid character '\\0' in host");
        assert_rejected(with(|a| a.service = "MÜDB"), "invalid character 'Ü'");
        assert_rejected(with(|a| a.instance = "ORCL(1"), "invalid character '('");
    }

    #[test]
    fn error_messages_escape_the_value() {
        let e = with(|a| a.instance = "A\nB").validate().unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(r#""A\nB""#), "{e}");
    }

    #[test]
    fn rejects_bad_hosts() {
        assert_rejected(with(|a| a.host = ""), "host is empty");
        assert_rejected(with(|a| a.host = "a..b"), "empty label");
        assert_rejected(with(|a| a.host = ".a"), "empty label");
        assert_rejected(with(|a| a.host = "a."), "empty label");
        assert_rejected(with(|a| a.host = "-a.b"), "`-`");
        assert_rejected(with(|a| a.host = "a-.b"), "`-`");
        assert_rejected(with(|a| a.host = "under_score"), "invalid character '_' in host");
        assert_rejected(with(|a| a.host = "999.1.1.1"), "not a valid IPv4 address");
        assert_rejected(with(|a| a.host = "1.2.3"), "not a valid IPv4 address");
        assert_rejected(with(|a| a.host = "01.2.3.4"), "not a valid IPv4 address");
        assert_rejected(with(|a| a.host = "[::1"), "without a closing");
        assert_rejected(with(|a| a.host = "[h1]"), "not a valid IPv6 address");
        assert_rejected(with(|a| a.host = "fe80::1%eth0"), "invalid character");
        assert_rejected(with(|a| a.host = "1:2:3"), "invalid character ':'");
        assert_rejected(with(|a| a.host = "host:1521"), "invalid character ':' in host");
        let long_label = "a".repeat(64);
        let long_label = long_label.as_str();
        assert_rejected(with(|a| a.host = long_label), "63-character limit");
        let ok_label = "a".repeat(63);
        assert!(with(|a| a.host = ok_label.as_str()).validate().is_ok());
        let max_host = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join(".");
        assert_eq!(max_host.len(), 253);
        assert!(with(|a| a.host = max_host.as_str()).validate().is_ok());
        let long_host = format!("{max_host}e");
        assert_rejected(with(|a| a.host = long_host.as_str()), "253-character limit");
    }

    #[test]
    fn rejects_bad_port() {
        assert_rejected(with(|a| a.port = 0), "port 0");
    }

    #[test]
    fn service_rules() {
        assert_rejected(with(|a| a.service = ""), "service name is empty");
        let max = "s".repeat(128);
        assert!(with(|a| a.service = max.as_str()).validate().is_ok());
        let over = "s".repeat(129);
        assert_rejected(with(|a| a.service = over.as_str()), "128-character limit");
        // Service names, unlike instance names, may start with anything allowed.
        assert!(with(|a| a.service = "1svc").validate().is_ok());
        assert!(with(|a| a.service = "SYS$USERS").validate().is_ok());
    }

    #[test]
    fn instance_rules() {
        assert_rejected(with(|a| a.instance = ""), "instance name is empty");
        assert_rejected(with(|a| a.instance = "1orcl"), "must start with a letter");
        assert_rejected(with(|a| a.instance = "_orcl"), "must start with a letter");
        assert_rejected(with(|a| a.instance = "orcl.1"), "invalid character '.' in instance name");
        assert_rejected(with(|a| a.instance = "orcl-1"), "invalid character '-' in instance name");
        let max = format!("i{}", "1".repeat(63));
        assert!(with(|a| a.instance = max.as_str()).validate().is_ok());
        let over = format!("i{}", "1".repeat(64));
        assert_rejected(with(|a| a.instance = over.as_str()), "64-character limit");
    }

    #[test]
    fn errors_name_the_field() {
        let e = with(|a| a.service = "a b").validate().unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument(
                "invalid character ' ' in service name \"a b\": allowed are letters, digits, \
             `_`, `.`, `-`, `$` and `#`"
                    .into()
            )
        );
    }

    #[test]
    fn split_host_port_forms() {
        assert_eq!(split_host_port("MYDBHOST1:1522", 1521).unwrap(), ("MYDBHOST1", 1522));
        assert_eq!(split_host_port("MYDBHOST1", 1521).unwrap(), ("MYDBHOST1", 1521));
        assert_eq!(split_host_port("10.1.2.3:65535", 1521).unwrap(), ("10.1.2.3", 65535));
        assert_eq!(split_host_port("[::1]:1522", 1521).unwrap(), ("::1", 1522));
        assert_eq!(split_host_port("[2001:db8::7]", 1521).unwrap(), ("2001:db8::7", 1521));
        // A split result feeds straight into the builders.
        let (host, port) = split_host_port("[::1]:1522", 1521).unwrap();
        let a = InstanceAddress { host, port, service: "MYDB", instance: "MYDB1" };
        assert_eq!(easy_connect(&a).unwrap(), "[::1]:1522/MYDB/MYDB1");
    }

    #[test]
    fn split_host_port_errors() {
        let cases = [
            ("", 1521, "empty"),
            ("h:", 1521, "port \"\" is not a number"),
            ("h:abc", 1521, "not a number"),
            ("h:+1521", 1521, "not a number"),
            ("h: 1521", 1521, "not a number"),
            ("h:0", 1521, "out of range"),
            ("h:65536", 1521, "out of range"),
            ("h:99999999999999999999", 1521, "out of range"),
            ("h", 0, "no port"),
            (":1521", 1521, "host is empty"),
            ("::1", 1521, "more than one `:`"),
            ("2001:db8::1:1521", 1521, "brackets"),
            ("[::1", 1521, "without a closing"),
            ("[::1]1521", 1521, "expected `:port`"),
            ("[host]:1521", 1521, "not a valid IPv6 address"),
            ("[]:1521", 1521, "not a valid IPv6 address"),
            ("h)(x:1521", 1521, "invalid character ')' in host"),
            ("h h:1521", 1521, "invalid character ' ' in host"),
            (" h:1521", 1521, "invalid character ' '"),
        ];
        for (input, default, needle) in cases {
            let e = split_host_port(input, default).expect_err(input);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{input}: {e}");
            assert!(e.to_string().contains(needle), "{input:?}: {e} lacks {needle:?}");
        }
    }
}
