//! Parsers for Oracle RAC notification text: FAN high-availability events and
//! runtime load-balancing (RLB) advisories.
//!
//! Both arrive as one line of whitespace-separated `key=value` pairs. The parsers are
//! strict about what they understand (version, status, reason, flag values) so that a
//! misread event never moves work, and lenient about keys they do not know so that
//! newer servers adding fields do not break older clients.

use std::collections::HashSet;
use std::str::FromStr;

use crate::error::{Error, Result};

pub mod fan;
pub mod rlb;

pub use fan::{FanEvent, FanEventType, FanReason, FanStatus};
pub use rlb::{RlbAdvisory, RlbEntry, RlbFlag};

/// Longest event line accepted, in bytes. Real events are a few hundred bytes; the
/// cap bounds the work an attacker-controlled or corrupted feed can cause.
pub const MAX_LINE_LEN: usize = 64 * 1024;

/// The only event payload version these parsers understand.
pub const SUPPORTED_VERSION: &str = "1.0";

/// One parsed notification line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A FAN high-availability event (service, instance, node ... up or down).
    Fan(FanEvent),
    /// A runtime load-balancing advisory (`SERVICEMETRICS` payload).
    Rlb(RlbAdvisory),
}

/// Parses one notification line, deciding its kind from its shape.
///
/// A line containing `{` or whose first word is `SERVICEMETRICS` is an RLB
/// advisory; anything else is parsed as a FAN event.
///
/// # Errors
/// [`Error::EventParse`] if the line is empty, too long, or malformed for its kind.
pub fn parse_event(line: &str) -> Result<Event> {
    // Checked before dispatch so the `{` scan below is bounded too.
    check_len(line)?;
    let first = line.split_whitespace().next().unwrap_or("");
    if line.contains('{') || first.eq_ignore_ascii_case(rlb::SERVICEMETRICS) {
        RlbAdvisory::parse(line).map(Event::Rlb)
    } else {
        FanEvent::parse(line).map(Event::Fan)
    }
}

impl FromStr for Event {
    type Err = Error;

    /// Same as [`parse_event`].
    fn from_str(s: &str) -> Result<Self> {
        parse_event(s)
    }
}

fn check_len(line: &str) -> Result<()> {
    if line.len() > MAX_LINE_LEN {
        return Err(Error::event(format!("event line is {} bytes, over the {MAX_LINE_LEN}-byte limit", line.len())));
    }
    Ok(())
}

/// Length cap, trimming, and rejection of input that cannot be a single event line.
fn prepare(line: &str) -> Result<&str> {
    check_len(line)?;
    let line = line.trim();
    if line.is_empty() {
        return Err(Error::event("empty event line"));
    }
    for (at, c) in line.char_indices() {
        if c == '\n' || c == '\r' {
            return Err(Error::event(format!("line break at byte {at}: an event must be a single line")));
        }
        // Tabs are plausible separators; other control characters only come from
        // corruption and would end up in logs verbatim.
        if c.is_control() && c != '\t' {
            return Err(Error::event(format!("control character U+{:04X} at byte {at}", u32::from(c))));
        }
    }
    Ok(line)
}

/// Quotes a fragment of input for an error message, bounded so a 64 KiB garbage
/// value cannot produce a 64 KiB message.
fn show(s: &str) -> String {
    const MAX_CHARS: usize = 48;
    let mut out = String::from("`");
    let mut chars = s.chars();
    out.extend(chars.by_ref().take(MAX_CHARS));
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('`');
    out
}

/// Byte ranges of the whitespace-separated words of `s`.
fn words(s: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(st)) => {
                out.push((st, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(st) = start {
        out.push((st, s.len()));
    }
    out
}

/// A `key=value` pair; `key` is lower-cased because Oracle's keys are case-insensitive.
struct Pair<'a> {
    key: String,
    value: &'a str,
}

/// Collects `key=value` pairs from one or more segments of a line, rejecting
/// duplicate keys across all of them.
#[derive(Default)]
struct Pairs<'a> {
    pairs: Vec<Pair<'a>>,
    // A set rather than a scan of `pairs`: a 64 KiB line can hold ~16k pairs.
    seen: HashSet<String>,
}

impl<'a> Pairs<'a> {
    fn add_segment(&mut self, seg: &'a str) -> Result<()> {
        let ws = words(seg);
        let mut i = 0;
        while i < ws.len() {
            let (start, mut end) = ws[i];
            let word = &seg[start..end];
            let Some(eq) = word.find('=') else {
                return Err(Error::event(format!("expected `key=value`, found {}", show(word))));
            };
            let raw_key = &word[..eq];
            if raw_key.is_empty() {
                return Err(Error::event(format!("missing key before `=` in {}", show(word))));
            }
            if let Some(bad) = raw_key.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))) {
                return Err(Error::event(format!("invalid character {bad:?} in key {}", show(raw_key))));
            }
            let key = raw_key.to_ascii_lowercase();
            if key == "timestamp" {
                // Oracle writes `timestamp=YYYY-MM-DD hh:mm:ss`, with a space, and may
                // follow it with `timezone=...`; so the value runs on until the next word
                // that is itself a `key=value`.
                while let Some(&(next_start, next_end)) = ws.get(i + 1) {
                    if seg[next_start..next_end].contains('=') {
                        break;
                    }
                    end = next_end;
                    i += 1;
                }
            }
            let value = seg[start + eq + 1..end].trim();
            if !self.seen.insert(key.clone()) {
                return Err(Error::event(format!("duplicate key `{raw_key}=`")));
            }
            self.pairs.push(Pair { key, value });
            i += 1;
        }
        Ok(())
    }
}

/// Value of a known field that names something (service, instance, host ...).
fn name_value(key: &str, value: &str) -> Result<String> {
    if value.is_empty() {
        return Err(Error::event(format!("empty value for `{key}=`")));
    }
    if let Some(bad) = value.chars().find(|c| matches!(c, '=' | '{' | '}')) {
        return Err(Error::event(format!("invalid character {bad:?} in `{key}=` value {}", show(value))));
    }
    Ok(value.to_owned())
}

/// Checks `VERSION=`; done before any other field so that an event from a newer
/// protocol is reported as unsupported rather than as a confusing field error.
fn check_version(version: Option<&str>) -> Result<String> {
    match version {
        None => Err(Error::event("missing `VERSION=`")),
        Some(SUPPORTED_VERSION) => Ok(SUPPORTED_VERSION.to_owned()),
        Some(other) => {
            Err(Error::event(format!("unsupported version {} (only `{SUPPORTED_VERSION}` is understood)", show(other))))
        }
    }
}

/// Checks a `timestamp=` value; its format is not interpreted, only carried.
fn timestamp_value(value: &str) -> Result<String> {
    if value.is_empty() {
        return Err(Error::event("empty value for `timestamp=`"));
    }
    Ok(value.to_owned())
}

/// FAN lines the unit tests of this module and of its parsers share.
#[cfg(test)]
pub(crate) mod samples {
    pub(crate) const SM: &str = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 \
                                 status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00";
    pub(crate) const INST: &str = "INSTANCE VERSION=1.0 service=orcl database=orcl instance=orcl1 host=node1 \
                                   status=up reason=BOOT timestamp=2026-11-29 08:00:00";
    pub(crate) const NODE: &str = "NODE VERSION=1.0 host=h2 incarnation=175 status=nodedown reason=member_leave \
                                   timestamp=2026-11-29 08:00:00";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    use super::samples::{INST, NODE, SM};
    const RLB: &str = "VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD \
                       aff=TRUE}{instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } \
                       timestamp=2026-11-29 08:00:00";

    fn assert_parse_err(line: &str) {
        match parse_event(line) {
            Err(e) => assert_eq!(e.kind(), ErrorKind::EventParse, "{line:?}: {e}"),
            Ok(ev) => panic!("expected error for {line:?}, got {ev:?}"),
        }
    }

    #[test]
    fn dispatches_fan_lines() {
        for line in [SM, INST, NODE] {
            match parse_event(line).unwrap() {
                Event::Fan(f) => assert_eq!(f, FanEvent::parse(line).unwrap()),
                other => panic!("{line}: dispatched as {other:?}"),
            }
        }
    }

    #[test]
    fn dispatches_rlb_lines() {
        let plain = parse_event(RLB).unwrap();
        assert_eq!(plain, Event::Rlb(RlbAdvisory::parse(RLB).unwrap()));
        let prefixed = parse_event(&format!("SERVICEMETRICS {RLB}")).unwrap();
        assert_eq!(prefixed, plain);
        let lower = parse_event(&format!("servicemetrics {RLB}")).unwrap();
        assert_eq!(lower, plain);
    }

    #[test]
    fn servicemetrics_without_braces_is_rlb_error() {
        let err = parse_event("SERVICEMETRICS VERSION=1.0 service=svc").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::EventParse);
        assert!(err.to_string().contains('{'), "{err}");
    }

    #[test]
    fn from_str_matches_parse_event() {
        assert_eq!(SM.parse::<Event>().unwrap(), parse_event(SM).unwrap());
        assert_eq!(RLB.parse::<Event>().unwrap(), parse_event(RLB).unwrap());
        assert!("".parse::<Event>().is_err());
    }

    #[test]
    fn rejects_empty_and_oversized() {
        assert_parse_err("");
        assert_parse_err("   \t ");
        let long = format!("{SM} x={}", "a".repeat(MAX_LINE_LEN));
        let err = parse_event(&long).unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
        let long_rlb = format!("{RLB} x={}", "{".repeat(MAX_LINE_LEN));
        assert_parse_err(&long_rlb);
    }

    #[test]
    fn accepts_exactly_max_len() {
        let pad = MAX_LINE_LEN - SM.len() - " pad=".len();
        let line = format!("{SM} pad={}", "a".repeat(pad));
        // `pad=` is a key of its own, so the timestamp value stays intact.
        assert_eq!(line.len(), MAX_LINE_LEN);
        assert!(parse_event(&line).is_ok());
    }

    #[test]
    fn rejects_multi_line_and_control_characters() {
        assert_parse_err(&format!("{SM}\n{INST}"));
        assert_parse_err(&format!("{SM}\r{INST}"));
        assert_parse_err(&SM.replace("host=h2", "host=h\u{7}2"));
        assert_parse_err(&SM.replace("host=h2", "host=h\u{0}2"));
        // Trailing line terminators are what a line reader leaves; they are fine.
        assert!(parse_event(&format!("{SM}\r\n")).is_ok());
        assert!(parse_event(&SM.replace(' ', "\t")).is_ok());
    }

    #[test]
    fn show_truncates_long_fragments() {
        let s = show(&"x".repeat(1000));
        assert!(s.chars().count() < 60, "{s}");
        assert!(s.ends_with("…`"));
        assert_eq!(show("abc"), "`abc`");
    }

    #[test]
    fn words_track_byte_ranges() {
        let s = " a  bc\té ";
        let got: Vec<&str> = words(s).into_iter().map(|(a, b)| &s[a..b]).collect();
        assert_eq!(got, ["a", "bc", "é"]);
        assert!(words("").is_empty());
    }

    /// xorshift64*: deterministic, dependency-free noise for the garbage corpus.
    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn garbage_corpus_never_panics() {
        let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
        // Bytes biased towards the syntax characters so the parser gets past the
        // first word often enough to exercise the deeper paths.
        const ALPHABET: &[u8] = b"{}= \t=={}aZ09_.-:\n\r\x00\x7f\xc3\xa9\xff";
        for _ in 0..4000 {
            let len = noise.below(120);
            let bytes: Vec<u8> = (0..len)
                .map(|_| if noise.below(3) == 0 { noise.next() as u8 } else { ALPHABET[noise.below(ALPHABET.len())] })
                .collect();
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_event(&text);
            let _ = FanEvent::parse(&text);
            let _ = RlbAdvisory::parse(&text);
        }
    }

    #[test]
    fn mutated_valid_lines_never_panic() {
        let mut noise = Noise(42);
        let junk = ['{', '}', '=', ' ', 'x', '\t', 'é', '\u{0}'];
        for base in [SM, INST, NODE, RLB] {
            for _ in 0..1500 {
                let mut chars: Vec<char> = base.chars().collect();
                for _ in 0..1 + noise.below(4) {
                    let at = noise.below(chars.len());
                    match noise.below(3) {
                        0 => {
                            chars.remove(at);
                        }
                        1 => chars.insert(at, junk[noise.below(junk.len())]),
                        _ => chars[at] = junk[noise.below(junk.len())],
                    }
                }
                let text: String = chars.into_iter().collect();
                let _ = parse_event(&text);
            }
        }
    }

    #[test]
    fn truncated_prefixes_never_panic_and_error_without_status() {
        for base in [SM, INST, NODE] {
            let status_end = base.find("status=").unwrap() + "status=".len();
            let value_end = status_end + base[status_end..].find(' ').unwrap();
            for (cut, _) in base.char_indices() {
                let prefix = &base[..cut];
                let res = parse_event(prefix);
                if cut < value_end {
                    assert!(res.is_err(), "prefix {prefix:?} parsed: {res:?}");
                }
            }
            assert!(parse_event(base).is_ok());
        }
    }

    #[test]
    fn truncated_rlb_prefixes_error_until_list_closes() {
        let close = RLB.rfind('}').unwrap();
        for (cut, _) in RLB.char_indices() {
            let prefix = &RLB[..cut];
            let res = parse_event(prefix);
            if cut <= close {
                assert!(res.is_err(), "prefix {prefix:?} parsed: {res:?}");
            }
        }
    }
}
