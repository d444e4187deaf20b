//! Runtime load-balancing (RLB) advisories: the payload of `SERVICEMETRICS` events.
//!
//! Format: header `key=value` pairs, one brace-delimited list of brace-delimited
//! entries, then trailing pairs, for example
//! `VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD aff=TRUE}{instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } timestamp=2026-11-29 08:00:00`.

use std::collections::HashSet;
use std::fmt;

use super::{check_version, name_value, prepare, show, timestamp_value, Pairs};
use crate::error::{Error, Result};

/// Most entries accepted in one advisory; a RAC database has at most a few hundred
/// instances, so more is corruption.
pub const MAX_RLB_ENTRIES: usize = 4096;

/// Event type word that may precede the advisory payload.
pub(super) const SERVICEMETRICS: &str = "SERVICEMETRICS";

/// Service quality the server reports for one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RlbFlag {
    /// The instance meets the service's goals.
    Good,
    /// The instance violates the service's goals.
    Violating,
    /// No work has run there recently, so there is nothing to measure.
    NoData,
    /// The server does not know.
    Unknown,
    /// The instance does not accept new work for the service.
    Blocked,
}

impl RlbFlag {
    const ALL: [Self; 5] = [Self::Good, Self::Violating, Self::NoData, Self::Unknown, Self::Blocked];

    /// Lower-case Oracle spelling, e.g. `no_data` (Oracle sends it upper-case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Good => "good",
            Self::Violating => "violating",
            Self::NoData => "no_data",
            Self::Unknown => "unknown",
            Self::Blocked => "blocked",
        }
    }

    fn from_token(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for RlbFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The advice for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlbEntry {
    /// Instance name, as sent.
    pub instance: String,
    /// Share of new work to send there, 0 to 100.
    pub percent: u8,
    /// Service quality there.
    pub flag: RlbFlag,
    /// Whether the server advises keeping affinity to this instance (`aff=`; `true`
    /// when absent, as older servers do not send it).
    pub aff: bool,
}

/// One RLB advisory for a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlbAdvisory {
    /// Payload version; always `1.0` for a parsed advisory.
    pub version: String,
    /// `database=`, as sent.
    pub database: Option<String>,
    /// `service=`, as sent.
    pub service: Option<String>,
    /// One entry per instance, in the order sent; never empty, instances distinct.
    pub entries: Vec<RlbEntry>,
    /// `timestamp=` as sent; not interpreted.
    pub timestamp: Option<String>,
}

impl RlbAdvisory {
    /// Parses one advisory line, optionally prefixed with `SERVICEMETRICS`.
    ///
    /// Keys and the values of `flag=` and `aff=` are case-insensitive.
    ///
    /// # Errors
    /// [`Error::EventParse`] if the line is empty or over
    /// [`MAX_LINE_LEN`](super::MAX_LINE_LEN), `VERSION=` is missing or not `1.0`,
    /// braces are unbalanced, nested deeper than list/entry, or there is more than one
    /// list or text between entries; if the list is empty or has more than
    /// [`MAX_RLB_ENTRIES`] entries; if an entry lacks `instance=`, `percent=` or
    /// `flag=`, has a percent outside 0..=100, an unknown flag, an `aff=` other than
    /// TRUE/FALSE, or repeats an instance (compared ignoring ASCII case); or if any
    /// key repeats within the header or within an entry.
    pub fn parse(line: &str) -> Result<RlbAdvisory> {
        let line = prepare(line)?;
        let layout = Layout::scan(line)?;

        let mut header = layout.header;
        let first_end = header.find(char::is_whitespace).unwrap_or(header.len());
        if header[..first_end].eq_ignore_ascii_case(SERVICEMETRICS) {
            header = &header[first_end..];
        }
        let mut pairs = Pairs::default();
        pairs.add_segment(header)?;
        pairs.add_segment(layout.trailer)?;
        let (mut version, mut database, mut service, mut timestamp) = (None, None, None, None);
        for p in &pairs.pairs {
            match p.key.as_str() {
                "version" => version = Some(p.value),
                "database" => database = Some(p.value),
                "service" => service = Some(p.value),
                "timestamp" => timestamp = Some(p.value),
                _ => {}
            }
        }
        let version = check_version(version)?;

        if layout.entries.is_empty() {
            return Err(Error::event("advisory has no entries"));
        }
        let mut entries = Vec::with_capacity(layout.entries.len());
        // Case-insensitive because Oracle instance names are; `ORCL1` and `orcl1`
        // would be the same instance given two different shares.
        let mut instances = HashSet::with_capacity(layout.entries.len());
        for (i, body) in layout.entries.iter().enumerate() {
            let entry = parse_entry(i + 1, body)?;
            if !instances.insert(entry.instance.to_ascii_lowercase()) {
                return Err(Error::event(format!(
                    "duplicate instance {} in advisory (entry {})",
                    show(&entry.instance),
                    i + 1
                )));
            }
            entries.push(entry);
        }

        Ok(RlbAdvisory {
            version,
            database: database.map(|v| name_value("database", v)).transpose()?,
            service: service.map(|v| name_value("service", v)).transpose()?,
            entries,
            timestamp: timestamp.map(timestamp_value).transpose()?,
        })
    }
}

/// The brace structure of an advisory line, before any pair is interpreted.
struct Layout<'a> {
    header: &'a str,
    entries: Vec<&'a str>,
    trailer: &'a str,
}

impl<'a> Layout<'a> {
    fn scan(line: &'a str) -> Result<Self> {
        let open = line.find(['{', '}']).ok_or_else(|| Error::event("missing `{` entry list"))?;
        if line[open..].starts_with('}') {
            return Err(Error::event("unbalanced braces: `}` before any `{`"));
        }
        let header = &line[..open];

        let mut entries = Vec::new();
        // Braces are ASCII, so byte positions found here are always char boundaries.
        let mut pos = open + 1;
        let close = loop {
            let rest = &line[pos..];
            let skipped = rest.len() - rest.trim_start().len();
            pos += skipped;
            let rest = &line[pos..];
            match rest.chars().next() {
                None => return Err(Error::event("unbalanced braces: entry list is not closed")),
                Some('}') => break pos,
                Some('{') => {
                    let body_start = pos + 1;
                    let end = line[body_start..].find(['{', '}']).map(|i| body_start + i).ok_or_else(|| {
                        Error::event(format!("unbalanced braces: entry {} is not closed", entries.len() + 1))
                    })?;
                    if line[end..].starts_with('{') {
                        return Err(Error::event(format!("nested braces inside entry {}", entries.len() + 1)));
                    }
                    if entries.len() == MAX_RLB_ENTRIES {
                        return Err(Error::event(format!("advisory has more than {MAX_RLB_ENTRIES} entries")));
                    }
                    entries.push(&line[body_start..end]);
                    pos = end + 1;
                }
                Some(_) => {
                    let word = rest.split(|c: char| c.is_whitespace() || c == '{' || c == '}').next().unwrap_or(rest);
                    return Err(Error::event(format!(
                        "unexpected {} between entries (expected `{{` or `}}`)",
                        show(word)
                    )));
                }
            }
        };

        let trailer = &line[close + 1..];
        match trailer.chars().find(|c| matches!(c, '{' | '}')) {
            Some('{') => Err(Error::event("more than one entry list")),
            Some(_) => Err(Error::event("unbalanced braces: extra `}` after the entry list")),
            None => Ok(Layout { header, entries, trailer }),
        }
    }
}

fn parse_entry(n: usize, body: &str) -> Result<RlbEntry> {
    let mut pairs = Pairs::default();
    pairs.add_segment(body).map_err(|e| Error::event(format!("entry {n}: {}", strip_prefix(e))))?;
    let (mut instance, mut percent, mut flag, mut aff) = (None, None, None, None);
    for p in &pairs.pairs {
        match p.key.as_str() {
            "instance" => instance = Some(p.value),
            "percent" => percent = Some(p.value),
            "flag" => flag = Some(p.value),
            "aff" => aff = Some(p.value),
            _ => {}
        }
    }
    let missing = |key: &str| Error::event(format!("entry {n} is missing `{key}=`"));
    let instance = instance.ok_or_else(|| missing("instance"))?;
    let instance =
        name_value("instance", instance).map_err(|e| Error::event(format!("entry {n}: {}", strip_prefix(e))))?;
    let percent = parse_percent(percent.ok_or_else(|| missing("percent"))?).ok_or_else(|| {
        Error::event(format!(
            "entry {n}: invalid `percent=` value {} (expected an integer 0 to 100)",
            show(percent.unwrap_or(""))
        ))
    })?;
    let flag = flag.ok_or_else(|| missing("flag"))?;
    let flag =
        RlbFlag::from_token(flag).ok_or_else(|| Error::event(format!("entry {n}: unknown flag {}", show(flag))))?;
    let aff = match aff {
        None => true,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(Error::event(format!("entry {n}: invalid `aff=` value {} (expected TRUE or FALSE)", show(v))))
        }
    };
    Ok(RlbEntry { instance, percent, flag, aff })
}

/// Message of an `EventParse` error, so entry context can be prepended to it.
fn strip_prefix(e: Error) -> String {
    match e {
        Error::EventParse(m) => m,
        other => other.to_string(),
    }
}

fn parse_percent(s: &str) -> Option<u8> {
    // Digits only: `u8::from_str` would also take `+50`.
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u8>().ok().filter(|&p| p <= 100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const RLB: &str = "VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD \
                       aff=TRUE}{instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } \
                       timestamp=2026-11-29 08:00:00";

    fn expected() -> RlbAdvisory {
        RlbAdvisory {
            version: "1.0".into(),
            database: Some("orcl".into()),
            service: Some("svc".into()),
            entries: vec![
                RlbEntry { instance: "orcl2".into(), percent: 50, flag: RlbFlag::Good, aff: true },
                RlbEntry { instance: "orcl1".into(), percent: 50, flag: RlbFlag::Unknown, aff: false },
            ],
            timestamp: Some("2026-11-29 08:00:00".into()),
        }
    }

    fn one(entry: &str) -> String {
        format!("VERSION=1.0 service=svc {{ {entry} }}")
    }

    fn err(line: &str) -> String {
        match RlbAdvisory::parse(line) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::EventParse, "{line:?}: {e}");
                e.to_string()
            }
            Ok(adv) => panic!("expected error for {line:?}, got {adv:?}"),
        }
    }

    fn assert_err_contains(line: &str, needle: &str) {
        let msg = err(line);
        assert!(msg.contains(needle), "error for {line:?} was {msg:?}, expected to contain {needle:?}");
    }

    #[test]
    fn parses_documented_example() {
        assert_eq!(RlbAdvisory::parse(RLB).unwrap(), expected());
    }

    #[test]
    fn accepts_servicemetrics_prefix_in_any_case() {
        assert_eq!(RlbAdvisory::parse(&format!("SERVICEMETRICS {RLB}")).unwrap(), expected());
        assert_eq!(RlbAdvisory::parse(&format!("ServiceMetrics\t{RLB}")).unwrap(), expected());
    }

    #[test]
    fn spacing_around_braces_is_free() {
        let tight = "VERSION=1.0 database=orcl service=svc \
                     {{instance=orcl2 percent=50 flag=GOOD aff=TRUE} \
                     { instance=orcl1  percent=50 flag=UNKNOWN aff=FALSE }}\
                     timestamp=2026-11-29 08:00:00";
        assert_eq!(RlbAdvisory::parse(tight).unwrap(), expected());
    }

    #[test]
    fn header_fields_may_follow_the_list_and_timestamp_may_precede_it() {
        let line = "VERSION=1.0 timestamp=2026-11-29 08:00:00 { {instance=orcl2 percent=50 flag=GOOD}\
                    {instance=orcl1 percent=50 flag=UNKNOWN aff=false} } service=svc database=orcl";
        assert_eq!(RlbAdvisory::parse(line).unwrap(), expected());
    }

    #[test]
    fn aff_defaults_to_true_and_ignores_case() {
        let adv = RlbAdvisory::parse(&one("{instance=a percent=0 flag=good}")).unwrap();
        assert!(adv.entries[0].aff);
        let adv = RlbAdvisory::parse(&one("{instance=a percent=0 flag=good aff=False}")).unwrap();
        assert!(!adv.entries[0].aff);
        let adv = RlbAdvisory::parse(&one("{instance=a percent=0 flag=good aff=tRUE}")).unwrap();
        assert!(adv.entries[0].aff);
    }

    #[test]
    fn every_flag_parses_and_has_canonical_spelling() {
        for flag in RlbFlag::ALL {
            let upper = flag.as_str().to_uppercase();
            let adv = RlbAdvisory::parse(&one(&format!("{{instance=a percent=1 flag={upper}}}"))).unwrap();
            assert_eq!(adv.entries[0].flag, flag);
        }
        assert_eq!(RlbFlag::NoData.as_str(), "no_data");
        assert_eq!(RlbFlag::Violating.to_string(), "violating");
        assert_eq!(RlbFlag::Blocked.to_string(), "blocked");
    }

    #[test]
    fn percent_bounds() {
        for (text, want) in [("0", 0), ("100", 100), ("007", 7)] {
            let adv = RlbAdvisory::parse(&one(&format!("{{instance=a percent={text} flag=GOOD}}"))).unwrap();
            assert_eq!(adv.entries[0].percent, want);
        }
        for bad in ["101", "255", "256", "-1", "+5", "5.0", "", "x", "1000"] {
            assert_err_contains(&one(&format!("{{instance=a percent={bad} flag=GOOD}}")), "percent");
        }
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let line = format!("SERVICEMETRICS {RLB} timezone=+00:00 db_domain=");
        assert_eq!(RlbAdvisory::parse(&line).unwrap(), expected());
        let adv = RlbAdvisory::parse(&one("{instance=a percent=5 flag=GOOD extra=1}")).unwrap();
        assert_eq!(adv.entries, vec![RlbEntry { instance: "a".into(), percent: 5, flag: RlbFlag::Good, aff: true }]);
    }

    #[test]
    fn rejects_version_problems() {
        assert_err_contains("service=svc { {instance=a percent=5 flag=GOOD} }", "missing `VERSION=`");
        assert_err_contains("VERSION=2.0 { {instance=a percent=5 flag=GOOD} }", "unsupported version");
        // Version is judged before entries so a newer format is reported as such.
        assert_err_contains("VERSION=2.0 { {instance=a percent=500 flag=NEW} }", "unsupported version");
    }

    #[test]
    fn rejects_missing_entry_fields() {
        assert_err_contains(&one("{percent=5 flag=GOOD}"), "entry 1 is missing `instance=`");
        assert_err_contains(&one("{instance=a flag=GOOD}"), "entry 1 is missing `percent=`");
        assert_err_contains(&one("{instance=a percent=5}"), "entry 1 is missing `flag=`");
        assert_err_contains(&one("{instance=a percent=5 flag=GOOD}{}"), "entry 2 is missing `instance=`");
        assert_err_contains(&one("{instance= percent=5 flag=GOOD}"), "entry 1: empty value for `instance=`");
    }

    #[test]
    fn rejects_bad_entry_values() {
        assert_err_contains(&one("{instance=a percent=5 flag=SUPERB}"), "unknown flag `SUPERB`");
        assert_err_contains(&one("{instance=a percent=5 flag=GOOD aff=yes}"), "invalid `aff=` value `yes`");
        assert_err_contains(&one("{instance=a percent=5 flag=GOOD flag=BAD}"), "entry 1: duplicate key `flag=`");
        assert_err_contains(&one("{instance=a percent=5 flag=GOOD junk}"), "entry 1: expected `key=value`");
    }

    #[test]
    fn rejects_duplicate_instances() {
        assert_err_contains(
            &one("{instance=a percent=5 flag=GOOD}{instance=b percent=5 flag=GOOD}\
                 {instance=a percent=1 flag=GOOD}"),
            "duplicate instance `a` in advisory (entry 3)",
        );
        assert_err_contains(
            &one("{instance=orcl1 percent=5 flag=GOOD}{instance=ORCL1 percent=5 flag=GOOD}"),
            "duplicate instance",
        );
    }

    #[test]
    fn rejects_no_entries() {
        assert_err_contains("VERSION=1.0 service=svc { }", "no entries");
        assert_err_contains("VERSION=1.0 service=svc {}", "no entries");
        assert_err_contains("VERSION=1.0 service=svc", "missing `{`");
        assert_err_contains("SERVICEMETRICS", "missing `{`");
    }

    #[test]
    fn rejects_brace_garbage() {
        let cases = [
            ("VERSION=1.0 { {instance=a percent=5 flag=GOOD}", "entry list is not closed"),
            ("VERSION=1.0 { {instance=a percent=5 flag=GOOD", "entry 1 is not closed"),
            ("VERSION=1.0 } {instance=a percent=5 flag=GOOD} }", "`}` before any `{`"),
            ("VERSION=1.0 { {instance=a percent=5 flag=GOOD} } }", "extra `}`"),
            ("VERSION=1.0 { {instance=a percent=5 flag=GOOD} } { }", "more than one entry list"),
            ("VERSION=1.0 { {instance=a {percent=5} flag=GOOD} }", "nested braces inside entry 1"),
            ("VERSION=1.0 { {{instance=a percent=5 flag=GOOD}} }", "nested braces"),
            ("VERSION=1.0 { junk {instance=a percent=5 flag=GOOD} }", "unexpected `junk` between entries"),
            ("VERSION=1.0 { {instance=a percent=5 flag=GOOD} x=1 }", "unexpected `x=1` between entries"),
            ("VERSION=1.0 {", "not closed"),
            ("{", "not closed"),
            ("}", "before any"),
            ("{}{}", "more than one entry list"),
        ];
        for (line, needle) in cases {
            assert_err_contains(line, needle);
        }
    }

    #[test]
    fn rejects_bad_header() {
        assert_err_contains(
            "SERVICE VERSION=1.0 { {instance=a percent=5 flag=GOOD} }",
            "expected `key=value`, found `SERVICE`",
        );
        assert_err_contains(
            "VERSION=1.0 service=a service=b { {instance=a percent=5 flag=GOOD} }",
            "duplicate key `service=`",
        );
        assert_err_contains("VERSION=1.0 service=a { {instance=a percent=5 flag=GOOD} } SERVICE=b", "duplicate key");
        assert_err_contains("VERSION=1.0 service= { {instance=a percent=5 flag=GOOD} }", "empty value for `service=`");
        assert_err_contains("", "empty");
    }

    #[test]
    fn entry_cap() {
        // Valid entries are ~30 bytes, so the line cap admits fewer than MAX_RLB_ENTRIES
        // of them; the entry cap still bounds the structural scan of tiny `{}` entries.
        let at_cap = "{}".repeat(MAX_RLB_ENTRIES);
        assert_err_contains(&format!("VERSION=1.0 {{{at_cap}}}"), "entry 1 is missing `instance=`");
        let over = "{}".repeat(MAX_RLB_ENTRIES + 1);
        assert_err_contains(&format!("VERSION=1.0 {{{over}}}"), "more than 4096 entries");

        let entry = |i: usize| format!("{{instance=i{i} percent=0 flag=NO_DATA}}");
        let many: String = (0..1500).map(entry).collect();
        let adv = RlbAdvisory::parse(&format!("VERSION=1.0 {{{many}}}")).unwrap();
        assert_eq!(adv.entries.len(), 1500);
        assert_eq!(adv.entries[1499].instance, "i1499");
    }
}
