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
            // A node's address rules (an IPv6 host in brackets, a port of
            // digits): a member these refuse is one no call could reach,
            // and the cluster would start with its feed never connected.
            if let Err(e) = crate::connect::split_host_port(ep, 0) {
                let why = match e {
                    Error::InvalidArgument(m) => m,
                    other => other.to_string(),
                };
                return Err(bad(format!("bad member `{}`: {why}", ep.escape_debug())));
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
        let v6 = FeedUrl::parse("etcd://[::1]:2379,[fe80::1]:2380/p").unwrap();
        assert_eq!(v6.endpoints, ["[::1]:2379", "[fe80::1]:2380"]);
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
            // A member no call could reach: an IPv6 host goes in brackets
            // (as in a node's address), and must be an IPv6 address there.
            "etcd://::1:2379/p",
            "etcd://fe80::1:2379/p",
            "etcd://[::1:2379/p",
            "etcd://[zz]:2379/p",
            "etcd://h]:2379/p",
            "etcd://[::1]x:2379/p",
        ] {
            let e = FeedUrl::parse(bad).unwrap_err();
            assert!(matches!(&e, Error::Config { key, .. } if key == "topology.feed"), "{bad}: {e}");
        }
    }
}
