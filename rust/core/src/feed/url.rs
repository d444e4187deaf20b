//! `topology.feed`: where a cluster's shared inputs come from.

use crate::error::{Error, Result};

/// Most etcd members one feed URL may name.
pub const MAX_FEED_ENDPOINTS: usize = 16;

/// A parsed `etcd://host:port[,host:port…]/prefix` (the prefix must not be
/// empty; a trailing `/` is added when missing).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FeedUrl {
    /// The etcd members' client addresses, `host:port`.
    pub endpoints: Vec<String>,
    /// The key prefix every record lives under, ending in `/`.
    pub prefix: String,
}

impl FeedUrl {
    /// Parses the text form; errors name the config key `topology.feed`.
    pub fn parse(text: &str) -> Result<FeedUrl> {
        let bad = |why: String| Error::config("topology.feed", why);
        let rest = text.strip_prefix("etcd://").ok_or_else(|| {
            bad(format!("expected etcd://host:port[,host:port…]/prefix, got `{}`", text.escape_debug()))
        })?;
        let (hosts, path) = rest
            .split_once('/')
            .ok_or_else(|| bad(format!("no key prefix in `{}` (etcd://host:port/prefix)", text.escape_debug())))?;
        let mut endpoints = Vec::new();
        for ep in hosts.split(',') {
            let ep = ep.trim();
            let (host, port) =
                ep.rsplit_once(':').ok_or_else(|| bad(format!("`{}` has no :port", ep.escape_debug())))?;
            let host_ok = !host.is_empty()
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
            if !host_ok {
                return Err(bad(format!("bad host `{}`", host.escape_debug())));
            }
            // Digits only: `parse` also takes a leading `+`.
            match port.parse::<u16>() {
                Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {}
                _ => return Err(bad(format!("bad port `{}` in `{}`", port.escape_debug(), ep.escape_debug()))),
            }
            endpoints.push(ep.to_string());
        }
        if endpoints.len() > MAX_FEED_ENDPOINTS {
            return Err(bad(format!("{} endpoints; at most {MAX_FEED_ENDPOINTS}", endpoints.len())));
        }
        let path = path.trim_end_matches('/');
        if path.is_empty() {
            return Err(bad("the key prefix is empty (etcd://host:port/racaffinity/<cluster>)".into()));
        }
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(bad(format!("the key prefix `{}` has spaces or control characters", path.escape_debug())));
        }
        Ok(FeedUrl { endpoints, prefix: format!("{path}/") })
    }
}

impl std::fmt::Display for FeedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd://{}/{}", self.endpoints.join(","), self.prefix.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_and_prefix() {
        let u = FeedUrl::parse("etcd://127.0.0.1:2379, localhost:2381/racaffinity/orders/").unwrap();
        assert_eq!(u.endpoints, ["127.0.0.1:2379", "localhost:2381"]);
        assert_eq!(u.prefix, "racaffinity/orders/");
        assert_eq!(u.to_string(), "etcd://127.0.0.1:2379,localhost:2381/racaffinity/orders");
        assert_eq!(FeedUrl::parse(&u.to_string()).unwrap(), u);
    }

    #[test]
    fn refuses_malformed_urls_naming_the_key() {
        for bad in [
            "",
            "http://127.0.0.1:2379/p",
            "etcd://127.0.0.1:2379",
            "etcd://127.0.0.1:2379/",
            "etcd://127.0.0.1/p",
            "etcd://127.0.0.1:0/p",
            "etcd://127.0.0.1:99999/p",
            // A port is digits (RFC 3986), as in a node's address.
            "etcd://127.0.0.1:+2379/p",
            "etcd://:2379/p",
            "etcd://a b:1/p",
            "etcd://h:1/a b",
        ] {
            let e = FeedUrl::parse(bad).unwrap_err();
            assert!(matches!(&e, Error::Config { key, .. } if key == "topology.feed"), "{bad}: {e}");
        }
    }
}
