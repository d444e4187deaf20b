//! Just enough HTTP/1.1 for the etcd v3 JSON gateway: a `POST` with a JSON
//! body, answered either whole or as a chunked stream of newline-separated
//! JSON messages (a watch).
//!
//! `std::net` does the job; an HTTP crate would bring an async runtime or TLS
//! stack the library does not otherwise need (docs/operations.md, "Topology
//! feed"). Plain HTTP only: the gateway is reached on a trusted network or
//! through a local TLS-terminating proxy.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Largest response header block or single message accepted: a partition
/// map record fits many times over. A prefix read larger than this is taken
/// in pages (`EtcdClient::range_prefix`); anything else larger is not an
/// etcd answer.
pub(crate) const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// Most of an error answer's body read and kept: etcd's errors are a line.
const MAX_ERROR_BYTES: usize = 1024;

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// An answer over [`MAX_MESSAGE_BYTES`]: told apart ([`too_large`]), so a
/// read can ask for less in one answer.
#[derive(Debug)]
struct TooLarge(String);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TooLarge {}

fn over_cap(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, TooLarge(what.into()))
}

/// Whether [`post`] failed because the answer's body was over the cap of
/// one answer (whether or not it is also [`sent_unanswered`]).
pub(crate) fn too_large(e: &io::Error) -> bool {
    let inner = match e.get_ref().and_then(|i| i.downcast_ref::<Unanswered>()) {
        Some(Unanswered(sent)) => sent.get_ref(),
        None => e.get_ref(),
    };
    inner.is_some_and(|i| i.is::<TooLarge>())
}

/// A host-name lookup (`host:port` → addresses): the system's, or one a
/// test injects.
pub(crate) type Lookup = dyn Fn(&str) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// Resolves member addresses for the feed's calls, each lookup bounded by
/// the call's timeout (`topology.feed_timeout`): `getaddrinfo` has no
/// deadline of its own, and an operator call through the feed must fail in
/// its time even when a DNS server never answers. The lookup runs on a
/// helper thread the caller waits for; a lookup still running when the
/// caller gives up is joined by the next call for that host rather than
/// started again, so a dead DNS server holds one thread per host. Nothing
/// is cached: a member whose name moves is followed.
pub(crate) struct Resolver {
    lookup: Arc<Lookup>,
    /// Lookups under way, by endpoint.
    pending: Mutex<HashMap<String, Arc<Pending>>>,
}

/// A lookup's addresses, or its error as every waiter gets it.
type Looked = std::result::Result<Vec<SocketAddr>, (io::ErrorKind, String)>;

/// One lookup's outcome, handed to every caller waiting for it.
struct Pending {
    outcome: Mutex<Option<Looked>>,
    done: Condvar,
    /// The process that started it: a forked child has the map but not the
    /// thread, so it starts its own lookup.
    pid: u32,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    pub(crate) fn new(lookup: Box<Lookup>) -> Arc<Resolver> {
        Arc::new(Resolver { lookup: Arc::from(lookup), pending: Mutex::new(HashMap::new()) })
    }

    /// The process's resolver over the system's lookup (`getaddrinfo`).
    pub(crate) fn system() -> Arc<Resolver> {
        static SYSTEM: LazyLock<Arc<Resolver>> =
            LazyLock::new(|| Resolver::new(Box::new(|ep: &str| ep.to_socket_addrs().map(Iterator::collect))));
        SYSTEM.clone()
    }

    /// The addresses of `endpoint` (at least one), in the lookup's order,
    /// within `timeout`.
    pub(crate) fn resolve(self: &Arc<Self>, endpoint: &str, timeout: Duration) -> io::Result<Vec<SocketAddr>> {
        if let Ok(addr) = endpoint.parse::<SocketAddr>() {
            return Ok(vec![addr]);
        }
        let pid = std::process::id();
        let (pending, start) = {
            let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(endpoint) {
                Some(p) if p.pid == pid => (p.clone(), false),
                _ => {
                    let p = Arc::new(Pending { outcome: Mutex::new(None), done: Condvar::new(), pid });
                    map.insert(endpoint.to_string(), p.clone());
                    (p, true)
                }
            }
        };
        if start {
            let (me, ep, slot) = (self.clone(), endpoint.to_string(), pending.clone());
            let spawned =
                std::thread::Builder::new().name("racaffinity-resolve".into()).spawn(move || me.look_up(&ep, &slot));
            if let Err(e) = spawned {
                self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(endpoint);
                return Err(io::Error::other(format!("no thread to resolve `{endpoint}`: {e}")));
            }
        }
        let deadline = Instant::now() + timeout;
        let mut outcome = pending.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(o) = outcome.as_ref() {
                return o.clone().map_err(|(kind, text)| io::Error::new(kind, text));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("resolving `{endpoint}` took longer than {timeout:?} (topology.feed_timeout)"),
                ));
            }
            outcome = pending.done.wait_timeout(outcome, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The helper thread's job: look up, hand the outcome to the waiters,
    /// and leave the next call to look up afresh.
    fn look_up(&self, endpoint: &str, pending: &Pending) {
        // A lookup that panics is an answer too: its waiters must not wait
        // for one that never comes.
        let looked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.lookup)(endpoint)))
            .unwrap_or_else(|_| Err(io::Error::other(format!("resolving `{endpoint}` panicked"))));
        let found = some(endpoint, looked).map_err(|e| (e.kind(), e.to_string()));
        // Out of the map first: a call arriving now starts a fresh lookup
        // rather than reading one about to be dropped.
        {
            let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if map.get(endpoint).is_some_and(|p| std::ptr::eq(Arc::as_ptr(p), pending)) {
                map.remove(endpoint);
            }
        }
        *pending.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
        pending.done.notify_all();
    }
}

fn some(endpoint: &str, found: io::Result<Vec<SocketAddr>>) -> io::Result<Vec<SocketAddr>> {
    let found = found?;
    if found.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("`{endpoint}` resolves to no address")));
    }
    Ok(found)
}

/// An answer read whole.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Sends `POST path` with a JSON body and returns the status line's code and
/// the connection positioned after the header block (plus any body bytes
/// already read, and how the body is framed).
fn send(
    resolver: &Arc<Resolver>,
    endpoint: &str,
    path: &str,
    body: &str,
    deadline: Instant,
    sent: &mut bool,
) -> io::Result<(TcpStream, u16, Framing, Vec<u8>)> {
    // The lookup, the connection and the answer share the call's bound.
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    // Each address in turn, as a connection by name goes: `localhost` may
    // list `::1` first where etcd listens on 127.0.0.1 only.
    let (mut sock, mut last) = (None, None);
    for addr in resolver.resolve(endpoint, left())? {
        // The call's bound covers them all: a later address gets what is left.
        if last.is_some() && Instant::now() >= deadline {
            break;
        }
        match TcpStream::connect_timeout(&addr, left()) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(mut sock) = sock else {
        return Err(last.unwrap_or_else(|| io::Error::other(format!("`{endpoint}` resolves to no address"))));
    };
    sock.set_nodelay(true)?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Until { sock: &mut sock, deadline }.write_all(request.as_bytes())?;
    *sent = true;
    let mut buf = Vec::with_capacity(1024);
    let head_end = read_head(&mut Until { sock: &mut sock, deadline }, &mut buf, deadline, &mut HeadEnd::default())?;
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| invalid("response header is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        // Three digits (RFC 9110, 15); `parse` would also take `+200`.
        .filter(|code| code.len() == 3)
        .and_then(|code| http_number(code, 10))
        .and_then(|code| u16::try_from(code).ok())
        .ok_or_else(|| invalid(format!("bad status line `{}`", status_line.escape_debug())))?;
    let mut framing = Framing::UntilClose;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
            framing = Framing::Chunked(Chunks::default());
        } else if name.eq_ignore_ascii_case("content-length") && !matches!(framing, Framing::Chunked(_)) {
            let n = http_number(value, 10).ok_or_else(|| invalid("bad Content-Length"))?;
            if n > MAX_MESSAGE_BYTES {
                return Err(over_cap("response body too large"));
            }
            framing = Framing::Length(n);
        }
    }
    let rest = buf.split_off(head_end + 4);
    Ok((sock, status, framing, rest))
}

/// Reads until `buf` holds the whole header block; where its `\r\n\r\n`
/// starts.
fn read_head(src: &mut impl Read, buf: &mut Vec<u8>, deadline: Instant, end: &mut HeadEnd) -> io::Result<usize> {
    loop {
        if let Some(i) = end.find(buf) {
            return Ok(i);
        }
        if buf.len() > MAX_MESSAGE_BYTES {
            return Err(invalid("response header too large"));
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no response header in time"));
        }
        read_some(src, buf)?;
    }
}

/// The search for the `\r\n\r\n` ending a header block in a buffer that
/// only grows. Each search resumes where the last one stopped: from the
/// start every time, a member trickling a header byte by byte would cost
/// the square of its length. `scanned` counts the bytes looked at (tests
/// bound it).
#[derive(Default)]
struct HeadEnd {
    from: usize,
    scanned: usize,
}

impl HeadEnd {
    fn find(&mut self, buf: &[u8]) -> Option<usize> {
        const END: &[u8] = b"\r\n\r\n";
        let hay = &buf[self.from.min(buf.len())..];
        self.scanned += hay.len();
        if let Some(i) = find(hay, END) {
            return Some(self.from + i);
        }
        // The end may straddle this search and the next read.
        self.from = buf.len().saturating_sub(END.len() - 1).max(self.from);
        None
    }
}

/// A failure after the whole request was handed to the member: it may have
/// carried the request out (a write committed, its answer lost or late).
/// Displays as the failure itself; [`sent_unanswered`] tells it apart.
#[derive(Debug)]
struct Unanswered(io::Error);

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Unanswered {}

/// Whether [`post`] failed after its request reached the member whole.
pub(crate) fn sent_unanswered(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Unanswered>())
}

/// One request, its answer read whole within `timeout`. A failure once the
/// request is sent is told apart ([`sent_unanswered`]): for a write, only a
/// failure before says that nothing was written.
pub(crate) fn post(
    resolver: &Arc<Resolver>,
    endpoint: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> io::Result<Response> {
    let mut sent = false;
    post_once(resolver, endpoint, path, body, timeout, &mut sent).map_err(|e| {
        if sent {
            io::Error::new(e.kind(), Unanswered(e))
        } else {
            e
        }
    })
}

fn post_once(
    resolver: &Arc<Resolver>,
    endpoint: &str,
    path: &str,
    body: &str,
    timeout: Duration,
    sent: &mut bool,
) -> io::Result<Response> {
    let deadline = Instant::now() + timeout;
    let (mut sock, status, framing, mut raw) = send(resolver, endpoint, path, body, deadline, sent)?;
    let mut sock = Until { sock: &mut sock, deadline };
    let mut body = Vec::new();
    match framing {
        Framing::Length(n) => {
            while raw.len() < n {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "response body not complete in time"));
                }
                // A closed connection would otherwise spin here until the deadline.
                if read_some(&mut sock, &mut raw)? == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside the body"));
                }
            }
            raw.truncate(n);
            body = raw;
        }
        Framing::Chunked(mut chunks) => loop {
            let done = chunks.decode(&mut raw, &mut body)?;
            if done {
                break;
            }
            // The sum, not only each chunk: a member streaming small chunks
            // would otherwise hold as much memory as the deadline lets it send.
            if body.len() + raw.len() > MAX_MESSAGE_BYTES {
                return Err(over_cap(format!("response body over {} MiB", MAX_MESSAGE_BYTES >> 20)));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "response body not complete in time"));
            }
            if read_some(&mut sock, &mut raw)? == 0 {
                return Err(invalid("connection closed inside a chunked body"));
            }
        },
        Framing::UntilClose => loop {
            if raw.len() > MAX_MESSAGE_BYTES {
                return Err(over_cap("response body too large"));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "response body not complete in time"));
            }
            if read_some(&mut sock, &mut raw)? == 0 {
                body = raw;
                break;
            }
        },
    }
    Ok(Response { status, body })
}

/// A connection read and written no later than `deadline`: each read or
/// write waits only for what is left of it. With the socket's own read
/// timeout, a member sending a byte just before the deadline got a whole
/// timeout more for each read.
struct Until<'a> {
    sock: &'a mut TcpStream,
    deadline: Instant,
}

impl Until<'_> {
    /// One socket call with what is left of the deadline as its timeout
    /// (`set`: the socket's read or write timeout); past the deadline, or
    /// when that timeout runs out, `TimedOut` saying `late`.
    fn within<T>(
        &mut self,
        late: &'static str,
        set: fn(&TcpStream, Option<Duration>) -> io::Result<()>,
        call: impl FnOnce(&mut TcpStream) -> io::Result<T>,
    ) -> io::Result<T> {
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, late);
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        set(self.sock, Some(left))?;
        match call(self.sock) {
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Err(timed_out()),
            r => r,
        }
    }
}

impl Read for Until<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.within("no answer within the call's timeout", TcpStream::set_read_timeout, |s| s.read(out))
    }
}

impl Write for Until<'_> {
    /// As a read: with the socket's own write timeout, a member taking a
    /// large request a little at a time got a whole timeout per write.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.within("request not sent within the call's timeout", TcpStream::set_write_timeout, |s| s.write(data))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// Reads once; `Ok(0)` at the end of the stream.
fn read_some(sock: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut tmp = [0u8; 16 * 1024];
    let n = sock.read(&mut tmp)?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n)
}

/// A length in HTTP framing: digits of `radix` only (RFC 9110 8.6, RFC
/// 9112 7.1). `from_str_radix` and `parse` also take a leading `+`.
fn http_number(text: &str, radix: u32) -> Option<usize> {
    if text.is_empty() || !text.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    usize::from_str_radix(text, radix).ok()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

enum Framing {
    Length(usize),
    Chunked(Chunks),
    UntilClose,
}

/// The chunked transfer coding, decoded incrementally: bytes are consumed
/// only once a whole piece (size line, data, trailing CRLF) is there, so a
/// read timeout in the middle of a chunk loses nothing.
#[derive(Default)]
struct Chunks {
    /// Data bytes still owed by the current chunk, then its CRLF.
    left: Option<usize>,
    ended: bool,
}

impl Chunks {
    /// Moves every complete piece of `raw` into `out`; true at the last chunk.
    fn decode(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> io::Result<bool> {
        let mut at = 0;
        loop {
            if self.ended {
                break;
            }
            match self.left {
                None => {
                    let Some(eol) = find(&raw[at..], b"\r\n") else {
                        if raw.len() - at > 64 {
                            return Err(invalid("bad chunk size line"));
                        }
                        break;
                    };
                    let line = std::str::from_utf8(&raw[at..at + eol]).map_err(|_| invalid("bad chunk size line"))?;
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size = http_number(hex, 16).ok_or_else(|| invalid("bad chunk size"))?;
                    if size > MAX_MESSAGE_BYTES {
                        return Err(over_cap("chunk too large"));
                    }
                    at += eol + 2;
                    if size == 0 {
                        self.ended = true;
                    } else {
                        self.left = Some(size);
                    }
                }
                Some(n) => {
                    let have = raw.len() - at;
                    if have == 0 {
                        break;
                    }
                    if n > 0 {
                        let take = n.min(have);
                        out.extend_from_slice(&raw[at..at + take]);
                        at += take;
                        self.left = Some(n - take);
                        continue;
                    }
                    if have < 2 {
                        break;
                    }
                    if &raw[at..at + 2] != b"\r\n" {
                        return Err(invalid("chunk not followed by CRLF"));
                    }
                    at += 2;
                    self.left = None;
                }
            }
        }
        raw.drain(..at);
        Ok(self.ended)
    }
}

/// A response read message by message: the etcd gateway streams a watch as
/// JSON messages separated by newlines, in a chunked body.
pub(crate) struct MessageStream {
    sock: TcpStream,
    framing: Framing,
    raw: Vec<u8>,
    body: Lines,
    closed: bool,
}

/// A stream's decoded body, taken a line at a time, and the bytes that
/// cost (searched and copied; tests bound it). Each search starts where the
/// last one found no newline, and a line taken leaves the rest in place: a
/// member trickling a message byte by byte, or sending many small ones at
/// once, would otherwise cost the square of what it sends.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
    /// Where the next line starts: the lines before it were taken, and
    /// leave `buf` at the next search that finds none.
    start: usize,
    /// Bytes from `start` on known to hold no newline.
    clean: usize,
    work: usize,
}

impl Lines {
    /// The next whole line, without its newline.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let from = self.start + self.clean;
        let Some(i) = self.buf[from..].iter().position(|&b| b == b'\n') else {
            self.work += self.buf.len() - from;
            self.clean = self.buf.len() - self.start;
            // Once per search that finds no line, not once per line.
            if self.start > 0 {
                self.work += self.buf.len() - self.start;
                self.buf.drain(..self.start);
                self.start = 0;
            }
            return None;
        };
        let end = from + i;
        let msg = self.buf[self.start..end].to_vec();
        self.work += i + 1 + msg.len();
        (self.start, self.clean) = (end + 1, 0);
        Some(msg)
    }

    /// What no newline ended yet.
    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn take_rest(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.buf);
        rest.drain(..std::mem::take(&mut self.start));
        self.clean = 0;
        rest
    }
}

/// What [`MessageStream::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Message(Vec<u8>),
    /// Nothing arrived within the wait.
    Idle,
    /// The server ended the response.
    Closed,
}

impl MessageStream {
    /// Opens the stream; a status other than 200 is an error carrying the body.
    pub(crate) fn open(
        resolver: &Arc<Resolver>,
        endpoint: &str,
        path: &str,
        body: &str,
        timeout: Duration,
    ) -> io::Result<MessageStream> {
        let deadline = Instant::now() + timeout;
        let (sock, status, framing, raw) = send(resolver, endpoint, path, body, deadline, &mut false)?;
        let mut s = MessageStream { sock, framing, raw, body: Lines::default(), closed: false };
        if status != 200 {
            let text = s.error_words(deadline);
            return Err(io::Error::other(format!("HTTP {status}: {}", text.trim())));
        }
        Ok(s)
    }

    /// The start of an error answer's body: at most [`MAX_ERROR_BYTES`],
    /// read until the body ends, the cap, or `deadline`. Not by message: a
    /// body with no newline would be read to the message cap and say
    /// nothing, and the words end up in the feed's `last_error`.
    fn error_words(&mut self, deadline: Instant) -> String {
        loop {
            // A body that breaks its framing has said what it could.
            if !self.raw.is_empty() && self.decode().is_err() {
                break;
            }
            if self.closed || self.body.pending().len() >= MAX_ERROR_BYTES {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.sock.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match read_some(&mut self.sock, &mut self.raw) {
                Ok(0) => self.closed = true,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let mut words = self.body.take_rest();
        let cut = words.len() > MAX_ERROR_BYTES;
        words.truncate(MAX_ERROR_BYTES);
        let mut text = String::from_utf8_lossy(&words).into_owned();
        if cut {
            text.push_str(" [cut]");
        }
        text
    }

    /// The next complete message, waiting at most `wait` for it: a stream
    /// that keeps sending bytes but no message (blank lines, a message
    /// trickled byte by byte) answers `Idle` at `wait` all the same, so its
    /// reader gets to check its stop flag and its lag between reads.
    pub(crate) fn next(&mut self, wait: Duration) -> io::Result<Next> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(msg) = self.body.take_line() {
                if msg.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Next::Message(msg));
            }
            if self.closed {
                let rest = self.body.take_rest();
                if rest.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Next::Closed);
                }
                return Ok(Next::Message(rest));
            }
            if self.body.pending().len() > MAX_MESSAGE_BYTES {
                return Err(invalid("stream message too large"));
            }
            // Bytes already read but not yet decoded come first.
            if !self.raw.is_empty() && self.decode()? {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Next::Idle);
            }
            self.sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            match read_some(&mut self.sock, &mut self.raw) {
                Ok(0) => self.closed = true,
                Ok(_) => {
                    self.decode()?;
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Ok(Next::Idle)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves decoded body bytes over; true if any moved or the body ended.
    fn decode(&mut self) -> io::Result<bool> {
        let body = &mut self.body.buf;
        let before = body.len();
        match &mut self.framing {
            Framing::Chunked(c) => {
                if c.decode(&mut self.raw, body)? {
                    self.closed = true;
                }
            }
            Framing::Length(n) => {
                let take = (*n).min(self.raw.len());
                body.extend(self.raw.drain(..take));
                *n -= take;
                if *n == 0 {
                    self.closed = true;
                }
            }
            Framing::UntilClose => body.append(&mut self.raw),
        }
        Ok(body.len() > before || self.closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_decode_only_whole_pieces() {
        let mut c = Chunks::default();
        let mut out = Vec::new();
        let mut raw = b"5\r\nhel".to_vec();
        assert!(!c.decode(&mut raw, &mut out).unwrap());
        assert_eq!(out, b"hel");
        raw.extend_from_slice(b"lo\r");
        assert!(!c.decode(&mut raw, &mut out).unwrap());
        assert_eq!(out, b"hello");
        raw.extend_from_slice(b"\n3;x=y\r\n ok\r\n0\r\n\r\n");
        assert!(c.decode(&mut raw, &mut out).unwrap());
        assert_eq!(out, b"hello ok");
    }

    #[test]
    fn chunks_refuse_garbage() {
        let mut c = Chunks::default();
        let mut out = Vec::new();
        assert!(c.decode(&mut b"zz\r\n".to_vec(), &mut out).is_err());
        let mut c = Chunks::default();
        assert!(c.decode(&mut b"2\r\nabXY".to_vec(), &mut out).is_err());
    }

    /// A chunk size is hex digits only (RFC 9112, 7.1): `from_str_radix`
    /// also takes a leading `+`, which would read "+a" as ten bytes.
    #[test]
    fn chunk_sizes_are_hex_digits_only() {
        for line in ["+a", "+0", "-0", ""] {
            let mut c = Chunks::default();
            let mut raw = format!("{line}\r\n0123456789\r\n0\r\n\r\n").into_bytes();
            let r = c.decode(&mut raw, &mut Vec::new());
            assert_eq!(r.map_err(|e| e.to_string()), Err("bad chunk size".to_string()), "size line `{line}`");
        }
    }
}

#[cfg(test)]
mod head_tests {
    use super::*;

    /// A member handing its answer over one byte per read.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else { return Ok(0) };
            out[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }

    /// A 16 KiB header block (far under the cap) trickled byte by byte:
    /// each search resumes where the last stopped, so the bytes looked at
    /// stay under four per byte read (the new one and the three an end
    /// straddling two reads needs), not the square of the block over two.
    #[test]
    fn a_trickled_header_is_searched_in_linear_work() {
        let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
        while answer.len() < 16 << 10 {
            answer.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let head_len = answer.len();
        answer.extend_from_slice(b"\r\n{}");
        let (mut buf, mut end) = (Vec::new(), HeadEnd::default());
        let deadline = Instant::now() + Duration::from_secs(600);
        let at = read_head(&mut Trickle(&answer), &mut buf, deadline, &mut end).unwrap();
        assert_eq!(at, head_len - 2, "where the block's \\r\\n\\r\\n starts");
        assert!(end.scanned <= 4 * answer.len(), "{} bytes looked at for a {head_len}-byte header", end.scanned);
    }
}

#[cfg(test)]
mod lines_tests {
    use super::*;

    /// A 16 KiB message trickled a byte at a time, a search after each
    /// byte (a member sending one byte per read): linear work, not the
    /// square of the message over two.
    #[test]
    fn a_trickled_message_is_searched_in_linear_work() {
        let n = 16 << 10;
        let mut lines = Lines::default();
        for _ in 0..n {
            lines.buf.push(b'x');
            assert_eq!(lines.take_line(), None);
        }
        lines.buf.push(b'\n');
        assert_eq!(lines.take_line().map(|m| m.len()), Some(n));
        assert!(lines.work <= 4 * n, "{} bytes of work for a {n}-byte message", lines.work);
    }

    /// 16 KiB of 4-byte messages in one read (blank lines, or small events):
    /// each taken without moving the rest to the front.
    #[test]
    fn many_messages_in_one_read_are_taken_in_linear_work() {
        let n = 16 << 10;
        let mut lines = Lines::default();
        lines.buf.extend(b"abc\n".repeat(n / 4));
        let mut taken = 0;
        while let Some(m) = lines.take_line() {
            assert_eq!(m, b"abc");
            taken += 1;
        }
        assert_eq!(taken, n / 4);
        lines.buf.extend_from_slice(b"de\nf");
        assert_eq!(lines.take_line().as_deref(), Some(&b"de"[..]));
        assert_eq!((lines.take_line(), lines.pending()), (None, &b"f"[..]));
        assert!(lines.work <= 4 * n, "{} bytes of work for {n} bytes of messages", lines.work);
    }
}

#[cfg(test)]
mod error_body_tests {
    use super::*;
    use std::net::TcpListener;

    /// A member answering `head`, then `piece` again and again every
    /// `every` until the client goes away.
    fn endless(head: &'static str, piece: &'static [u8], every: Duration) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            if s.write_all(head.as_bytes()).is_err() {
                return;
            }
            while s.write_all(piece).is_ok() {
                std::thread::sleep(every);
            }
        });
        ep
    }

    fn open_err(ep: &str, timeout: Duration) -> (io::Error, Duration) {
        let t = Instant::now();
        match MessageStream::open(&Resolver::system(), ep, "/v3/watch", "{}", timeout) {
            Ok(_) => panic!("an HTTP 500 opened a stream"),
            Err(e) => (e, t.elapsed()),
        }
    }

    /// A 500 whose chunked body never ends, in lines: the error says the
    /// status and a bounded excerpt, at once. The excerpt is what reaches
    /// `last_error` in the metrics.
    #[test]
    fn an_error_answer_with_an_endless_body_is_cut_short() {
        let line: &[u8] = b"1d\r\n{\"error\":\"etcdserver: boom\"}\n\r\n";
        let head = "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n";
        let ep = endless(head, line, Duration::ZERO);
        let (e, took) = open_err(&ep, Duration::from_secs(5));
        let text = e.to_string();
        assert!(
            text.starts_with("HTTP 500: {\"error\":\"etcdserver: boom\"}"),
            "{} (after {took:?})",
            &text[..text.len().min(200)]
        );
        assert!(text.len() <= 2048, "an error of {} bytes", text.len());
        assert!(took < Duration::from_secs(4), "took {took:?}");
    }

    /// The same with a body of one endless line (no length, no chunks: to
    /// the close): the status is still what the error says.
    #[test]
    fn an_error_answer_of_one_endless_line_says_its_status() {
        let ep = endless("HTTP/1.1 500 Internal Server Error\r\n\r\nno", &[b'o'; 4096], Duration::ZERO);
        let (e, took) = open_err(&ep, Duration::from_secs(5));
        let text = e.to_string();
        assert!(text.starts_with("HTTP 500: noooo"), "{} (after {took:?})", &text[..text.len().min(200)]);
        assert!(text.len() <= 2048, "an error of {} bytes", text.len());
        assert!(took < Duration::from_secs(4), "took {took:?}");
    }

    /// An error body trickled a byte at a time, endless: the call's timeout
    /// bounds the read.
    #[test]
    fn an_error_answer_trickled_forever_ends_at_the_timeout() {
        let head = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 1000000\r\n\r\n";
        let ep = endless(head, b"x", Duration::from_millis(20));
        let (e, took) = open_err(&ep, Duration::from_millis(500));
        assert!(e.to_string().starts_with("HTTP 503: xx"), "{e} (after {took:?})");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;
    use std::net::TcpListener;

    /// A member that answers `first` at once and `late` 1.7 s later, then
    /// holds the connection open and says nothing more. Before, that late
    /// byte bought a whole read timeout more: 3.7 s for a 2 s call. The
    /// bound of 3 s leaves a loaded CI machine 1 s of slack.
    fn stalling(first: &'static [u8], late: &'static [u8]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            let _ = s.write_all(first);
            std::thread::sleep(Duration::from_millis(1700));
            let _ = s.write_all(late);
            std::thread::sleep(Duration::from_secs(6));
        });
        ep
    }

    fn timed_post(ep: &str) -> (io::Error, Duration) {
        let t = Instant::now();
        let e = post(&Resolver::system(), ep, "/v3/kv/range", "{}", Duration::from_secs(2)).unwrap_err();
        (e, t.elapsed())
    }

    /// A byte of the header just before the 2 s timeout, then nothing: the
    /// call fails at its timeout, not a whole socket read timeout later.
    #[test]
    fn a_header_stalling_near_the_deadline_fails_at_the_timeout() {
        let (e, took) = timed_post(&stalling(b"", b"H"));
        assert!(took < Duration::from_secs(3), "failed after {took:?}: {e}");
    }

    /// The same inside a body.
    #[test]
    fn a_body_stalling_near_the_deadline_fails_at_the_timeout() {
        let (e, took) = timed_post(&stalling(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\na", b"b"));
        assert!(took < Duration::from_secs(3), "failed after {took:?}: {e}");
    }

    /// A member that takes the request a few KiB at a time, a little
    /// faster than each write's timeout, and never answers: a request of
    /// megabytes (a publish of a 256 KiB record is a third larger in
    /// base64) is still bounded by the 2 s of its call, not by 2 s per
    /// write.
    #[test]
    fn a_request_read_slowly_fails_at_the_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(300));
                if matches!(s.read(&mut buf), Ok(0) | Err(_)) {
                    return;
                }
            }
        });
        let body = "x".repeat(8 << 20);
        let t = Instant::now();
        let e = post(&Resolver::system(), &ep, "/v3/kv/put", &body, Duration::from_secs(2)).unwrap_err();
        let took = t.elapsed();
        assert!(took < Duration::from_secs(3), "failed after {took:?}: {e}");
    }
}

#[cfg(test)]
mod eof_tests {
    use super::*;
    use std::net::TcpListener;

    /// POSTs `{}` to a server that reads the request, writes `reply` and
    /// closes; what `post` made of it, once the server is done.
    fn serve_once(reply: &'static [u8]) -> io::Result<Response> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            s.write_all(reply).unwrap();
        });
        let r = post(&Resolver::system(), &ep, "/x", "{}", Duration::from_secs(30));
        server.join().unwrap();
        r
    }

    #[test]
    fn a_body_cut_short_is_an_error_not_a_wait_for_the_deadline() {
        let e = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    /// Content-Length is digits only (RFC 9110, 8.6): `parse::<usize>`
    /// also takes a leading `+`.
    #[test]
    fn a_signed_content_length_is_refused() {
        let r = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc");
        assert_eq!(r.map(|r| r.body).map_err(|e| e.to_string()), Err("bad Content-Length".to_string()));
    }

    /// A status code is three digits (RFC 9110, 15): `parse::<u16>` also
    /// takes `+200`, and `2000` is no status either.
    #[test]
    fn a_status_code_is_three_digits() {
        for line in ["HTTP/1.1 +200 OK", "HTTP/1.1 +20 OK", "HTTP/1.1 2000 OK"] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let ep = l.local_addr().unwrap().to_string();
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut req = [0u8; 1024];
                let _ = s.read(&mut req);
                s.write_all(format!("{line}\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes()).unwrap();
            });
            let r = post(&Resolver::system(), &ep, "/x", "{}", Duration::from_secs(30));
            server.join().unwrap();
            let e = r.map(|r| r.status).unwrap_err();
            assert!(e.to_string().starts_with("bad status line"), "{line}: {e}");
        }
    }
}

#[cfg(test)]
mod resolve_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// A lookup that hangs until the test drops the sender (a resolver
    /// whose DNS server never answers), counting its calls; it then answers
    /// 127.0.0.1:1, where nothing listens.
    fn hanging() -> (Arc<Resolver>, mpsc::Sender<()>, Arc<AtomicUsize>) {
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let resolver = Resolver::new(Box::new(move |_: &str| {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = gate.lock().unwrap_or_else(|p| p.into_inner()).recv();
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], 1))])
        }));
        (resolver, release, calls)
    }

    /// `post` on a thread of its own: an unbounded lookup would hang the
    /// test, so the test gives up waiting (far beyond the call's 100 ms
    /// bound) and fails instead.
    fn post_on_a_thread(resolver: &Arc<Resolver>) -> io::Result<Response> {
        let (tx, rx) = mpsc::channel();
        let r = resolver.clone();
        std::thread::spawn(move || {
            let _ = tx.send(post(&r, "etcd-1.hung.example:2379", "/v3/kv/range", "{}", Duration::from_millis(100)));
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the call is still blocked in the host lookup 20 s after its 100 ms timeout")
    }

    #[test]
    fn a_hung_host_lookup_fails_the_call_within_its_timeout() {
        let (resolver, release, calls) = hanging();
        let e = post_on_a_thread(&resolver).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("etcd-1.hung.example:2379"), "names the member: {e}");
        // The lookup still hangs: the next call waits for that one rather
        // than starting another, so a dead DNS server costs one thread per
        // host, not one per call.
        let e = post_on_a_thread(&resolver).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one lookup in flight per host");
        // Once it answers, calls use its address (nothing listens there).
        drop(release);
        let e = post_on_a_thread(&resolver).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[test]
    fn a_lookup_that_panics_fails_its_callers_at_once() {
        let resolver = Resolver::new(Box::new(|_: &str| panic!("resolver bug")));
        let e = post(&resolver, "etcd-2.example:2379", "/v3/kv/range", "{}", Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
        // And the next call looks up again rather than waiting on it.
        let e = post(&resolver, "etcd-2.example:2379", "/v3/kv/range", "{}", Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
    }

    /// A name with two addresses, the first refusing: `localhost` on a
    /// host whose /etc/hosts lists `::1` first, with etcd on its default
    /// `http://localhost:2379`, which listens on 127.0.0.1 only. The call
    /// goes on to the next address, as a connection by name does, rather
    /// than taking the member for down.
    #[test]
    fn a_name_whose_first_address_refuses_is_reached_at_the_next() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let there = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        });
        let resolver = Resolver::new(Box::new(move |_: &str| Ok(vec![SocketAddr::from(([127, 0, 0, 1], 1)), there])));
        let r = post(&resolver, "etcd-1.example:2379", "/v3/kv/range", "{}", Duration::from_secs(5));
        assert_eq!(r.map(|r| (r.status, r.body)).map_err(|e| e.to_string()), Ok((200, b"{}".to_vec())));
    }

    #[test]
    fn an_address_literal_needs_no_lookup() {
        let (resolver, _release, calls) = hanging();
        let e = post(&resolver, "127.0.0.1:1", "/v3/kv/range", "{}", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}
