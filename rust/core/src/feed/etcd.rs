//! An etcd v3 client over the JSON gateway every etcd member serves on its
//! client URL (`POST /v3/kv/range`, `/v3/watch`, …): the calls the topology
//! feed's subscriber and its publishers need, nothing more.
//!
//! Why the gateway and not gRPC: a gRPC crate brings an async runtime,
//! protobuf code generation and TLS stacks into a library that is loaded into
//! JVMs and Python processes; the gateway needs only `std::net` and a JSON
//! parser (docs/operations.md, "Topology feed").

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http::{self, MessageStream, Next, Resolver};

/// What went wrong talking to etcd.
#[derive(Debug)]
pub enum EtcdError {
    /// No member could be reached (the last member's error).
    Unreachable(String),
    /// A member answered with an error (gRPC code and message).
    Server {
        /// The gRPC status code (5: not found, 9: failed precondition, …).
        code: i64,
        /// etcd's message.
        message: String,
    },
    /// A member answered something that is not an etcd answer.
    Protocol(String),
    /// No member answered, and one took the whole request and then gave no
    /// answer in time (or a cut one), or, to a write, an answer that cannot
    /// be read: the call may have been carried out there. For a write, the
    /// outcome is unknown until the key is read.
    Unanswered(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::Unreachable(e) => write!(f, "no etcd member reachable: {e}"),
            EtcdError::Server { code, message } => write!(f, "etcd refused the call (code {code}): {message}"),
            EtcdError::Protocol(e) => write!(f, "unexpected answer from etcd: {e}"),
            EtcdError::Unanswered(e) => {
                write!(f, "etcd took the request and gave no answer, so it may have been carried out: {e}")
            }
        }
    }
}

impl std::error::Error for EtcdError {}

type EResult<T> = std::result::Result<T, EtcdError>;

/// One key's record: its key, value (`None`: deleted) and the revision of
/// that put or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key (prefix included), as UTF-8 (lossy).
    pub key: String,
    /// The value as UTF-8 (lossy); `None` for a deletion.
    pub value: Option<String>,
    /// `mod_revision`: the put's or the delete's revision.
    pub mod_revision: u64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// One message of a watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchBatch {
    /// The store's revision when the message was sent.
    pub header_revision: u64,
    /// The events, in revision order.
    pub events: Vec<KeyValue>,
    /// The watch was just created.
    pub created: bool,
    /// The watch ended; with `compact_revision > 0` because the asked
    /// revision was compacted away.
    pub canceled: bool,
    /// The oldest revision still held, when `canceled` for compaction.
    pub compact_revision: u64,
}

/// What [`EtcdClient::put_if_holder`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// Written at this revision.
    Written(u64),
    /// The holder key is not (or no longer) attached to the lease: nothing
    /// was written.
    NotHolder,
    /// The holder key is ours but the key did not hold the required value:
    /// nothing was written.
    ValueDiffers,
}

/// What [`EtcdClient::put_if_mod_revision`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfModRevision {
    /// Written at this revision.
    Written(u64),
    /// The guard key had another `mod_revision`: nothing was written. Its
    /// record now (`None`: absent).
    Moved(Option<KeyValue>),
}

/// A client of one etcd cluster: its members' `host:port` client addresses.
/// Calls go to one member and move on to the next on a connection error.
#[derive(Debug)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    current: AtomicUsize,
    timeout: Duration,
    resolver: Arc<Resolver>,
}

/// The smallest key greater than every key with this prefix (etcd's
/// `range_end` for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdClient {
    /// A client of the members at `endpoints` (`host:port`), each call bounded
    /// by `timeout`.
    pub fn new(endpoints: Vec<String>, timeout: Duration) -> Self {
        Self::with_resolver(endpoints, timeout, Resolver::system())
    }

    /// A client whose host names go through `resolver` (tests).
    pub(crate) fn with_resolver(endpoints: Vec<String>, timeout: Duration, resolver: Arc<Resolver>) -> Self {
        EtcdClient { endpoints, current: AtomicUsize::new(0), timeout, resolver }
    }

    /// The member addresses.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Tries each member once, starting with the last one that answered.
    fn with_member<T>(&self, call: impl FnMut(&str) -> io::Result<T>) -> EResult<T> {
        self.with_member_resending(true, call)
    }

    /// [`Self::with_member`]; with `resend` false, a request a member took
    /// and did not answer goes to no other: a transaction or a delete that
    /// member carried out would be judged again against its own effect
    /// (an addition's compare failing on the record it put, a delete
    /// finding nothing), and its answer taken for the caller's.
    fn with_member_resending<T>(&self, resend: bool, mut call: impl FnMut(&str) -> io::Result<T>) -> EResult<T> {
        let n = self.endpoints.len().max(1);
        let start = self.current.load(Ordering::Relaxed);
        let mut last = String::from("no endpoints");
        let mut unanswered = None;
        for i in 0..n {
            let at = (start + i) % n;
            let Some(ep) = self.endpoints.get(at) else { break };
            match call(ep) {
                Ok(v) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(e) if http::sent_unanswered(&e) => {
                    unanswered = Some(format!("{ep}: {e}"));
                    if !resend {
                        break;
                    }
                }
                Err(e) => last = format!("{ep}: {e}"),
            }
        }
        // The next call starts with another member.
        self.current.store((start + 1) % n, Ordering::Relaxed);
        // One member that may have carried the call out outweighs any
        // number that surely did not.
        Err(match unanswered {
            Some(e) => EtcdError::Unanswered(e),
            None => EtcdError::Unreachable(last),
        })
    }

    /// The next call starts with the member after `endpoint` if it was to
    /// start with it: a watch that failed there is re-opened elsewhere even
    /// when the member still answers.
    pub(crate) fn move_past(&self, endpoint: &str) {
        let n = self.endpoints.len().max(1);
        if let Some(at) = self.endpoints.iter().position(|e| e == endpoint) {
            let _ = self.current.compare_exchange(at, (at + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The next call starts with the member after the one that answered
    /// last: a reader whose call that member refused tries the others,
    /// which `with_member` does only for a member it could
    /// not reach.
    pub(crate) fn move_on(&self) {
        let n = self.endpoints.len().max(1);
        let at = self.current.load(Ordering::Relaxed);
        self.current.store((at + 1) % n, Ordering::Relaxed);
    }

    fn call(&self, path: &str, body: &Value) -> EResult<Value> {
        self.call_resending(true, path, body)
    }

    /// A call whose request, carried out twice, does not answer alike: a
    /// transaction, a delete (see [`Self::with_member_resending`]).
    fn call_once(&self, path: &str, body: &Value) -> EResult<Value> {
        self.call_resending(false, path, body)
    }

    fn call_resending(&self, resend: bool, path: &str, body: &Value) -> EResult<Value> {
        let body = body.to_string();
        let resp =
            self.with_member_resending(resend, |ep| http::post(&self.resolver, ep, path, &body, self.timeout))?;
        answer(path, &resp)
    }

    /// Every key under `prefix`, and the store's revision they were read at.
    ///
    /// Read in pages of at most 10,000 keys, all at the first page's
    /// revision (one snapshot), each page after the last key of the one
    /// before. A page whose answer is over the cap of one answer (8 MiB: a
    /// few records of megabytes, which subscribers refuse, are enough) is
    /// asked again for half as many keys: one answer for the whole prefix
    /// would be refused on every try, and no process could read the feed.
    /// The pages hold no more keys than the first one counts, and no more
    /// than 256 MiB in all: a member that says `more` forever is
    /// refused.
    pub fn range_prefix(&self, prefix: &str) -> EResult<(u64, Vec<KeyValue>)> {
        let p = prefix.as_bytes();
        let end = b64(&prefix_end(p));
        let (mut from, mut limit, mut rev, mut kvs) = (p.to_vec(), RANGE_PAGE, 0, Vec::new());
        let (mut count, mut read) = (0, 0);
        loop {
            let mut body = json!({"key": b64(&from), "range_end": end, "limit": limit.to_string()});
            if rev > 0 {
                body["revision"] = Value::String(rev.to_string());
            }
            let Some((v, bytes)) = self.range_page(&body)? else {
                if limit == 1 {
                    return Err(EtcdError::Protocol(format!(
                        "range: the answer for the one record from `{}` is over the {} MiB of one answer",
                        excerpt(&String::from_utf8_lossy(&from).escape_debug().to_string()),
                        http::MAX_MESSAGE_BYTES >> 20
                    )));
                }
                limit /= 2;
                continue;
            };
            if rev == 0 {
                rev = header_revision(&v)?;
                count = int(v.get("count"))?;
            }
            read += bytes;
            let page = match v.get("kvs") {
                Some(Value::Array(a)) => a.as_slice(),
                _ => &[],
            };
            let start = kvs.len();
            for kv in page {
                kvs.push(key_value(kv, false)?);
            }
            not_past(rev, &kvs[start..], "range")?;
            if v.get("more") != Some(&Value::Bool(true)) {
                return Ok((rev, kvs));
            }
            if kvs.len() as u64 >= count || read > MAX_RANGE_BYTES {
                return Err(EtcdError::Protocol(format!(
                    "range: `more` after {} key(s) in {read} bytes, where the first page counted {count}",
                    kvs.len()
                )));
            }
            // The next page starts just past this one's last key, as bytes:
            // the key as text is lossy.
            let last = page.last().and_then(|kv| kv.get("key")).and_then(Value::as_str).and_then(unb64);
            let Some(mut next) = last.filter(|k| *k >= from) else {
                return Err(EtcdError::Protocol("range: `more` after a page with no key to go on from".into()));
            };
            next.push(0);
            from = next;
        }
    }

    /// One page of [`Self::range_prefix`]; `None` when its answer was over
    /// the cap of one answer.
    fn range_page(&self, body: &Value) -> EResult<Option<(Value, usize)>> {
        const PATH: &str = "/v3/kv/range";
        let body = body.to_string();
        // An answer too large is what the request asked for, not a member
        // failing: every member would answer it alike.
        let resp = self.with_member(|ep| match http::post(&self.resolver, ep, PATH, &body, self.timeout) {
            Err(e) if http::too_large(&e) => Ok(None),
            r => r.map(Some),
        })?;
        resp.map(|r| Ok((answer(PATH, &r)?, r.body.len()))).transpose()
    }

    /// How many records under `prefix` a reader that applied every record
    /// up to `revision` has not seen, and the store's current revision (a
    /// linearizable read: the leader's view). `present` are the keys (prefix
    /// included) the reader holds at `revision`: every key under the prefix,
    /// the tools' own (`_monitor/…`) too, or a deletion can hide behind one.
    ///
    /// One range asks only for the keys put after `revision`
    /// (`min_mod_revision`, keys only): its answer holds what changed, not
    /// the whole prefix, and is empty for a reader up to date. Its `count`
    /// is the number of keys under the prefix now: etcd counts the range
    /// before the revision filters (`etcdserver/txn/range.go`, etcd 3.5 to
    /// 3.7). A range holds no deletion, so deletions are counted from it:
    /// the keys not put since are the held keys still there, and every held
    /// key missing from them is gone. A key put several times since
    /// `revision` counts once, as do a key deleted and put again and each
    /// key of one transaction: the count is of records (keys), not writes.
    pub fn count_newer<S: AsRef<str>>(
        &self,
        prefix: &str,
        revision: u64,
        present: impl IntoIterator<Item = S>,
    ) -> EResult<(u64, u64)> {
        let p = prefix.as_bytes();
        let v = self.call(
            "/v3/kv/range",
            &json!({"key": b64(p), "range_end": b64(&prefix_end(p)), "keys_only": true,
                    "min_mod_revision": revision.saturating_add(1).to_string()}),
        )?;
        let rev = header_revision(&v)?;
        let count = int(v.get("count"))?;
        let kvs = match v.get("kvs") {
            Some(Value::Array(a)) => a.iter().map(|kv| key_value(kv, false)).collect::<EResult<Vec<_>>>()?,
            _ => Vec::new(),
        };
        not_past(rev, &kvs, "count")?;
        if let Some(kv) = kvs.iter().find(|kv| kv.mod_revision <= revision) {
            return Err(EtcdError::Protocol(format!(
                "count: `{}` at revision {} in an answer for records after {revision}",
                excerpt(&kv.key.escape_debug().to_string()),
                kv.mod_revision
            )));
        }
        let held: HashSet<String> = present.into_iter().map(|k| k.as_ref().to_string()).collect();
        let put = kvs.len() as u64;
        let new = kvs.iter().filter(|kv| !held.contains(&kv.key)).count() as u64;
        if count < new {
            return Err(EtcdError::Protocol(format!("count: {new} new key(s) but a count of {count}")));
        }
        // Held keys still there and not put since: the count less the new keys.
        let kept = count - new;
        let deleted = (held.len() as u64).saturating_sub(kept);
        Ok((put + deleted, rev))
    }

    /// Puts `key = value` (attached to `lease` unless 0); the put's revision.
    pub fn put(&self, key: &str, value: &str, lease: i64) -> EResult<u64> {
        let mut body = json!({"key": b64(key.as_bytes()), "value": b64(value.as_bytes())});
        if lease != 0 {
            body["lease"] = Value::String(lease.to_string());
        }
        written(self.call("/v3/kv/put", &body).and_then(|v| header_revision(&v)))
    }

    /// Deletes `key`; the store's revision after it (the delete's revision
    /// when something was deleted) and whether anything was.
    pub fn delete(&self, key: &str) -> EResult<(u64, bool)> {
        written(
            self.call_once("/v3/kv/deleterange", &json!({"key": b64(key.as_bytes())}))
                .and_then(|v| Ok((header_revision(&v)?, int(v.get("deleted"))? > 0))),
        )
    }

    /// Puts `key = value` attached to `lease` only if no such key exists, or
    /// if it exists attached to that same lease (a leader renewing its
    /// claim). Returns whether this lease holds the key now, and the current
    /// holder's value.
    pub fn claim(&self, key: &str, value: &str, lease: i64) -> EResult<(bool, Option<String>)> {
        let k = b64(key.as_bytes());
        let put = json!({"request_put": {"key": k, "value": b64(value.as_bytes()), "lease": lease.to_string()}});
        let get = json!({"request_range": {"key": k}});
        let absent = json!({"compare": [{"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                            "success": [put.clone()], "failure": [get.clone()]});
        let v = written(self.call_once("/v3/kv/txn", &absent))?;
        if v.get("succeeded") == Some(&Value::Bool(true)) {
            return Ok((true, Some(value.to_string())));
        }
        let held = txn_range_kv(&v);
        match held {
            Some(kv) if kv.lease == lease => {
                // Ours already (a renewal): keep it ours, with the new value.
                let ours = json!({"compare": [{"key": k, "target": "LEASE", "result": "EQUAL", "lease": lease.to_string()}],
                                  "success": [put], "failure": [get]});
                let v = written(self.call_once("/v3/kv/txn", &ours))?;
                let won = v.get("succeeded") == Some(&Value::Bool(true));
                Ok((won, if won { Some(value.to_string()) } else { txn_range_kv(&v).and_then(|kv| kv.value) }))
            }
            Some(kv) => Ok((false, kv.value)),
            None => Ok((false, None)),
        }
    }

    /// Puts `key = value` only while `holder_key` is attached to `lease` (a
    /// leader writing under its election key), and, with `only_if_value`,
    /// only while `key` holds exactly that value. One transaction: a writer
    /// whose lease expired or whose key was taken writes nothing.
    pub fn put_if_holder(
        &self,
        holder_key: &str,
        lease: i64,
        key: &str,
        value: &str,
        only_if_value: Option<&str>,
    ) -> EResult<Guarded> {
        let h = b64(holder_key.as_bytes());
        let k = b64(key.as_bytes());
        let mut compare = vec![json!({"key": h, "target": "LEASE", "result": "EQUAL", "lease": lease.to_string()})];
        if let Some(v) = only_if_value {
            compare.push(json!({"key": k, "target": "VALUE", "result": "EQUAL", "value": b64(v.as_bytes())}));
        }
        let txn = json!({"compare": compare,
                         "success": [{"request_put": {"key": k, "value": b64(value.as_bytes())}}],
                         "failure": [{"request_range": {"key": h}}]});
        let v = written(self.call_once("/v3/kv/txn", &txn))?;
        if v.get("succeeded") == Some(&Value::Bool(true)) {
            return written(header_revision(&v).map(Guarded::Written));
        }
        // Which comparison failed: the holder's, or only the value's.
        match txn_range_kv(&v) {
            Some(kv) if kv.lease == lease => Ok(Guarded::ValueDiffers),
            _ => Ok(Guarded::NotHolder),
        }
    }

    /// Puts `key = value` only while `guard_key`'s `mod_revision` is
    /// `mod_revision` (0: the guard key is absent). One transaction: a
    /// record whose premise changed since the writer read it is not written.
    pub fn put_if_mod_revision(
        &self,
        guard_key: &str,
        mod_revision: u64,
        key: &str,
        value: &str,
    ) -> EResult<IfModRevision> {
        let g = b64(guard_key.as_bytes());
        let txn = json!({"compare": [{"key": g, "target": "MOD", "result": "EQUAL",
                                      "mod_revision": mod_revision.to_string()}],
                         "success": [{"request_put": {"key": b64(key.as_bytes()), "value": b64(value.as_bytes())}}],
                         "failure": [{"request_range": {"key": g}}]});
        let v = written(self.call_once("/v3/kv/txn", &txn))?;
        if v.get("succeeded") == Some(&Value::Bool(true)) {
            return written(header_revision(&v).map(IfModRevision::Written));
        }
        Ok(IfModRevision::Moved(txn_range_kv(&v)))
    }

    /// Grants a lease of `ttl_seconds`; its id.
    ///
    /// A grant a member took without answering goes on to the next member
    /// (unlike a transaction or a delete): carried out twice, it leaves a
    /// lease the caller never learns of, with no key attached, which etcd
    /// expires after `ttl_seconds`; the caller holds the second one.
    pub fn lease_grant(&self, ttl_seconds: u64) -> EResult<i64> {
        let v = self.call("/v3/lease/grant", &json!({"TTL": ttl_seconds.to_string()}))?;
        // 0 is etcd's "no lease": a key put with it never expires.
        match int_i64(v.get("ID"))? {
            id if id > 0 => Ok(id),
            id => Err(EtcdError::Protocol(format!("lease grant: no lease id in the answer (ID {id})"))),
        }
    }

    /// Renews a lease; its remaining TTL in seconds (0 or less: expired).
    /// Opening the stream and reading its answer share the timeout, as a
    /// whole answer's steps do in every other call (each member tried once).
    pub fn lease_keepalive(&self, id: i64) -> EResult<i64> {
        let body = json!({"ID": id.to_string()}).to_string();
        let msg = self.with_member(|ep| {
            let deadline = Instant::now() + self.timeout;
            let mut s = MessageStream::open(&self.resolver, ep, "/v3/lease/keepalive", &body, self.timeout)?;
            match s.next(deadline.saturating_duration_since(Instant::now()))? {
                Next::Message(m) => Ok(m),
                Next::Idle => Err(io::Error::new(io::ErrorKind::TimedOut, "no keepalive answer")),
                Next::Closed => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "keepalive closed")),
            }
        })?;
        let v: Value = serde_json::from_slice(&msg).map_err(|e| EtcdError::Protocol(format!("keepalive: {e}")))?;
        if v.get("error").is_some() {
            return Err(server_error(&v["error"]));
        }
        // An expired lease answers with no TTL field (zero).
        Ok(int_i64(v["result"].get("TTL")).unwrap_or(0))
    }

    /// Revokes a lease (its keys are deleted). A lease etcd no longer has
    /// is revoked already: it expired, or an earlier attempt that a member
    /// carried out without answering revoked it before this one went on to
    /// the next member.
    pub fn lease_revoke(&self, id: i64) -> EResult<()> {
        match self.call("/v3/lease/revoke", &json!({"ID": id.to_string()})) {
            Ok(_) | Err(EtcdError::Server { code: GRPC_NOT_FOUND, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Compacts the store up to `revision` (tests and operators only).
    pub fn compact(&self, revision: u64) -> EResult<()> {
        self.call("/v3/kv/compaction", &json!({"revision": revision.to_string(), "physical": true})).map(|_| ())
    }

    /// Watches every key under `prefix` from `start_revision`, with progress
    /// notifications, through the first member that answers.
    pub fn watch(&self, prefix: &str, start_revision: u64) -> EResult<Watch> {
        let p = prefix.as_bytes();
        let body = json!({"create_request": {"key": b64(p), "range_end": b64(&prefix_end(p)),
                          "start_revision": start_revision.to_string(), "progress_notify": true}})
        .to_string();
        let mut endpoint = String::new();
        let stream = self.with_member(|ep| {
            endpoint = ep.to_string();
            MessageStream::open(&self.resolver, ep, "/v3/watch", &body, self.timeout)
        })?;
        Ok(Watch { stream, endpoint })
    }
}

/// An open watch.
pub struct Watch {
    stream: MessageStream,
    endpoint: String,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("endpoint", &self.endpoint).finish()
    }
}

impl Watch {
    /// The member this watch reads from.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next message, waiting at most `wait`: `Ok(None)` when nothing came.
    /// The end of the stream is an error (the member went away).
    pub fn next(&mut self, wait: Duration) -> EResult<Option<WatchBatch>> {
        let msg = match self.stream.next(wait) {
            Ok(Next::Message(m)) => m,
            Ok(Next::Idle) => return Ok(None),
            Ok(Next::Closed) => {
                return Err(EtcdError::Unreachable(format!("{}: the watch stream ended", self.endpoint)))
            }
            Err(e) => return Err(EtcdError::Unreachable(format!("{}: {e}", self.endpoint))),
        };
        let v: Value = serde_json::from_slice(&msg).map_err(|e| EtcdError::Protocol(format!("watch: {e}")))?;
        if let Some(err) = v.get("error") {
            return Err(server_error(err));
        }
        let r = v.get("result").ok_or_else(|| EtcdError::Protocol("watch message without result".into()))?;
        let events = match r.get("events") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|e| {
                    let deleted = e.get("type").and_then(Value::as_str) == Some("DELETE");
                    key_value(e.get("kv").unwrap_or(&Value::Null), deleted)
                })
                .collect::<EResult<Vec<_>>>()?,
            _ => Vec::new(),
        };
        let header_revision = r.get("header").map_or(Ok(0), |h| int(h.get("revision")))?;
        not_past(header_revision, &events, "watch")?;
        Ok(Some(WatchBatch {
            header_revision,
            events,
            created: r.get("created") == Some(&Value::Bool(true)),
            canceled: r.get("canceled") == Some(&Value::Bool(true)),
            compact_revision: int(r.get("compact_revision"))?,
        }))
    }
}

/// A write's outcome as its answer tells it. An answer that cannot be read
/// (not JSON, as from a proxy, or no etcd answer, such as a revision that is
/// no number) still came from a member that took the request, and a 200 says
/// it carried it out: for the caller the write may have been made, as when
/// no answer came ([`EtcdError::Unanswered`]), where a reader only learns
/// that the answer was bad ([`EtcdError::Protocol`]).
fn written<T>(answer: EResult<T>) -> EResult<T> {
    answer.map_err(|e| match e {
        EtcdError::Protocol(m) => EtcdError::Unanswered(format!("{m} (the answer cannot be read)")),
        e => e,
    })
}

/// Most keys one page of a prefix read asks for: every feed of a few
/// thousand nodes in one answer.
const RANGE_PAGE: u64 = 10_000;

/// Most bytes the pages of one prefix read may hold in all (32 answers at
/// the cap of one): far past any feed's records.
const MAX_RANGE_BYTES: usize = 32 * http::MAX_MESSAGE_BYTES;

/// A whole answer as JSON; an error status is etcd's refusal.
fn answer(path: &str, resp: &http::Response) -> EResult<Value> {
    let v: Value = serde_json::from_slice(&resp.body)
        .map_err(|e| EtcdError::Protocol(format!("{path}: HTTP {}: {e}", resp.status)))?;
    if resp.status != 200 {
        return Err(server_error(&v));
    }
    Ok(v)
}

fn server_error(v: &Value) -> EtcdError {
    EtcdError::Server {
        code: v.get("code").and_then(Value::as_i64).unwrap_or(-1),
        message: excerpt(v.get("message").or_else(|| v.get("error")).and_then(Value::as_str).unwrap_or("")),
    }
}

fn txn_range_kv(v: &Value) -> Option<KeyValue> {
    let kv = v.get("responses")?.get(0)?.get("response_range")?.get("kvs")?.get(0)?;
    key_value(kv, false).ok()
}

/// A record no etcd answer holds: one put after the revision the answer was
/// read at. Applied, its revision would outrun every later record's (which
/// would all be taken for old), so the whole answer is refused.
fn not_past(revision: u64, kvs: &[KeyValue], what: &str) -> EResult<()> {
    match kvs.iter().find(|kv| kv.mod_revision > revision) {
        Some(kv) => Err(EtcdError::Protocol(format!(
            "{what}: `{}` at revision {} past the answer's revision {revision}",
            excerpt(&kv.key.escape_debug().to_string()),
            kv.mod_revision
        ))),
        None => Ok(()),
    }
}

/// A non-negative int64 field (revisions, counts): JSON strings in the
/// gateway's encoding; absent is 0. Past `i64::MAX` is no etcd value, and
/// refusing it keeps every `revision + 1` here in range.
fn int(v: Option<&Value>) -> EResult<u64> {
    let n = match v {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::String(s)) => decimal::<u64>(s).ok_or_else(|| bad_integer(&format!("`{s}`")))?,
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| bad_integer(&n.to_string()))?,
        Some(other) => return Err(bad_integer(&other.to_string())),
    };
    if n > i64::MAX as u64 {
        return Err(EtcdError::Protocol(format!("integer {n} past int64")));
    }
    Ok(n)
}

/// An int64 as proto3's JSON mapping writes it: decimal digits, `-` before
/// a negative one. `str::parse` also takes a leading `+`, which no
/// gateway writes.
fn decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    crate::config::parse_digits::<u64>(text.strip_prefix('-').unwrap_or(text))?;
    text.parse().ok()
}

fn bad_integer(text: &str) -> EtcdError {
    EtcdError::Protocol(format!("bad integer {}", excerpt(text)))
}

/// gRPC's NOT_FOUND status code, etcd's for a lease it does not have.
const GRPC_NOT_FOUND: i64 = 5;

/// Most of an answer's text an error repeats.
const MAX_ECHO_BYTES: usize = 512;

/// The start of `text`, for an error that repeats what an answer held: the
/// error reaches an operator call's caller and the feed's `last_error` in
/// the metrics, and an answer may be megabytes long.
pub(crate) fn excerpt(text: &str) -> String {
    if text.len() <= MAX_ECHO_BYTES {
        return text.to_string();
    }
    let mut end = MAX_ECHO_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes]", &text[..end], text.len())
}

fn int_i64(v: Option<&Value>) -> EResult<i64> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => decimal(s).ok_or_else(|| bad_integer(&format!("`{s}`"))),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| bad_integer(&n.to_string())),
        Some(other) => Err(bad_integer(&other.to_string())),
    }
}

fn header_revision(v: &Value) -> EResult<u64> {
    int(v.get("header").and_then(|h| h.get("revision")))
}

fn key_value(kv: &Value, deleted: bool) -> EResult<KeyValue> {
    let text = |field: &str| -> EResult<Option<String>> {
        match kv.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => {
                let bytes = unb64(s).ok_or_else(|| EtcdError::Protocol(format!("bad base64 in `{field}`")))?;
                Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
            }
            Some(other) => Err(EtcdError::Protocol(format!("bad `{field}`: {}", excerpt(&other.to_string())))),
        }
    };
    Ok(KeyValue {
        key: text("key")?.unwrap_or_default(),
        value: if deleted { None } else { Some(text("value")?.unwrap_or_default()) },
        mod_revision: int(kv.get("mod_revision"))?,
        lease: int_i64(kv.get("lease"))?,
    })
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (the gateway's encoding of `bytes` fields).
pub(crate) fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); `None` on any bad character,
/// and on a length no encoding has.
pub(crate) fn unb64(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text.bytes().take_while(|&c| c != b'=').collect();
    if text.len() - digits.len() > 2 || text[digits.len()..].bytes().any(|c| c != b'=') {
        return None;
    }
    // One digit past a whole group holds 6 bits, no byte: what is left of a
    // cut value, which would otherwise read as a shorter one. Padding, when
    // there is some, fills the last group exactly.
    let padded = text.len() > digits.len();
    if digits.len() % 4 == 1 || (padded && text.len() % 4 != 0) {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in digits {
        let d = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | d;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for n in 0..20u8 {
            let data: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(200)).collect();
            assert_eq!(unb64(&b64(&data)).unwrap(), data, "length {n}");
        }
        assert_eq!(b64(b"p/a"), "cC9h");
        assert_eq!(b64(b"x"), "eA==");
        assert_eq!(unb64("eA").unwrap(), b"x");
        assert!(unb64("e*==").is_none());
        assert!(unb64("eA=x").is_none());
    }

    /// A value cut one digit past a whole group (`ZG93b`: `down` lost its
    /// last digits) or padded where no padding goes is no gateway's
    /// encoding: refused as bad base64, not read as a shorter value.
    #[test]
    fn truncated_or_mispadded_base64_is_refused() {
        for bad in ["ZG93b", "e", "=", "==", "eA=", "QUJDR", "QUJDRA=", "QQ="] {
            assert_eq!(unb64(bad), None, "{bad:?}");
        }
        assert_eq!(unb64("QUJDRA==").unwrap(), b"ABCD");
        assert_eq!(unb64("QUJDRA").unwrap(), b"ABCD");
        assert_eq!(unb64("").unwrap(), b"");
        let e = key_value(&json!({"key": "bm9kZS9BL3N0YXRl", "value": "ZG93b", "mod_revision": "3"}), false);
        assert!(matches!(&e, Err(EtcdError::Protocol(m)) if m.contains("bad base64 in `value`")), "{e:?}");
    }

    /// The gateway writes int64 fields as JSON strings of decimal digits
    /// (proto3's JSON mapping), `-` only for a negative one: a leading `+`
    /// is no such string, refused like any malformed integer rather than
    /// read as the number (`str::parse` takes the sign).
    #[test]
    fn a_signed_integer_is_refused() {
        let bad = |r: &EResult<KeyValue>| matches!(r, Err(EtcdError::Protocol(m)) if m.contains("bad integer"));
        for field in ["mod_revision", "lease"] {
            let mut kv = json!({"key": "bm9kZS9BL3N0YXRl", "value": "ZG93bg==", "mod_revision": "3", "lease": "5"});
            kv[field] = json!("+7");
            let got = key_value(&kv, false);
            assert!(bad(&got), "{field} = \"+7\": {got:?}");
        }
        let got = header_revision(&json!({"header": {"revision": "+9"}}));
        assert!(matches!(&got, Err(EtcdError::Protocol(m)) if m.contains("bad integer")), "{got:?}");
        for text in ["", "7 ", " 7", "0x7", "7.0"] {
            assert!(int(Some(&json!(text))).is_err(), "{text:?}");
            assert!(int_i64(Some(&json!(text))).is_err(), "{text:?}");
        }
        assert_eq!(int(Some(&json!("7"))).unwrap(), 7);
        assert_eq!(int_i64(Some(&json!("-7"))).unwrap(), -7);
        assert!(int(Some(&json!("-7"))).is_err());
    }

    /// A grant answered without a lease id (or with 0, or a negative one)
    /// is no lease: 0 is etcd's "no lease", and a leader key claimed with
    /// it is attached to nothing, so it never expires, and the monitor
    /// holding it would keep every other monitor out after it died.
    #[test]
    fn a_grant_without_a_lease_id_is_refused() {
        use crate::feed::stand_in::{respond, Gateway, Request};
        use std::net::TcpStream;
        for body in [
            r#"{"header":{"revision":"5"},"TTL":"5"}"#,
            r#"{"header":{"revision":"5"},"ID":"0","TTL":"5"}"#,
            r#"{"header":{"revision":"5"},"ID":"-3","TTL":"5"}"#,
        ] {
            let gw = Gateway::start_with(
                Arc::new(|_: &Request, _| String::new()),
                Arc::new(|_: &mut TcpStream, _: &Request, _| {}),
                Arc::new(move |s: &mut TcpStream, _: &Request, _| {
                    respond(s, "200 OK", body);
                }),
            );
            let client = EtcdClient::new(vec![gw.endpoint.clone()], Duration::from_secs(5));
            let got = client.lease_grant(5);
            assert!(matches!(&got, Err(EtcdError::Protocol(m)) if m.contains("lease")), "{body}: {got:?}");
        }
    }

    /// A put a member took and never answered may be committed there: it
    /// is `Unanswered`, never `Unreachable` (which says it went nowhere),
    /// even when another member refused the connection after it.
    #[test]
    fn a_request_taken_and_never_answered_is_unanswered() {
        let (silent, _) = crate::feed::stand_in::silent_member();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let both = EtcdClient::new(vec![silent.clone(), closed.clone()], Duration::from_millis(200));
        let got = both.put("p/node/A/state", "down", 0);
        assert!(matches!(&got, Err(EtcdError::Unanswered(m)) if m.contains(&silent)), "{got:?}");
        let got = EtcdClient::new(vec![closed], Duration::from_millis(200)).put("p/node/A/state", "down", 0);
        assert!(matches!(&got, Err(EtcdError::Unreachable(_))), "{got:?}");
    }

    /// A guarded write or a delete that one member took without answering
    /// is not sent again to the next: if the first carried it out, the
    /// next one's answer is about that write, not about the store the
    /// caller read. Sent again, an addition through the feed found its own
    /// record (`DuplicateNode`), a removal its own removal (`UnknownNode`,
    /// "nothing written"), and the tool's delete nothing to delete.
    #[test]
    fn a_write_one_member_took_unanswered_is_not_sent_to_the_next() {
        use crate::feed::stand_in::{kv, member, respond, silent_member};
        use std::sync::atomic::AtomicUsize;
        let (silent, _) = silent_member();
        // The next member, after the first committed `p/node/A = present`
        // at revision 9: the compare fails on that record, the delete finds
        // nothing left.
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let next = member(move |s, req| {
            counted.fetch_add(1, Ordering::SeqCst);
            let body = match req.path.as_str() {
                "/v3/kv/txn" => format!(
                    r#"{{"header":{{"revision":"9"}},"succeeded":false,"responses":[{{"response_range":{{"kvs":[{}]}}}}]}}"#,
                    kv("p/node/A", "present", 9)
                ),
                _ => r#"{"header":{"revision":"9"},"deleted":"0"}"#.to_string(),
            };
            respond(s, "200 OK", &body);
        });
        // A client per call: each starts with the member that takes it.
        let client = || EtcdClient::new(vec![silent.clone(), next.clone()], Duration::from_millis(300));
        let got = client().put_if_mod_revision("p/node/A", 0, "p/node/A", "present");
        assert!(matches!(&got, Err(EtcdError::Unanswered(_))), "{got:?}");
        let got = client().put_if_holder("p/_monitor/leader", 7, "p/node/A/state", "down", None);
        assert!(matches!(&got, Err(EtcdError::Unanswered(_))), "{got:?}");
        let got = client().claim("p/_monitor/leader", "me", 7);
        assert!(matches!(&got, Err(EtcdError::Unanswered(_))), "{got:?}");
        let got = client().delete("p/node/A/weight");
        assert!(matches!(&got, Err(EtcdError::Unanswered(_))), "{got:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 0, "nothing was sent to the next member");
        // A plain put means the same sent twice: the next member answers it.
        assert_eq!(client().put("p/node/A/state", "down", 0).unwrap(), 9);
        assert_eq!(asked.load(Ordering::SeqCst), 1, "a put goes on to the next member");
    }

    /// A lease grant, unlike a transaction or a delete, goes on to the next
    /// member after one took it and gave no answer: granted twice, it makes
    /// two leases, of which the caller holds the second; the first has no
    /// key attached and etcd expires it after its TTL. Asking once only
    /// would put off a monitor's campaign by an interval for nothing.
    #[test]
    fn a_grant_one_member_took_unanswered_is_asked_of_the_next() {
        use crate::feed::stand_in::{member, respond, silent_member};
        use std::sync::atomic::AtomicUsize;
        let (silent, took) = silent_member();
        let grants = Arc::new(AtomicUsize::new(0));
        let counted = grants.clone();
        let next = member(move |s, req| {
            assert_eq!(req.path, "/v3/lease/grant");
            counted.fetch_add(1, Ordering::SeqCst);
            respond(s, "200 OK", r#"{"header":{"revision":"9"},"ID":"42","TTL":"5"}"#);
        });
        let client = EtcdClient::new(vec![silent, next], Duration::from_millis(300));
        assert_eq!(client.lease_grant(5).unwrap(), 42, "the next member's lease");
        assert_eq!(took.load(Ordering::SeqCst), 1, "the first member took the whole request");
        assert_eq!(grants.load(Ordering::SeqCst), 1, "the next member was asked once");
    }

    /// A revoke that one member carried out and did not answer goes on to
    /// the next, which no longer has the lease: etcd's "requested lease not
    /// found" (HTTP 404, code 5). The lease is gone, which is what the
    /// caller asked for; before, the monitor stopping warned that revoking
    /// had failed. A lease that expired before the revoke is gone alike.
    #[test]
    fn a_revoke_of_a_lease_etcd_no_longer_has_is_done() {
        use crate::feed::stand_in::{member, respond, silent_member};
        let (silent, _) = silent_member();
        let next = member(|s, req| {
            let (status, body) = match req.body["ID"].as_str() {
                Some("7") => ("404 Not Found", r#"{"code":5,"message":"etcdserver: requested lease not found"}"#),
                _ => ("400 Bad Request", r#"{"code":3,"message":"etcdserver: bad lease id"}"#),
            };
            respond(s, status, body);
        });
        let taken_then_gone = EtcdClient::new(vec![silent, next.clone()], Duration::from_millis(300));
        let got = taken_then_gone.lease_revoke(7);
        assert!(got.is_ok(), "{got:?}");
        let expired = EtcdClient::new(vec![next], Duration::from_millis(300));
        let got = expired.lease_revoke(7);
        assert!(got.is_ok(), "{got:?}");
        // Any other refusal is still an error.
        let got = expired.lease_revoke(8);
        assert!(matches!(&got, Err(EtcdError::Server { code: 3, .. })), "{got:?}");
    }

    /// A member that says `more` after every page, each with a new key:
    /// the read stops at the keys the first page counted, not when the
    /// member does (never).
    #[test]
    fn a_range_whose_member_says_more_forever_is_refused() {
        use crate::feed::stand_in::{kv, member, respond};
        use std::sync::atomic::AtomicUsize;
        let pages = Arc::new(AtomicUsize::new(0));
        let counted = pages.clone();
        let ep = member(move |s, _| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let body = format!(
                r#"{{"header":{{"revision":"5"}},"kvs":[{}],"count":"3","more":true}}"#,
                kv(&format!("p/k{n:09}"), "x", 2)
            );
            respond(s, "200 OK", &body);
        });
        let got = EtcdClient::new(vec![ep], Duration::from_secs(5)).range_prefix("p/");
        assert!(matches!(&got, Err(EtcdError::Protocol(m)) if m.contains("`more` after 3 key(s)")), "{got:?}");
        assert_eq!(pages.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"p/"), b"p0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
