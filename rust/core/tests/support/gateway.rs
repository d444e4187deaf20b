//! An etcd v3 JSON gateway stand-in (no etcd) for the feed's tests: it
//! answers what a test scripts, including what no etcd member would.
//!
//! One file for the subscriber's unit tests (`src/feed.rs` takes it with
//! `#[path]` under `cfg(test)`) and `tests/feed_hostile.rs`: a crate's unit
//! tests cannot reach its integration tests' modules, and a test-only
//! module of the library would not be built for the integration tests.
//! So it uses nothing of the crate: std and `serde_json` only.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Standard base64 with padding (the gateway's encoding of `bytes` fields),
/// written again here so a defect of the crate's own is not mirrored.
pub fn b64(data: &[u8]) -> String {
    const B: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() { B[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
        }
    }
    out
}

/// One request as the stand-in read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    /// The JSON body (`Null` when it is not JSON).
    pub body: Value,
}

/// Reads one request (its header block and `Content-Length` body); `None`
/// when the client went away first.
pub fn read_request(s: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let len = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            let body = serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap_or(Value::Null);
            return Some(Request { path, body });
        }
    }
}

/// A range answer's or a watch event's `kv` of a put at `rev`.
pub fn kv(key: &str, value: &str, rev: u64) -> String {
    format!(
        r#"{{"key":"{}","value":"{}","mod_revision":"{rev}","create_revision":"{rev}"}}"#,
        b64(key.as_bytes()),
        b64(value.as_bytes())
    )
}

/// A range's answer, as etcd gives it, from a store at `rev` holding these
/// `(key, value, mod_revision)` records: `min_mod_revision` leaves older
/// records out, `keys_only` the values. The range's keys are not looked at:
/// the store holds one prefix.
pub fn range_of(req: &Request, rev: u64, store: &[(&str, &str, u64)]) -> String {
    let min = req.body.get("min_mod_revision").and_then(Value::as_str).and_then(|m| m.parse().ok()).unwrap_or(0);
    let keys_only = req.body.get("keys_only") == Some(&Value::Bool(true));
    let kvs: Vec<String> = store
        .iter()
        .filter(|(_, _, r)| *r >= min)
        .map(|(k, v, r)| {
            if keys_only {
                format!(r#"{{"key":"{}","mod_revision":"{r}","create_revision":"{r}"}}"#, b64(k.as_bytes()))
            } else {
                kv(k, v, *r)
            }
        })
        .collect();
    format!(r#"{{"header":{{"revision":"{rev}"}},"kvs":[{}],"count":"{}"}}"#, kvs.join(","), store.len())
}

/// A watch event deleting `key` at `rev`.
pub fn deletion(key: &str, rev: u64) -> String {
    format!(r#"{{"type":"DELETE","kv":{{"key":"{}","mod_revision":"{rev}"}}}}"#, b64(key.as_bytes()))
}

/// One chunk of the chunked transfer coding.
pub fn chunk(msg: &str) -> Vec<u8> {
    format!("{:x}\r\n{msg}\r\n", msg.len()).into_bytes()
}

/// A watch message of puts (`kv`s) at `header`.
pub fn events(header: u64, kvs: &[String]) -> String {
    let evs: Vec<String> = kvs.iter().map(|k| format!(r#"{{"kv":{k}}}"#)).collect();
    raw_events(header, &evs)
}

/// A watch message of whole events (`{"kv":…}` or [`deletion`]) at `header`.
pub fn raw_events(header: u64, evs: &[String]) -> String {
    format!("{{\"result\":{{\"header\":{{\"revision\":\"{header}\"}},\"events\":[{}]}}}}\n", evs.join(","))
}

/// A whole answer of `status` (`"200 OK"`, `"503 Unavailable"`) with a
/// `Content-Length` body.
pub fn respond(s: &mut TcpStream, status: &str, body: &str) -> bool {
    s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).is_ok()
}

/// Starts a watch's chunked answer with its `created` message at `rev`.
pub fn open_watch(s: &mut TcpStream, rev: u64) -> bool {
    let created = format!("{{\"result\":{{\"header\":{{\"revision\":\"{rev}\"}},\"created\":true}}}}\n");
    let mut head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    head.extend(chunk(&created));
    s.write_all(&head).is_ok()
}

/// Holds a watch open and silent until the client goes away.
pub fn silent(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    let _ = s.read(&mut b);
}

/// A member that answers each request with `answer`, one thread per
/// connection; its endpoint.
pub fn member(answer: impl Fn(&mut TcpStream, &Request) + Send + Sync + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = l.local_addr().unwrap().to_string();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                if let Some(req) = read_request(&mut s) {
                    answer(&mut s, &req);
                }
            });
        }
    });
    endpoint
}

/// A member that takes every request whole and never answers (cut off
/// after the request reached it): its endpoint, and how many it took.
pub fn silent_member() -> (String, Arc<AtomicUsize>) {
    let took = Arc::new(AtomicUsize::new(0));
    let counted = took.clone();
    let endpoint = member(move |s, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        while s.read(&mut [0u8; 4096]).is_ok_and(|n| n > 0) {}
    });
    (endpoint, took)
}

/// What a range answers (the JSON body of a 200): from the request and how
/// many ranges were asked so far (1 for the first).
pub type RangeScript = dyn Fn(&Request, usize) -> String + Send + Sync;

/// A watch's whole answer, written by the script: from the request and how
/// many watches were opened so far (1 for the first).
pub type WatchScript = dyn Fn(&mut TcpStream, &Request, usize) + Send + Sync;

/// A running stand-in (one thread per connection, for the test process's
/// life) and what it counted.
pub struct Gateway {
    pub endpoint: String,
    pub puts: Arc<AtomicUsize>,
    pub ranges: Arc<AtomicUsize>,
    pub watches: Arc<AtomicUsize>,
    /// Every range asked, in order, with the size of its answer's body.
    pub range_log: Arc<Mutex<Vec<(Request, usize)>>>,
}

impl Gateway {
    /// A range answers `range`; a watch runs `watch`; a put or a txn
    /// answers revision 9, succeeded (counted in `puts`); anything else 404.
    pub fn start(range: Arc<RangeScript>, watch: Arc<WatchScript>) -> Gateway {
        let not_found = |s: &mut TcpStream, _: &Request, _: usize| {
            respond(s, "404 Not Found", "");
        };
        Gateway::start_with(range, watch, Arc::new(not_found))
    }

    /// As [`Gateway::start`], with any other path (`/v3/lease/keepalive`, …)
    /// answered by `other` (with how many such requests came so far).
    pub fn start_with(range: Arc<RangeScript>, watch: Arc<WatchScript>, other: Arc<WatchScript>) -> Gateway {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = l.local_addr().unwrap().to_string();
        let gw = Gateway {
            endpoint,
            puts: Arc::new(AtomicUsize::new(0)),
            ranges: Arc::new(AtomicUsize::new(0)),
            watches: Arc::new(AtomicUsize::new(0)),
            range_log: Arc::new(Mutex::new(Vec::new())),
        };
        let (puts, ranges, watches) = (gw.puts.clone(), gw.ranges.clone(), gw.watches.clone());
        let range_log = gw.range_log.clone();
        let others = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut s) = conn else { continue };
                let (range, watch) = (range.clone(), watch.clone());
                let (puts, ranges, watches) = (puts.clone(), ranges.clone(), watches.clone());
                let (range_log, other, others) = (range_log.clone(), other.clone(), others.clone());
                std::thread::spawn(move || {
                    let Some(req) = read_request(&mut s) else { return };
                    match req.path.as_str() {
                        "/v3/kv/range" => {
                            let n = ranges.fetch_add(1, Ordering::SeqCst) + 1;
                            let body = range(&req, n);
                            range_log.lock().unwrap_or_else(|p| p.into_inner()).push((req.clone(), body.len()));
                            respond(&mut s, "200 OK", &body);
                        }
                        "/v3/watch" => {
                            let n = watches.fetch_add(1, Ordering::SeqCst) + 1;
                            watch(&mut s, &req, n);
                        }
                        "/v3/kv/put" | "/v3/kv/txn" => {
                            puts.fetch_add(1, Ordering::SeqCst);
                            respond(&mut s, "200 OK", r#"{"header":{"revision":"9"},"succeeded":true}"#);
                        }
                        _ => {
                            let n = others.fetch_add(1, Ordering::SeqCst) + 1;
                            other(&mut s, &req, n);
                        }
                    }
                });
            }
        });
        gw
    }

    /// The usual one: a range answers `range_body`; a watch is created at
    /// `rev`, then runs `then` (with how many watches were opened so far).
    pub fn fixed(
        range_body: String,
        rev: u64,
        then: impl Fn(&mut TcpStream, usize) + Send + Sync + 'static,
    ) -> Gateway {
        Gateway::start(
            Arc::new(move |_: &Request, _| range_body.clone()),
            Arc::new(move |s: &mut TcpStream, _: &Request, n| {
                if open_watch(s, rev) {
                    then(s, n);
                }
            }),
        )
    }
}
