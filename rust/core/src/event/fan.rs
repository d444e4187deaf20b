//! FAN (Fast Application Notification) high-availability events.
//!
//! Format: the event type, then `key=value` pairs, for example
//! `SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00`.

use std::fmt;

use super::{check_version, name_value, prepare, show, Pairs};
use crate::error::{Error, Result};

/// What a FAN event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FanEventType {
    /// A database service as a whole.
    Service,
    /// One service on one instance.
    ServiceMember,
    /// The database as a whole.
    Database,
    /// One database instance.
    Instance,
    /// A cluster node (host).
    Node,
    /// A TAF pre-connect service's shadow (`SRV_PRECONNECT`, status
    /// `preconn_up`/`preconn_down`): nothing about where work can go.
    SrvPreconnect,
}

impl FanEventType {
    const ALL: [Self; 6] =
        [Self::Service, Self::ServiceMember, Self::Database, Self::Instance, Self::Node, Self::SrvPreconnect];

    /// Lower-case Oracle spelling (Oracle sends it upper-case; parsing ignores case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Service => "service",
            Self::ServiceMember => "servicemember",
            Self::Database => "database",
            Self::Instance => "instance",
            Self::Node => "node",
            Self::SrvPreconnect => "srv_preconnect",
        }
    }

    fn from_token(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for FanEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `status=` of a FAN event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FanStatus {
    /// The resource is up.
    Up,
    /// The resource is down.
    Down,
    /// The node hosting the resource left the cluster.
    NodeDown,
    /// A preconnect (TAF backup) service came up.
    PreconnUp,
    /// A preconnect (TAF backup) service went down.
    PreconnDown,
    /// The resource is down and Clusterware will not restart it.
    NotRestarting,
    /// Clusterware tried to restart the resource and failed.
    RestartFailed,
    /// The server did not know the state.
    Unknown,
}

impl FanStatus {
    const ALL: [Self; 8] = [
        Self::Up,
        Self::Down,
        Self::NodeDown,
        Self::PreconnUp,
        Self::PreconnDown,
        Self::NotRestarting,
        Self::RestartFailed,
        Self::Unknown,
    ];

    /// Lower-case Oracle spelling, e.g. `nodedown`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Up => "up",
            Self::Down => "down",
            Self::NodeDown => "nodedown",
            Self::PreconnUp => "preconn_up",
            Self::PreconnDown => "preconn_down",
            Self::NotRestarting => "not_restarting",
            Self::RestartFailed => "restart_failed",
            Self::Unknown => "unknown",
        }
    }

    fn from_token(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for FanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `reason=` of a FAN event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FanReason {
    /// An administrator (srvctl, SQL) caused it.
    User,
    /// The resource failed.
    Failure,
    /// A resource it depends on changed state.
    Dependency,
    /// No reason given (the literal value `none`).
    None,
    /// Clusterware started it at cluster start.
    Autostart,
    /// Started as part of instance or node boot.
    Boot,
    /// The public network of the node went down.
    PublicNwDown,
    /// The node left the cluster membership.
    MemberLeave,
    /// The server did not know the reason.
    Unknown,
    /// A Data Guard failover moved the database (`data_guard_failover`).
    DataGuardFailover,
    /// Clusterware restarted the resource (`restart`).
    Restart,
}

impl FanReason {
    const ALL: [Self; 11] = [
        Self::User,
        Self::Failure,
        Self::Dependency,
        Self::None,
        Self::Autostart,
        Self::Boot,
        Self::PublicNwDown,
        Self::MemberLeave,
        Self::Unknown,
        Self::DataGuardFailover,
        Self::Restart,
    ];

    /// Lower-case Oracle spelling, e.g. `member_leave`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Failure => "failure",
            Self::Dependency => "dependency",
            Self::None => "none",
            Self::Autostart => "autostart",
            Self::Boot => "boot",
            Self::PublicNwDown => "public_nw_down",
            Self::MemberLeave => "member_leave",
            Self::Unknown => "unknown",
            Self::DataGuardFailover => "data_guard_failover",
            Self::Restart => "restart",
        }
    }

    fn from_token(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for FanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One FAN high-availability event.
///
/// Only the fields routing needs are kept; other keys (`incarnation=`, `timezone=`,
/// `db_domain=` ...) are accepted and dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanEvent {
    /// What the event is about.
    pub event_type: FanEventType,
    /// Payload version; always `1.0` for a parsed event.
    pub version: String,
    /// `service=`, as sent.
    pub service: Option<String>,
    /// `database=` (the database unique name), as sent.
    pub database: Option<String>,
    /// `instance=`; always present for `INSTANCE` and `SERVICEMEMBER` events.
    pub instance: Option<String>,
    /// `host=`; always present for `NODE` events.
    pub host: Option<String>,
    /// New state of the resource.
    pub status: FanStatus,
    /// Why the state changed, if the server said.
    pub reason: Option<FanReason>,
    /// `card=`: number of instances the service now runs on.
    pub card: Option<u32>,
    /// `timestamp=` as sent (for example `2026-11-29 08:00:00`); [`FanEvent::version`] reads it.
    pub timestamp: Option<String>,
    /// `timezone=` as sent (for example `-07:00`): Oracle writes `timestamp=`
    /// in the server's local time and its offset from UTC here.
    pub timezone: Option<String>,
    /// `drain_timeout=` in seconds (Oracle 12.2+, planned maintenance): how
    /// long existing work may keep running on a draining instance.
    pub drain_timeout_s: Option<u32>,
}

impl FanEvent {
    /// The event's version for the join of shared inputs (docs/semantics.md,
    /// "Agreement"): `timestamp=` read as seconds since 1970-01-01 UTC
    /// (`YYYY-MM-DD`, optionally followed by `hh:mm` or `hh:mm:ss`, a space
    /// or `T` between; a fraction of a second is ignored), less the
    /// `timezone=` offset (`±hh:mm`) when there is one: Oracle's lines carry
    /// local time and its offset, Java's simplefan adapter writes UTC, and
    /// the later event must win whoever wrote it. A `timezone=` in another
    /// form is not read (the timestamp counts as UTC). `None` when the event
    /// has no timestamp or one in another form: such an event applies as
    /// the latest word, as before versions.
    pub fn version(&self) -> Option<u64> {
        let local = self.timestamp.as_deref().and_then(timestamp_seconds)?;
        match self.timezone.as_deref().and_then(utc_offset_seconds) {
            Some(offset) => local.checked_add_signed(-offset),
            None => Some(local),
        }
    }

    /// The instant the event names, seconds since 1970 UTC: its
    /// [`version`](Self::version) when the timestamp reads to the second.
    /// A date alone or `hh:mm` names a day or a minute, which orders events
    /// but cannot date a drain's deadline.
    pub fn instant(&self) -> Option<u64> {
        let time = self.timestamp.as_deref()?.trim().split_once([' ', 'T'])?.1;
        let clock = time.split_whitespace().next()?;
        (clock.split('.').next()?.split(':').count() == 3).then(|| self.version()).flatten()
    }

    /// Parses one FAN event line.
    ///
    /// The event type, keys, and the values of `status=` and `reason=` are
    /// case-insensitive; other values are kept as sent. The value
    /// of `timestamp=` extends over following words up to the next `key=value`, since
    /// Oracle puts a space between date and time.
    ///
    /// # Errors
    /// [`Error::EventParse`] if the line is empty or over
    /// [`MAX_LINE_LEN`](super::MAX_LINE_LEN), the event type is not one of `SERVICE`,
    /// `SERVICEMEMBER`, `DATABASE`, `INSTANCE`, `NODE`, a word is not `key=value`, a
    /// key repeats, `VERSION=` is missing or not `1.0`, `status=` is missing or
    /// unknown, `reason=` is unknown, `card=` is not a number, a known field has an
    /// empty value or contains `=`, `{` or `}`, or a field required by
    /// the event type (`instance=` for `INSTANCE`/`SERVICEMEMBER`, `host=` for `NODE`)
    /// is missing.
    pub fn parse(line: &str) -> Result<FanEvent> {
        let line = prepare(line)?;
        if let Some(brace) = line.chars().find(|c| matches!(c, '{' | '}')) {
            return Err(Error::event(format!(
                "unexpected {brace:?} in a FAN event (braces only appear in RLB advisories)"
            )));
        }
        // `prepare` guarantees a non-empty, trimmed line, so there is a first word.
        let split = line.find(char::is_whitespace).unwrap_or(line.len());
        let (first, rest) = line.split_at(split);
        let event_type = match FanEventType::from_token(first) {
            Some(t) => t,
            None if first.contains('=') => {
                return Err(Error::event(format!("missing event type: line starts with {}", show(first))))
            }
            None => {
                return Err(Error::event(format!(
                    "unknown event type {} (expected SERVICE, SERVICEMEMBER, DATABASE, INSTANCE, \
                     NODE or SRV_PRECONNECT)",
                    show(first)
                )))
            }
        };

        let mut pairs = Pairs::default();
        pairs.add_segment(rest)?;
        let mut raw = RawFields::default();
        for p in &pairs.pairs {
            let slot = match p.key.as_str() {
                "version" => &mut raw.version,
                "service" => &mut raw.service,
                "database" => &mut raw.database,
                "instance" => &mut raw.instance,
                "host" => &mut raw.host,
                "status" => &mut raw.status,
                "reason" => &mut raw.reason,
                "card" => &mut raw.card,
                "timestamp" => &mut raw.timestamp,
                "timezone" => &mut raw.timezone,
                "drain_timeout" => &mut raw.drain_timeout,
                _ => continue,
            };
            *slot = Some(p.value);
        }

        let version = check_version(raw.version)?;
        let status = match raw.status {
            None => return Err(Error::event(format!("{first} event is missing `status=`"))),
            Some(s) => FanStatus::from_token(s).ok_or_else(|| Error::event(format!("unknown status {}", show(s))))?,
        };
        let reason = raw
            .reason
            .map(|r| FanReason::from_token(r).ok_or_else(|| Error::event(format!("unknown reason {}", show(r)))))
            .transpose()?;
        let card = raw.card.map(parse_card).transpose()?;
        let drain_timeout_s = raw.drain_timeout.map(|v| parse_count("drain_timeout", v)).transpose()?;
        let opt_name = |key: &str, v: Option<&str>| v.map(|v| name_value(key, v)).transpose();
        let event = FanEvent {
            event_type,
            version,
            service: opt_name("service", raw.service)?,
            database: opt_name("database", raw.database)?,
            instance: opt_name("instance", raw.instance)?,
            host: opt_name("host", raw.host)?,
            status,
            reason,
            card,
            // A known field: `=` in it is refused as in a name (RLB advisories
            // carry theirs unread).
            timestamp: opt_name("timestamp", raw.timestamp)?,
            timezone: raw.timezone.filter(|z| !z.is_empty()).map(str::to_owned),
            drain_timeout_s,
        };

        let required = match event_type {
            FanEventType::Instance | FanEventType::ServiceMember => Some(("instance", event.instance.is_some())),
            FanEventType::Node => Some(("host", event.host.is_some())),
            FanEventType::Service | FanEventType::Database | FanEventType::SrvPreconnect => None,
        };
        if let Some((key, false)) = required {
            return Err(Error::event(format!("{first} event is missing `{key}=`")));
        }
        Ok(event)
    }
}

/// Values of the known keys, before interpretation.
#[derive(Default)]
struct RawFields<'a> {
    version: Option<&'a str>,
    service: Option<&'a str>,
    database: Option<&'a str>,
    instance: Option<&'a str>,
    host: Option<&'a str>,
    status: Option<&'a str>,
    reason: Option<&'a str>,
    card: Option<&'a str>,
    timestamp: Option<&'a str>,
    timezone: Option<&'a str>,
    drain_timeout: Option<&'a str>,
}

fn parse_card(s: &str) -> Result<u32> {
    parse_count("card", s)
}

fn parse_count(key: &str, s: &str) -> Result<u32> {
    // `u32::from_str` would also take `+3`; Oracle never sends a sign.
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::event(format!("invalid `{key}=` value {} (expected a non-negative integer)", show(s))));
    }
    s.parse().map_err(|_| Error::event(format!("`{key}=` value {} is too large", show(s))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    use crate::event::samples::{INST, NODE, SM};

    fn err(line: &str) -> String {
        match FanEvent::parse(line) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::EventParse, "{line:?}: {e}");
                e.to_string()
            }
            Ok(ev) => panic!("expected error for {line:?}, got {ev:?}"),
        }
    }

    fn assert_err_contains(line: &str, needle: &str) {
        let msg = err(line);
        assert!(msg.contains(needle), "error for {line:?} was {msg:?}, expected to contain {needle:?}");
    }

    #[test]
    fn parses_servicemember_example() {
        assert_eq!(
            FanEvent::parse(SM).unwrap(),
            FanEvent {
                event_type: FanEventType::ServiceMember,
                version: "1.0".into(),
                service: Some("svc".into()),
                database: Some("orcl".into()),
                instance: Some("orcl_2".into()),
                host: Some("h2".into()),
                status: FanStatus::Down,
                reason: Some(FanReason::Failure),
                card: Some(1),
                timestamp: Some("2026-11-29 08:00:00".into()),
                timezone: None,
                drain_timeout_s: None,
            }
        );
    }

    #[test]
    fn parses_instance_example() {
        assert_eq!(
            FanEvent::parse(INST).unwrap(),
            FanEvent {
                event_type: FanEventType::Instance,
                version: "1.0".into(),
                service: Some("orcl".into()),
                database: Some("orcl".into()),
                instance: Some("orcl1".into()),
                host: Some("node1".into()),
                status: FanStatus::Up,
                reason: Some(FanReason::Boot),
                card: None,
                timestamp: Some("2026-11-29 08:00:00".into()),
                timezone: None,
                drain_timeout_s: None,
            }
        );
    }

    #[test]
    fn parses_node_example_and_drops_unknown_keys() {
        assert_eq!(
            FanEvent::parse(NODE).unwrap(),
            FanEvent {
                event_type: FanEventType::Node,
                version: "1.0".into(),
                service: None,
                database: None,
                instance: None,
                host: Some("h2".into()),
                status: FanStatus::NodeDown,
                reason: Some(FanReason::MemberLeave),
                card: None,
                timestamp: Some("2026-11-29 08:00:00".into()),
                timezone: None,
                drain_timeout_s: None,
            }
        );
    }

    #[test]
    fn service_and_database_events_need_only_version_and_status() {
        let ev = FanEvent::parse("SERVICE VERSION=1.0 service=svc status=up").unwrap();
        assert_eq!(ev.event_type, FanEventType::Service);
        assert_eq!(ev.service.as_deref(), Some("svc"));
        assert_eq!(ev.reason, None);
        assert_eq!(ev.timestamp, None);
        let ev = FanEvent::parse("DATABASE VERSION=1.0 status=not_restarting").unwrap();
        assert_eq!(ev.event_type, FanEventType::Database);
        assert_eq!(ev.status, FanStatus::NotRestarting);
    }

    #[test]
    fn timestamp_stops_at_next_key_value() {
        let line = "INSTANCE VERSION=1.0 instance=i1 status=up timestamp=2026-11-29 08:00:00 \
                    timezone=+01:00 db_domain=";
        let ev = FanEvent::parse(line).unwrap();
        assert_eq!(ev.timestamp.as_deref(), Some("2026-11-29 08:00:00"));
        // Date-only timestamps and timestamps that are not last are both fine.
        let line = "INSTANCE VERSION=1.0 timestamp=2026-11-29 instance=i1 status=up";
        assert_eq!(FanEvent::parse(line).unwrap().timestamp.as_deref(), Some("2026-11-29"));
        // Runs of whitespace inside the value are kept as sent.
        let line = "INSTANCE VERSION=1.0 instance=i1 status=up timestamp=2026-11-29   08:00:00  ";
        assert_eq!(FanEvent::parse(line).unwrap().timestamp.as_deref(), Some("2026-11-29   08:00:00"));
    }

    #[test]
    fn the_version_is_the_instant_whatever_zone_the_timestamp_was_written_in() {
        let at = |tail: &str| FanEvent::parse(&format!("INSTANCE VERSION=1.0 instance=i1 status=up {tail}")).unwrap();
        let utc = at("timestamp=2026-11-29 15:00:00").version();
        assert_eq!(utc, Some(1_795_939_200 + 7 * 3600));
        assert_eq!(at("timestamp=2026-11-29 08:00:00 timezone=-07:00 db_domain=x").version(), utc);
        assert_eq!(at("timestamp=2026-11-29 20:30:00 timezone=+05:30").version(), utc);
        assert_eq!(at("timestamp=2026-11-29 15:00:00 timezone=+00:00").timezone.as_deref(), Some("+00:00"));
        // An offset in another form is not read: the timestamp counts as UTC.
        for odd in ["PST", "-7", "+07:60", "+15:00", "07:00", "timezone=-07:00:00"] {
            let tail = format!("timestamp=2026-11-29 15:00:00 timezone={}", odd.trim_start_matches("timezone="));
            assert_eq!(at(&tail).version(), utc, "{odd}");
        }
        assert_eq!(at("timezone=-07:00").version(), None, "no timestamp, no version");
        assert_eq!(at("timestamp=1970-01-01 00:00:00 timezone=+01:00").version(), None, "before 1970 UTC");
    }

    #[test]
    fn keys_and_enum_values_are_case_insensitive() {
        let line = "servicemember version=1.0 SERVICE=svc Instance=i1 STATUS=DOWN Reason=Public_NW_Down";
        let ev = FanEvent::parse(line).unwrap();
        assert_eq!(ev.event_type, FanEventType::ServiceMember);
        assert_eq!(ev.service.as_deref(), Some("svc"));
        assert_eq!(ev.instance.as_deref(), Some("i1"));
        assert_eq!(ev.status, FanStatus::Down);
        assert_eq!(ev.reason, Some(FanReason::PublicNwDown));
    }

    #[test]
    fn values_other_than_status_and_reason_keep_their_case() {
        let ev = FanEvent::parse("INSTANCE VERSION=1.0 instance=ORCL_1 host=Node1 status=up").unwrap();
        assert_eq!(ev.instance.as_deref(), Some("ORCL_1"));
        assert_eq!(ev.host.as_deref(), Some("Node1"));
    }

    #[test]
    fn every_status_and_reason_spelling_parses() {
        for status in FanStatus::ALL {
            let line = format!("DATABASE VERSION=1.0 status={}", status.as_str().to_uppercase());
            assert_eq!(FanEvent::parse(&line).unwrap().status, status);
        }
        for reason in FanReason::ALL {
            let line = format!("DATABASE VERSION=1.0 status=up reason={reason}");
            assert_eq!(FanEvent::parse(&line).unwrap().reason, Some(reason));
        }
        for ty in FanEventType::ALL {
            let line = format!("{} VERSION=1.0 instance=i host=h status=up", ty.as_str().to_uppercase());
            assert_eq!(FanEvent::parse(&line).unwrap().event_type, ty);
        }
    }

    #[test]
    fn canonical_spellings() {
        assert_eq!(FanStatus::NodeDown.as_str(), "nodedown");
        assert_eq!(FanStatus::PreconnUp.to_string(), "preconn_up");
        assert_eq!(FanStatus::RestartFailed.to_string(), "restart_failed");
        assert_eq!(FanReason::MemberLeave.as_str(), "member_leave");
        assert_eq!(FanReason::PublicNwDown.to_string(), "public_nw_down");
        assert_eq!(FanReason::None.as_str(), "none");
        assert_eq!(FanEventType::ServiceMember.to_string(), "servicemember");
    }

    #[test]
    fn rejects_empty_line() {
        assert_err_contains("", "empty");
        assert_err_contains(" \t ", "empty");
    }

    #[test]
    fn rejects_unknown_event_types() {
        assert_err_contains("ASM VERSION=1.0 status=up", "unknown event type `ASM`");
        assert_err_contains("SERVICEMETRICS VERSION=1.0 status=up", "unknown event type");
        assert_err_contains("VERSION=1.0 status=up", "missing event type");
        assert_err_contains("{ VERSION=1.0 status=up", "braces");
    }

    #[test]
    fn rejects_missing_or_unsupported_version() {
        assert_err_contains("DATABASE status=up", "missing `VERSION=`");
        assert_err_contains("DATABASE VERSION=2.0 status=up", "unsupported version `2.0`");
        assert_err_contains("DATABASE VERSION=1 status=up", "unsupported version");
        assert_err_contains("DATABASE VERSION= status=up", "unsupported version");
        // Version is judged first so a newer protocol is not misreported.
        assert_err_contains("DATABASE VERSION=2.0 status=sideways", "unsupported version");
    }

    #[test]
    fn rejects_missing_or_unknown_status() {
        assert_err_contains("DATABASE VERSION=1.0 reason=user", "missing `status=`");
        assert_err_contains("DATABASE VERSION=1.0 status=foo", "unknown status `foo`");
        assert_err_contains("DATABASE VERSION=1.0 status=", "unknown status ``");
    }

    #[test]
    fn a_down_after_a_data_guard_failover_or_a_restart_parses() {
        // Oracle documents these reasons for HA events (ODP.NET's
        // HAEventArgs.Reason: Data_Guard_Failover, Restart); refusing them
        // drops the `down` the event carries, and the node keeps its work.
        for (text, reason) in [("Data_Guard_Failover", FanReason::DataGuardFailover), ("RESTART", FanReason::Restart)] {
            let line = format!(
                "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl1 host=h1 status=down \
                 reason={text} timestamp=2026-11-29 08:00:00"
            );
            let ev = FanEvent::parse(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!((ev.status, ev.reason), (FanStatus::Down, Some(reason)));
            assert_eq!(reason.to_string(), text.to_ascii_lowercase());
        }
    }

    #[test]
    fn rejects_unknown_reason_and_bad_card() {
        assert_err_contains("DATABASE VERSION=1.0 status=up reason=cosmic_rays", "unknown reason `cosmic_rays`");
        assert_err_contains("SERVICE VERSION=1.0 status=up card=x", "card");
        assert_err_contains("SERVICE VERSION=1.0 status=up card=-1", "card");
        assert_err_contains("SERVICE VERSION=1.0 status=up card=+1", "card");
        assert_err_contains("SERVICE VERSION=1.0 status=up card=", "card");
        assert_err_contains("SERVICE VERSION=1.0 status=up card=99999999999", "too large");
        let ev = FanEvent::parse("SERVICE VERSION=1.0 status=up card=4294967295").unwrap();
        assert_eq!(ev.card, Some(u32::MAX));
    }

    #[test]
    fn rejects_missing_type_specific_fields() {
        assert_err_contains("INSTANCE VERSION=1.0 host=h status=up", "INSTANCE event is missing `instance=`");
        assert_err_contains("SERVICEMEMBER VERSION=1.0 service=s status=up", "missing `instance=`");
        assert_err_contains("NODE VERSION=1.0 instance=i status=nodedown", "NODE event is missing `host=`");
    }

    #[test]
    fn rejects_duplicate_keys_case_insensitively() {
        assert_err_contains("INSTANCE VERSION=1.0 instance=a instance=b status=up", "duplicate key");
        assert_err_contains("INSTANCE VERSION=1.0 instance=a INSTANCE=a status=up", "duplicate key");
        assert_err_contains("NODE VERSION=1.0 host=h status=up incarnation=1 incarnation=2", "duplicate key");
        assert_err_contains(&format!("{SM} timestamp=x"), "duplicate key");
    }

    #[test]
    fn rejects_malformed_pairs() {
        assert_err_contains("INSTANCE VERSION=1.0 instance=i status=up bogus", "expected `key=value`, found `bogus`");
        assert_err_contains("INSTANCE VERSION=1.0 instance=i status=up =x", "missing key");
        assert_err_contains("INSTANCE VERSION=1.0 instance=i status=up k(x)=1", "invalid character '('");
        assert_err_contains("INSTANCE VERSION=1.0 instance= status=up", "empty value for `instance=`");
        assert_err_contains("INSTANCE VERSION=1.0 instance=a=b status=up", "invalid character '='");
        assert_err_contains("INSTANCE VERSION=1.0 instance=i status=up timestamp=", "empty value for `timestamp=`");
        assert_err_contains("INSTANCE VERSION=1.0 instance=i status=up}", "braces");
    }

    /// `timestamp=` is a known field: with `=` in it (`2026-11-29=08:00:00`,
    /// two pairs run together) it is refused as `instance=a=b` is, not
    /// carried as a timestamp no version can be read from (an event without
    /// a version applies as the latest word).
    #[test]
    fn a_timestamp_holding_an_equals_sign_is_refused() {
        assert_err_contains(
            "INSTANCE VERSION=1.0 instance=i status=down timestamp=2026-11-29=08:00:00",
            "invalid character '=' in `timestamp=`",
        );
    }

    #[test]
    fn unknown_keys_are_ignored_even_when_empty() {
        let with_extra = format!("{INST} db_domain= x-new.key=1 incarn=");
        assert_eq!(FanEvent::parse(&with_extra).unwrap(), FanEvent::parse(INST).unwrap());
    }

    #[test]
    fn truncations_that_drop_status_error() {
        for base in [SM, INST, NODE] {
            let status_at = base.find("status=").unwrap();
            for (cut, _) in base.char_indices().filter(|&(i, _)| i <= status_at + "status=".len()) {
                let msg = err(&base[..cut]);
                assert!(!msg.is_empty());
            }
        }
    }
}

/// `±hh:mm` (Oracle's `timezone=`) as seconds east of UTC.
fn utc_offset_seconds(text: &str) -> Option<i64> {
    let (sign, rest) = match text.trim().as_bytes().first()? {
        b'+' => (1, &text.trim()[1..]),
        b'-' => (-1, &text.trim()[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let two = |s: &str| (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<i64>().ok())?;
    let (h, m) = (two(h)?, two(m)?);
    (h <= 14 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// `YYYY-MM-DD[( |T)hh:mm[:ss[.fff]]]` as seconds since 1970-01-01.
pub(crate) fn timestamp_seconds(text: &str) -> Option<u64> {
    let text = text.trim();
    let (date, time) = match text.find([' ', 'T']) {
        Some(i) => (&text[..i], text[i + 1..].trim()),
        None => (text, ""),
    };
    let num = |s: &str, len: usize| -> Option<u64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let mut d = date.split('-');
    let (y, m, day) = (num(d.next()?, 4)?, num(d.next()?, 2)?, num(d.next()?, 2)?);
    if d.next().is_some() || !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let mut secs = 0;
    if !time.is_empty() {
        // A zone or other trailing word is the publisher's, the same for all.
        let clock = time.split_whitespace().next()?;
        let clock = clock.split('.').next()?;
        let mut t = clock.split(':');
        let (h, mi) = (num(t.next()?, 2)?, num(t.next()?, 2)?);
        let s = match t.next() {
            Some(s) => num(s, 2)?,
            None => 0,
        };
        if t.next().is_some() || h > 23 || mi > 59 || s > 60 {
            return None;
        }
        secs = h * 3600 + mi * 60 + s;
    }
    Some(days_from_civil(y, m, day) * 86_400 + secs)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod version_tests {
    use super::timestamp_seconds;

    #[test]
    fn timestamps_read_as_seconds_since_1970() {
        assert_eq!(timestamp_seconds("1970-01-01"), Some(0));
        assert_eq!(timestamp_seconds("2026-11-29 08:00:00"), Some(1_795_939_200));
        assert_eq!(timestamp_seconds("2000-03-01T00:00:01"), Some(951_868_801));
        assert_eq!(timestamp_seconds("2026-11-29 08:00"), timestamp_seconds("2026-11-29 08:00:00"));
        assert_eq!(timestamp_seconds("2026-11-29   08:00:01.250 UTC"), timestamp_seconds("2026-11-29 08:00:01"));
        for bad in ["", "x", "2026-13-01", "26-11-29", "2026-11-29 8:00", "2026-11-29 08:00:00:00", "2026-11-29 24:00"]
        {
            assert_eq!(timestamp_seconds(bad), None, "{bad}");
        }
    }
}
