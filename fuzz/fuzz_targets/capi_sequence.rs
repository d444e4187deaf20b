//! Structure-aware C-ABI sequence fuzzer.
//!
//! Each input is a sequence of `Op`s (derived with `arbitrary`) run against
//! the exported `racaffinity_*` functions of rust/ffi, across two cluster
//! slots (so handles and leases can be foreign), with stale, freed, NULL,
//! random and bit-flipped handles, stale/double/foreign/forged leases, NULL
//! pointers and oversized spans.
//!
//! A small model follows what each call must return and asserts the
//! documented result code for **every** call (include/racaffinity.h and the
//! README): argument checks (NULL, INVALID_UTF8, INVALID_ARGUMENT for a gtrid
//! outside 1..=64 bytes or a key outside 1..=1024, bad enum values), handle
//! validity (a freed, stale, random or flipped handle is INVALID_HANDLE),
//! registries (UNKNOWN_TRANSACTION, INVALID_LEASE for a released, foreign or
//! forged lease, UNKNOWN_NODE for an unknown or removed node id (a
//! probe or outcome report takes a removed one and ignores it),
//! DUPLICATE_NODE), exact outputs where the model knows them (node count,
//! names, addresses, find, key partition, pin release flags, heartbeat,
//! recovery scope, buffer sizes), routing invariants where it does not know
//! the node states (events and passive health move them): a routed node is a
//! live node, a prepared transaction never moves, 2PC routes (`tx_route`)
//! are never refused and with `recovery.scope = node` go to the owner, and a
//! routing refusal is only one the configuration allows (STRICT_AFFINITY only
//! for a strict scope, NO_NODE_AVAILABLE only with `panic = fail` or no live
//! node, PREPARED_NODE_UNAVAILABLE only for a prepared transaction).
//!
//! The later exports are driven the same way: session routing and tokens
//! (new, decode, route, route one of several; made, forged, garbled and
//! foreign tokens), the epoch
//! page (read after every op and after its cluster is freed, freed twice,
//! foreign pointers), context route cacheable, count host hits, auto-pin,
//! context pin for a scope and release, partition map replace and load
//! failed, and both connect-string builders (pool values whose validity the
//! model knows, arbitrary text, invalid UTF-8, NULL, oversized text, bad
//! forms, small buffers). Exact where the model knows: a new token decodes
//! to what session_routing answers, decode names the node each id hashes
//! from, host hits move the metrics by exactly `count`, a replaced map's
//! partitions belong to the nodes given and its epoch grows, a released
//! context has nothing left to unpin, connect strings are the documented
//! text. Every export but racaffinity_version and the testing-only calls.
//!
//! An error that is an answer about the arguments or a registry (NULL,
//! INVALID_*, UNKNOWN_*, DUPLICATE_NODE, BUFFER_TOO_SMALL, EVENT_PARSE,
//! FOREIGN_EVENT) must change nothing: the metrics JSON of both clusters is
//! compared before and after such a call.
//!
//! Never PANIC: libFuzzer's panic hook aborts on any panic, even one the
//! boundary would catch, so a panic is a crash with its location; and every
//! result is checked against RACAFFINITY_RESULT_PANIC as well.
//!
//! Known, reported findings are tolerated only through fuzz/known-findings.txt
//! (see docs/fuzzing.md); each check site has a name for that file.
#![no_main]

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr::{null, null_mut};
use std::rc::Rc;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use racaffinity::config::MAX_PARTITIONS;
use racaffinity_ffi::capi::buffer::RACAFFINITY_MAX_STRING_BYTES;
use racaffinity_ffi::capi::cluster::*;
use racaffinity_ffi::capi::connect::*;
use racaffinity_ffi::capi::data::*;
use racaffinity_ffi::capi::epoch::*;
use racaffinity_ffi::capi::event::*;
use racaffinity_ffi::capi::handle::racaffinity_cluster;
use racaffinity_ffi::capi::metrics::*;
use racaffinity_ffi::capi::pick::*;
use racaffinity_ffi::capi::request::*;
use racaffinity_ffi::capi::result::*;
use racaffinity_ffi::capi::session::*;
use racaffinity_ffi::capi::token::*;
use racaffinity_ffi::capi::transaction::*;
use racaffinity_ffi::capi::types::*;
use racaffinity_ffi::capi::ucp::*;

type R = racaffinity_result;

// ---------------------------------------------------------------------------
// Configurations the sequences run on
// ---------------------------------------------------------------------------

struct Cfg {
    text: &'static str,
    names: &'static [&'static str],
    addresses: &'static [&'static str],
    panic_fail: bool,
    strict: [bool; 4],
    auto_pin: bool,
    scope_db: bool,
    partitions: u32,
    data_balanced: bool,
    filtered: bool,
    heartbeat: (u64, u32),
}

const CFGS: [Cfg; 4] = [
    Cfg {
        text: "name = a\ndatabase = orcl\nservice = svc\nnodes = MYDB1, MYDB2, MYDB3\nnode.MYDB1.address = h1:1521\n\
               node.MYDB2.address = h2:1521\nnode.MYDB3.address = H2:1522",
        names: &["MYDB1", "MYDB2", "MYDB3"],
        addresses: &["h1:1521", "h2:1521", "H2:1522"],
        panic_fail: false,
        strict: [false; 4],
        auto_pin: false,
        scope_db: false,
        partitions: 4096,
        data_balanced: false,
        filtered: true,
        heartbeat: (10_000, 3),
    },
    Cfg {
        text: "name = b\ndatabase = orcl\nservice = svc\nnodes = MYDB1, MYDB2\npanic = fail\nthread.strict = true\n\
               transaction.strict = true\nsession.strict = true\ndata.strict = true\nrecovery.scope = database\n\
               health.eject_after_failures = 1\nheartbeat.interval = 2s\nheartbeat.misses = 1",
        names: &["MYDB1", "MYDB2"],
        addresses: &["", ""],
        panic_fail: true,
        strict: [true; 4],
        auto_pin: false,
        scope_db: true,
        partitions: 4096,
        data_balanced: false,
        filtered: true,
        heartbeat: (2_000, 1),
    },
    Cfg {
        text: "nodes = X1\nthread.auto_pin = true\npolicy = round_robin\nsession.mode = stateless\ndata.partitions = 7",
        names: &["X1"],
        addresses: &[""],
        panic_fail: false,
        strict: [false; 4],
        auto_pin: true,
        scope_db: false,
        partitions: 7,
        data_balanced: false,
        filtered: false,
        heartbeat: (10_000, 3),
    },
    Cfg {
        text: "nodes = W1, W2, W3, W4\nnode.W1.weight = 1\nnode.W2.weight = 5\nnode.W4.address = [::1]:1\n\
               policy = weighted\ntransaction.placement = balanced\ndata.placement = balanced\n\
               session.placement = rendezvous\ndata.partitions = 16\ndata.partition.3 = W2\npanic = fail",
        names: &["W1", "W2", "W3", "W4"],
        addresses: &["", "", "", "[::1]:1"],
        panic_fail: true,
        strict: [false; 4],
        auto_pin: false,
        scope_db: false,
        partitions: 16,
        data_balanced: true,
        filtered: false,
        heartbeat: (10_000, 3),
    },
];

const GTRIDS: [&[u8]; 5] = [b"gtrid-1", b"gtrid-2", b"g", b"\x00\xff\x80", &[7u8; 64]];
const KEYS: [&[u8]; 4] = [b"customer:42", b"sess-1", b"\x00", &[b'k'; 1024]];
const BAD_EVENTS: [&str; 5] = [
    "",
    "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=MYDB1 status=sideways",
    "VERSION=1.0 database=orcl service=svc { {instance=MYDB1 percent=150 flag=GOOD aff=TRUE} }",
    "NOPE VERSION=1.0",
    "VERSION=1.0 database=orcl service=svc { {instance=MYDB1 percent=50 flag=GOOD aff=TRUE}",
];

// ---------------------------------------------------------------------------
// The input language
// ---------------------------------------------------------------------------

/// Which handle a call gets.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum H {
    /// The handle in slot 0/1 (live, or the last one freed there; NULL if none yet).
    Slot(bool),
    /// Any handle issued earlier in this input (often freed).
    Hist(u8),
    Null,
    /// Random bits: usually not a handle; equal to a live one only by construction.
    Random(u64),
    /// A slot's handle with one bit flipped (a corrupt handle).
    Flip(bool, u8),
}

#[derive(Arbitrary, Debug, Clone)]
enum Span {
    Pool(u8),
    Raw(Vec<u8>),
    /// Just over or under a limit (64 for gtrids, 1024 for keys).
    Edge(u8),
    /// A NULL pointer with this length.
    Null(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum NodeSel {
    Id(u8),
    Raw(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum NameSel {
    /// A configured or added name, optionally in lower case.
    Existing(u8, bool),
    New(u8),
    Invalid,
    NonUtf8,
    Null,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LeaseSel {
    Issued(u8),
    /// A lease struct the caller made up: some handle as owner, some token.
    Forged(H, u64),
    Null,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ctx {
    Issued(u8),
    Raw(u64),
}

#[derive(Arbitrary, Debug, Clone)]
struct Req {
    gtrid: Option<Span>,
    key: Option<Span>,
    key_i64: Option<i64>,
    session: Option<Span>,
    ctx: Option<Ctx>,
}

#[derive(Arbitrary, Debug, Clone)]
enum Ev {
    Down(u8, bool),
    Up(u8),
    Rlb(u8, u8, u8, bool),
    NodeDown(bool),
    Foreign,
    Malformed(u8),
    UnknownInstance,
    NonUtf8,
    Null,
    Raw(String),
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    New {
        slot: bool,
        cfg: u8,
    },
    NewBad {
        kind: u8,
    },
    Free {
        h: H,
    },
    NodeCount {
        h: H,
        null_out: bool,
    },
    Heartbeat {
        h: H,
    },
    RecoveryScope {
        h: H,
    },
    SetStrict {
        h: H,
        scope: u32,
        strict: bool,
    },
    ThreadPin {
        h: H,
        null_out: bool,
    },
    ThreadUnpin {
        h: H,
    },
    ContextNew {
        h: H,
        null_out: bool,
    },
    ContextPin {
        h: H,
        ctx: Ctx,
    },
    ContextUnpin {
        h: H,
        ctx: Ctx,
    },
    ContextRoute {
        h: H,
        ctx: Ctx,
        lease: bool,
    },
    Route {
        h: H,
        null_out: bool,
    },
    Pick {
        h: H,
        null_out: bool,
    },
    PickHostBegins {
        h: H,
        null_out: bool,
    },
    LeaseBegin {
        h: H,
        node: NodeSel,
    },
    LeaseRelease {
        h: H,
        lease: LeaseSel,
        outcome: u32,
    },
    TxBegin {
        h: H,
        g: Span,
        null_out: bool,
    },
    TxBeginOn {
        h: H,
        g: Span,
        node: NodeSel,
    },
    TxBeginFor {
        h: H,
        g: Span,
        req: Option<Req>,
    },
    TxBeginForToken {
        h: H,
        g: Span,
        req: Option<Req>,
        tok: Tok,
    },
    TxPrepared {
        h: H,
        g: Span,
    },
    TxRoute {
        h: H,
        g: Span,
    },
    TxEnd {
        h: H,
        g: Span,
    },
    TxComplete {
        h: H,
        g: Span,
    },
    TxRecovered {
        h: H,
        g: Span,
        node: NodeSel,
    },
    SessionRoute {
        h: H,
        k: Span,
    },
    SessionEnd {
        h: H,
        k: Span,
    },
    KeyRoute {
        h: H,
        k: Span,
    },
    KeyRouteI64 {
        h: H,
        v: i64,
    },
    KeyPartition {
        h: H,
        k: Span,
    },
    PartitionOwner {
        h: H,
        p: u32,
    },
    RequestPick {
        h: H,
        req: Option<Req>,
    },
    Event {
        h: H,
        ev: Ev,
    },
    Metrics {
        h: H,
        cap: u16,
        null_buf: bool,
        prometheus: bool,
    },
    NodeAdd {
        h: H,
        name: NameSel,
        weight: u32,
        address: bool,
    },
    NodeRemove {
        h: H,
        name: NameSel,
    },
    NodeSetState {
        h: H,
        name: NameSel,
        state: u32,
    },
    NodeGetState {
        h: H,
        node: NodeSel,
    },
    NodeFind {
        h: H,
        name: NameSel,
    },
    NodeName {
        h: H,
        node: NodeSel,
        cap: u8,
        address: bool,
    },
    Probe {
        h: H,
        node: NodeSel,
        ok: bool,
    },
    Outcome {
        h: H,
        node: NodeSel,
        ok: bool,
    },
    ResultMessage {
        code: u32,
        cap: u8,
    },
    SessionRouting {
        h: H,
        k: Span,
        nulls: u8,
    },
    TokenNew {
        h: H,
        sid: Text,
        cap: u8,
    },
    TokenDecode {
        h: H,
        tok: Tok,
        nulls: u8,
        cap: u8,
    },
    TokenRoute {
        h: H,
        tok: Tok,
        nulls: u8,
        cap: u8,
    },
    EpochPage {
        h: H,
        null_out: bool,
    },
    EpochFree {
        page: PageSel,
    },
    RouteCacheable {
        h: H,
        ctx: Ctx,
        nulls: u8,
    },
    /// `racaffinity_cluster_count_host_hits` (no scope: the thread's) or
    /// `racaffinity_cluster_count_host_hits_for` with a scope, in range or not.
    CountHostHits {
        h: H,
        node: NodeSel,
        scope: Option<u8>,
        count: Count,
    },
    /// A host lease's end reported to the library: NEUTRAL (which changes no
    /// state the model follows) or a code that is no outcome.
    HostLeaseEnd {
        h: H,
        node: NodeSel,
        outcome: u32,
    },
    /// A pinned pick for a host that leases cached routes itself.
    PickHostLeasable {
        h: H,
        ctx: Ctx,
        nulls: u8,
    },
    AutoPin {
        h: H,
        null_out: bool,
    },
    ContextPinFor {
        h: H,
        ctx: Ctx,
        scope: u32,
        null_out: bool,
    },
    ContextRelease {
        h: H,
        ctx: Ctx,
        null_out: bool,
    },
    MapReplace {
        h: H,
        entries: Vec<(u32, NameSel)>,
        source: Text,
        nulls: u8,
    },
    MapLoadFailed {
        h: H,
        source: Text,
        error: Text,
    },
    Connect {
        form: u32,
        host: Text,
        port: u16,
        service: Text,
        instance: Text,
        cap: u16,
    },
    AddressConnect {
        form: u32,
        address: Text,
        default_port: u16,
        service: Text,
        instance: Text,
        cap: u16,
    },
    /// `racaffinity_session_tokens_route`. Skipped by `arbitrary`: a new
    /// variant would change the range every op's tag is read from, so each
    /// kept input would replay another scenario. Read from an input's second
    /// part instead ([`Later`]).
    #[arbitrary(skip)]
    TokensRoute {
        h: H,
        toks: Vec<Tok>,
        nulls: u8,
        cap: u8,
    },
}

/// A step of an input's second part ([`Input`]): any op, or one of the calls
/// added after the kept inputs were made.
#[derive(Arbitrary, Debug, Clone)]
enum Later {
    Op(Op),
    TokensRoute { h: H, toks: Vec<Tok>, nulls: u8, cap: u8 },
}

impl From<Later> for Op {
    fn from(l: Later) -> Op {
        match l {
            Later::Op(op) => op,
            Later::TokensRoute { h, toks, nulls, cap } => Op::TokensRoute { h, toks, nulls, cap },
        }
    }
}

/// An input: the op sequence as `Vec<Op>` has always read it (a byte with
/// the low bit set before each op, the first with it clear ends it), then
/// the bytes left after that end read as a `Vec<Later>`. The first part
/// reads every byte as it did before `Later` existed, so the kept inputs
/// (fuzz/regressions, fuzz/corpus) replay the same ops; those bytes were
/// ignored before, so new calls come only from there.
#[derive(Debug)]
struct Input {
    ops: Vec<Op>,
    later: Vec<Later>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let rest = std::mem::replace(u, Unstructured::new(&[])).take_rest();
        Self::arbitrary_take_rest(Unstructured::new(rest))
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> arbitrary::Result<Self> {
        // What `Vec::<Op>::arbitrary_take_rest` does (arbitrary 1.x), kept
        // by hand so the bytes after the end stay for the second part.
        let mut ops = Vec::new();
        while u.arbitrary::<bool>().unwrap_or(false) {
            ops.push(Op::arbitrary(&mut u)?);
        }
        // A second part that does not read ends the input after the first,
        // as such bytes did before.
        let later = Vec::<Later>::arbitrary_take_rest(u).unwrap_or_default();
        Ok(Input { ops, later })
    }
}

/// A C string argument.
#[derive(Arbitrary, Debug, Clone)]
enum Text {
    /// From the op's pool of valid and invalid values (the model knows which).
    Pool(u8),
    /// Any text (NULs dropped): the model knows only what it may not do.
    Raw(String),
    NonUtf8,
    Null,
    /// Over the op's length limit (1024 for a session id, 64 for a source).
    Long(u8),
    /// Over the 1 MiB cap on every string argument: refused before the handle.
    Huge,
}

/// A session token argument.
#[derive(Arbitrary, Debug, Clone)]
enum Tok {
    /// One that token_new or token_route wrote earlier in this input.
    Made(u8),
    /// Well formed, naming nodes by name (this cluster's, another's, unknown).
    Named {
        sid: u8,
        primary: u8,
        backup: Option<u8>,
    },
    /// Well formed, with arbitrary node ids.
    Forged {
        sid: u8,
        primary: u32,
        backup: Option<u32>,
    },
    /// A made token with one byte replaced by a printable one.
    Garbled {
        t: u8,
        at: u16,
        to: u8,
    },
    Text(Text),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum PageSel {
    Issued(u8),
    Null,
    /// A hand-out that never came from epoch_page (never dereferenced).
    Foreign(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Count {
    Small(u8),
    Any(u64),
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Tx {
    branches: u32,
    prepared: bool,
    owner: u32,
}

struct Cl {
    bits: u64,
    live: bool,
    cfg: &'static Cfg,
    names: Vec<String>,
    addresses: Vec<String>,
    removed: Vec<bool>,
    admin: Vec<u32>,
    strict: [bool; 4],
    contexts: Vec<u64>,
    ctx_depth: HashMap<u64, u32>,
    /// Exact thread pin depth; `None` once auto-pin makes it unknowable.
    thread_depth: Option<u32>,
    /// Upper bound of the thread pin depth (to unpin before a free).
    thread_bound: u32,
    tx: HashMap<Vec<u8>, Tx>,
    /// Scopes (bit per `racaffinity_scope`) any context was pinned with:
    /// a context pin refuses by the scope it was made with.
    ctx_scopes: u8,
    /// Contexts whose depth the model cannot know: session-scoped pins are
    /// dropped lazily once their node withdraws affinity or is removed.
    ctx_inexact: std::collections::HashSet<u64>,
    /// The explicit partition map's epoch last returned by partition_map_replace.
    map_epoch: u64,
    load_failures: u64,
}

impl Cl {
    fn live_ids(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.names.len()).filter(|i| !self.removed[*i])
    }
    fn live_count(&self) -> usize {
        self.live_ids().count()
    }
    fn find(&self, name: &str) -> Option<usize> {
        self.live_ids().find(|i| self.names[*i].eq_ignore_ascii_case(name))
    }
    fn is_live_node(&self, id: u32) -> bool {
        (id as usize) < self.names.len() && !self.removed[id as usize]
    }
    /// Refusals a routing call may give, besides OK, for a scope.
    fn refusals(&self, scope: usize) -> Vec<R> {
        let mut v = vec![R::Ok];
        if self.cfg.panic_fail || self.live_count() == 0 {
            v.push(R::NoNodeAvailable);
        }
        if self.strict[scope] {
            v.push(R::StrictAffinity);
        }
        v
    }
}

struct Lease {
    lease: racaffinity_lease,
    cluster: usize,
    open: bool,
}

struct Model {
    hist: Vec<Cl>,
    slots: [Option<usize>; 2],
    leases: Vec<Lease>,
    allowed: Vec<&'static str>,
    /// Tokens the library wrote (token_new, token_route), for later calls.
    tokens: Vec<String>,
    pages: Vec<Page>,
    /// The metrics JSON of each cluster (by `hist` index) after the last
    /// op, where it is still known: an op drops the entry of the cluster it
    /// addressed (of every cluster when it has no handle or is `new`/`free`).
    seen: Vec<Option<Rc<str>>>,
    /// An op that can move a node's state, weight or membership ran.
    moved: bool,
}

/// An epoch page hand-out from racaffinity_cluster_epoch_page.
struct Page {
    word: *const u64,
    hand_out: *mut racaffinity_epoch_page,
    cluster: usize,
    last: u64,
    freed: bool,
}

/// The cluster handle an op addresses, if it has one: only that cluster's
/// metrics can change (an op without a handle may touch any of them).
fn op_handle(op: &Op) -> Option<H> {
    match op {
        Op::Free { h, .. }
        | Op::NodeCount { h, .. }
        | Op::Heartbeat { h, .. }
        | Op::RecoveryScope { h, .. }
        | Op::SetStrict { h, .. }
        | Op::ThreadPin { h, .. }
        | Op::ThreadUnpin { h, .. }
        | Op::ContextNew { h, .. }
        | Op::ContextPin { h, .. }
        | Op::ContextUnpin { h, .. }
        | Op::ContextRoute { h, .. }
        | Op::Route { h, .. }
        | Op::Pick { h, .. }
        | Op::PickHostBegins { h, .. }
        | Op::LeaseBegin { h, .. }
        | Op::LeaseRelease { h, .. }
        | Op::TxBegin { h, .. }
        | Op::TxBeginOn { h, .. }
        | Op::TxBeginFor { h, .. }
        | Op::TxBeginForToken { h, .. }
        | Op::TxPrepared { h, .. }
        | Op::TxRoute { h, .. }
        | Op::TxEnd { h, .. }
        | Op::TxComplete { h, .. }
        | Op::TxRecovered { h, .. }
        | Op::SessionRoute { h, .. }
        | Op::SessionEnd { h, .. }
        | Op::KeyRoute { h, .. }
        | Op::KeyRouteI64 { h, .. }
        | Op::KeyPartition { h, .. }
        | Op::PartitionOwner { h, .. }
        | Op::RequestPick { h, .. }
        | Op::Event { h, .. }
        | Op::Metrics { h, .. }
        | Op::NodeAdd { h, .. }
        | Op::NodeRemove { h, .. }
        | Op::NodeSetState { h, .. }
        | Op::NodeGetState { h, .. }
        | Op::NodeFind { h, .. }
        | Op::NodeName { h, .. }
        | Op::Probe { h, .. }
        | Op::Outcome { h, .. }
        | Op::SessionRouting { h, .. }
        | Op::TokenNew { h, .. }
        | Op::TokenDecode { h, .. }
        | Op::TokenRoute { h, .. }
        | Op::EpochPage { h, .. }
        | Op::RouteCacheable { h, .. }
        | Op::CountHostHits { h, .. }
        | Op::HostLeaseEnd { h, .. }
        | Op::PickHostLeasable { h, .. }
        | Op::AutoPin { h, .. }
        | Op::ContextPinFor { h, .. }
        | Op::ContextRelease { h, .. }
        | Op::MapReplace { h, .. }
        | Op::MapLoadFailed { h, .. }
        | Op::TokensRoute { h, .. } => Some(*h),
        _ => None,
    }
}

/// Result codes that answer "bad argument / no such thing": such a call must
/// leave every cluster as it was.
fn is_no_change_error(r: R) -> bool {
    matches!(
        r,
        R::NullArgument
            | R::InvalidHandle
            | R::InvalidUtf8
            | R::InvalidArgument
            | R::BufferTooSmall
            | R::Config
            | R::UnknownNode
            | R::DuplicateNode
            | R::UnknownTransaction
            | R::EventParse
            | R::ForeignEvent
            | R::InvalidLease
    )
}

/// The variant name of an op (`TxBeginFor`), for check-site names.
fn op_name(op: &Op) -> String {
    let d = format!("{op:?}");
    d.split([' ', '{', '(']).next().unwrap_or("").to_string()
}

/// Metrics JSON with every `tx_spans` counter zeroed.
fn without_spans(snapshots: &[Rc<str>]) -> Vec<serde_json::Value> {
    snapshots
        .iter()
        .map(|j| {
            let mut v: serde_json::Value = serde_json::from_str(j).expect("metrics JSON");
            v["tx_spans"] = 0.into();
            for n in v["nodes"].as_array_mut().expect("nodes").iter_mut() {
                n["tx_spans"] = 0.into();
            }
            v
        })
        .collect()
}

fn known_findings() -> Vec<&'static str> {
    include_str!("../known-findings.txt")
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().next().unwrap())
        .collect()
}

/// A span argument: the pointer, the length and the bytes the callee sees.
struct SpanArg {
    _buf: Vec<u8>,
    ptr: *const u8,
    len: usize,
    bytes: Option<Vec<u8>>,
}

fn span(s: &Span, pool: &[&[u8]], limit: usize) -> SpanArg {
    let bytes = match s {
        Span::Pool(i) => pool[usize::from(*i) % pool.len()].to_vec(),
        Span::Raw(v) => v.clone(),
        Span::Edge(d) => vec![b'e'; (limit + 2).saturating_sub(usize::from(*d % 5))],
        Span::Null(len) => return SpanArg { _buf: Vec::new(), ptr: null(), len: usize::from(*len), bytes: None },
    };
    // A dangling non-NULL pointer for empty spans: the callee must not read it.
    let ptr = if bytes.is_empty() { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { bytes.as_ptr() };
    SpanArg { ptr, len: bytes.len(), bytes: Some(bytes.clone()), _buf: bytes }
}

impl SpanArg {
    /// NULL_ARGUMENT for a NULL pointer with a length, else the bytes.
    fn null_err(&self) -> Option<R> {
        (self.bytes.is_none() && self.len > 0).then_some(R::NullArgument)
    }
    fn data(&self) -> &[u8] {
        self.bytes.as_deref().unwrap_or(&[])
    }
}

impl Model {
    fn check(&self, site: &'static str, got: R, want: R, what: &dyn std::fmt::Debug) -> bool {
        assert_ne!(got, R::Panic, "{site}: PANIC result for {what:?}");
        if got == want {
            return true;
        }
        if self.allowed.contains(&site) {
            return false;
        }
        panic!("{site}: got {got:?}, documented {want:?} for {what:?}");
    }

    fn check_in(&self, site: &'static str, got: R, want: &[R], what: &dyn std::fmt::Debug) {
        assert_ne!(got, R::Panic, "{site}: PANIC result for {what:?}");
        assert!(want.contains(&got), "{site}: got {got:?}, expected one of {want:?} for {what:?}");
    }

    fn holds(&self, site: &str, cond: bool, what: &dyn std::fmt::Debug) {
        // Not `contains`: `site` may be a String's (`error.changes_nothing.<op>`), not 'static.
        if !cond && !self.allowed.iter().any(|a| a.eq(&site)) {
            panic!("{site}: property violated: {what:?}");
        }
    }

    /// The handle bits a selector names, and the live model cluster they are.
    fn resolve(&self, h: H) -> (*mut racaffinity_cluster, Option<usize>) {
        let bits = match h {
            H::Slot(s) => self.slots[usize::from(s)].map_or(0, |i| self.hist[i].bits),
            H::Hist(i) if !self.hist.is_empty() => self.hist[usize::from(i) % self.hist.len()].bits,
            H::Hist(_) | H::Null => 0,
            H::Random(b) => b,
            H::Flip(s, bit) => self.slots[usize::from(s)].map_or(0, |i| self.hist[i].bits ^ (1u64 << (bit % 64))),
        };
        let live = self.hist.iter().position(|c| c.live && c.bits == bits);
        (bits as usize as *mut racaffinity_cluster, live)
    }

    /// The result a handle argument gives before anything else about it.
    fn handle_err(p: *const racaffinity_cluster, live: Option<usize>) -> Option<R> {
        if p.is_null() {
            Some(R::NullArgument)
        } else if live.is_none() {
            Some(R::InvalidHandle)
        } else {
            None
        }
    }

    fn metrics_of(bits: u64) -> String {
        // One reused buffer: a fresh zeroed 64 KiB per snapshot (two per op)
        // cost most of this target's speed.
        thread_local! {
            static BUF: std::cell::RefCell<Vec<c_char>> = std::cell::RefCell::new(vec![0; 4096]);
        }
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            loop {
                let mut need = 0usize;
                let r = unsafe {
                    racaffinity_metrics_json(
                        bits as usize as *const racaffinity_cluster,
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut need,
                    )
                };
                match r {
                    R::Ok => {
                        // SAFETY: `c_char` and `u8` have one size and alignment; `need - 1`
                        // bytes were written. One copy, not a loop through the sanitizer.
                        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), need - 1) };
                        return std::str::from_utf8(bytes).expect("UTF-8 metrics").to_string();
                    }
                    R::BufferTooSmall => buf.resize(need * 2, 0),
                    r => panic!("metrics snapshot: {r:?}"),
                }
            }
        })
    }

    /// The metrics JSON of every live cluster. One taken per op and only of
    /// the cluster the op addressed: the others' are still those read after
    /// the op that last addressed them (an op on one cluster that changed
    /// another would show as a difference at that cluster's next failed op).
    /// Shared, not copied: a snapshot serves as one op's "after" and the
    /// next one's "before".
    fn snapshot(&mut self) -> Vec<Rc<str>> {
        self.seen.resize(self.hist.len(), None);
        let mut out = Vec::with_capacity(2);
        for (i, c) in self.hist.iter().enumerate() {
            if c.live {
                out.push(self.seen[i].get_or_insert_with(|| Self::metrics_of(c.bits).into()).clone());
            }
        }
        out
    }

    fn route_ok(&self, site: &'static str, c: &Cl, r: &racaffinity_route) {
        self.holds(site, c.is_live_node(r.node), &(r, &c.names, &c.removed));
    }

    /// Unpins the calling thread from `c` as often as it may be pinned, so a
    /// free never strands a thread pin. (A pin left behind by a free can
    /// never be released and slows this thread forever: issue 13, failure 1,
    /// reported; the fuzzer would otherwise drown in that known leak.)
    fn unpin_all(&mut self, i: usize) {
        let bits = self.hist[i].bits as usize as *const racaffinity_cluster;
        for _ in 0..self.hist[i].thread_bound {
            let mut released = false;
            let r = unsafe { racaffinity_thread_unpin(bits, &mut released) };
            assert_eq!(r, R::Ok, "thread_unpin before free");
            if released {
                break;
            }
        }
        self.hist[i].thread_depth = Some(0);
        self.hist[i].thread_bound = 0;
    }

    fn free_slot_cluster(&mut self, i: usize) {
        self.unpin_all(i);
        self.check_pages();
        let r = racaffinity_cluster_free(self.hist[i].bits as usize as *mut racaffinity_cluster);
        self.check("cluster_free.live", r, R::Ok, &i);
        self.hist[i].live = false;
        // "closing the cluster advances it once more"
        for pg in self.pages.iter().filter(|p| !p.freed && p.cluster == i) {
            let now = read_word(pg.word);
            self.holds("epoch_page.close_advances", now > pg.last, &(pg.last, now));
        }
        self.check_pages();
    }

    /// Reads every epoch word not yet freed: it never goes back.
    fn check_pages(&mut self) {
        for k in 0..self.pages.len() {
            if self.pages[k].freed {
                continue;
            }
            let now = read_word(self.pages[k].word);
            let last = self.pages[k].last;
            self.holds("epoch_page.monotonic", now >= last, &(last, now));
            self.pages[k].last = now;
        }
    }

    /// The epoch word of a live page of cluster `c`, if the input mapped one.
    fn epoch_of(&self, c: usize) -> Option<u64> {
        self.pages.iter().find(|p| !p.freed && p.cluster == c).map(|p| read_word(p.word))
    }

    /// Refusals of a context pin or route: by the scope the pin was made with.
    fn ctx_refusals(&self, c: usize) -> Vec<R> {
        let cl = &self.hist[c];
        let mut v = cl.refusals(0);
        for s in 1..3 {
            if cl.ctx_scopes & (1 << s) != 0 {
                v.extend(cl.refusals(s));
            }
        }
        v
    }

    fn new_cluster(&mut self, slot: bool, cfg: u8) {
        if let Some(i) = self.slots[usize::from(slot)] {
            if self.hist[i].live {
                self.free_slot_cluster(i);
            }
        }
        let cfg = &CFGS[usize::from(cfg) % CFGS.len()];
        let text = CString::new(cfg.text).unwrap();
        let mut out: *mut racaffinity_cluster = null_mut();
        let r = unsafe { racaffinity_cluster_new(text.as_ptr(), &mut out) };
        self.check("cluster_new.ok", r, R::Ok, &cfg.text);
        let bits = out as usize as u64;
        assert!(bits != 0 && !self.hist.iter().any(|c| c.live && c.bits == bits), "a new handle is fresh");
        self.hist.push(Cl {
            bits,
            live: true,
            cfg,
            names: cfg.names.iter().map(|s| s.to_string()).collect(),
            addresses: cfg.addresses.iter().map(|s| s.to_string()).collect(),
            removed: vec![false; cfg.names.len()],
            admin: vec![0; cfg.names.len()],
            strict: cfg.strict,
            contexts: Vec::new(),
            ctx_depth: HashMap::new(),
            thread_depth: if cfg.auto_pin { None } else { Some(0) },
            thread_bound: u32::from(cfg.auto_pin),
            tx: HashMap::new(),
            ctx_scopes: 1,
            ctx_inexact: Default::default(),
            map_epoch: 0,
            load_failures: 0,
        });
        self.slots[usize::from(slot)] = Some(self.hist.len() - 1);
    }

    fn name_arg(&self, live: Option<usize>, sel: NameSel) -> (Option<CString>, String) {
        let names: &[String] = live.map_or(&[], |i| &self.hist[i].names);
        match sel {
            NameSel::Existing(i, lower) if !names.is_empty() => {
                let n = &names[usize::from(i) % names.len()];
                let n = if lower { n.to_ascii_lowercase() } else { n.clone() };
                (Some(CString::new(n.clone()).unwrap()), n)
            }
            NameSel::Existing(..) => (Some(CString::new("MYDB1").unwrap()), "MYDB1".into()),
            NameSel::New(i) => {
                let n = format!("NEW{}", i % 8);
                (Some(CString::new(n.clone()).unwrap()), n)
            }
            NameSel::Invalid => (Some(CString::new("bad name").unwrap()), "bad name".into()),
            NameSel::NonUtf8 => (Some(CString::new(vec![b'N', 0xff, 0xfe]).unwrap()), String::new()),
            NameSel::Null => (None, String::new()),
        }
    }

    fn node_arg(&self, live: Option<usize>, sel: NodeSel) -> u32 {
        match sel {
            NodeSel::Id(i) => {
                let n = live.map_or(4, |c| self.hist[c].names.len() + 2);
                u32::from(i) % n as u32
            }
            NodeSel::Raw(v) => v,
        }
    }

    fn ctx_arg(&self, live: Option<usize>, sel: Ctx) -> u64 {
        match (sel, live) {
            (Ctx::Issued(i), Some(c)) if !self.hist[c].contexts.is_empty() => {
                let v = &self.hist[c].contexts;
                v[usize::from(i) % v.len()]
            }
            (Ctx::Issued(i), _) => u64::from(i),
            (Ctx::Raw(v), _) => v,
        }
    }

    /// The outcome of a branch begin on a known transaction, checked and applied.
    fn begin_existing(&mut self, site: &'static str, c: usize, g: &[u8], r: R, route: &racaffinity_route) {
        let t = self.hist[c].tx[g];
        let mut want = self.hist[c].refusals(1);
        if t.prepared {
            want.push(R::PreparedNodeUnavailable);
            want.retain(|x| *x != R::StrictAffinity);
        }
        self.check_in(site, r, &want, &(g, t));
        if r == R::Ok {
            if t.prepared {
                // A prepared branch never moves (README: "Prepared: never moves").
                self.holds("tx.prepared_never_moves", route.node == t.owner, &(g, t, route));
            } else {
                self.holds(
                    "tx.moves_only_by_repin",
                    route.node == t.owner || route.kind == racaffinity_route_kind::Repinned,
                    &(g, t, route),
                );
                self.route_ok("tx.route_live", &self.hist[c], route);
            }
            let e = self.hist[c].tx.get_mut(g).unwrap();
            e.owner = route.node;
            e.branches += 1;
        }
    }

    fn begin_new(&mut self, site: &'static str, c: usize, g: &[u8], r: R, route: &racaffinity_route, preferred: bool) {
        let want = self.hist[c].refusals(1);
        // A strict scope refuses a new gtrid when tx_begin_on's preferred node
        // takes no new work (include/racaffinity.h), and, since strict
        // placement agrees across processes (docs/semantics.md, "One guard for
        // every strict placement"), while a node's inputs settle or this
        // process's own evidence takes the gtrid's node out: only after an op
        // that can move a node (`moved`; the settle time outlasts an input).
        let want: Vec<R> = want.into_iter().filter(|x| *x != R::StrictAffinity || preferred || self.moved).collect();
        self.check_in(site, r, &want, &g);
        if r == R::Ok {
            self.route_ok("tx.placed_live", &self.hist[c], route);
            self.hist[c].tx.insert(g.to_vec(), Tx { branches: 1, prepared: false, owner: route.node });
        }
    }

    fn record_lease(&mut self, c: usize, l: racaffinity_lease) {
        self.holds("lease.owner_is_handle", l.owner == self.hist[c].bits, &l);
        self.route_ok("lease.node_live", &self.hist[c], &racaffinity_route { node: l.node, kind: l.kind });
        self.holds("lease.fresh_token", !self.leases.iter().any(|x| x.cluster == c && x.lease.token == l.token), &l);
        self.leases.push(Lease { lease: l, cluster: c, open: true });
    }

    fn gtrid_len_ok(g: &[u8]) -> bool {
        (1..=64).contains(&g.len())
    }
    fn key_len_ok(k: &[u8]) -> bool {
        (1..=1024).contains(&k.len())
    }

    // -----------------------------------------------------------------------

    fn run(&mut self, op: &Op) {
        // The state before this op is the state after the last one: nothing
        // runs between two ops but reads (check_pages), so one snapshot per
        // op serves both (two per failed op were a third of this target's
        // time), and it reads only the cluster the op addressed.
        let before = self.snapshot();
        // Resolved before the op runs: a free or new changes what a handle names.
        // `None`: every live cluster is read again after the op. `Some(None)`:
        // a handle that names no live cluster (NULL, freed, forged), 21 % of
        // all ops: such a call must stop at the handle, and re-reading every
        // live cluster after each one made 40,000 of 185,000 snapshots per
        // 100,000 ops. A change it made anyway still shows, as for the
        // cluster an op did not address, at that cluster's next failed op.
        let addressed = match op {
            Op::Free { .. } | Op::New { .. } => None,
            op => op_handle(op).map(|h| self.resolve(h).1),
        };
        if matches!(
            op,
            Op::Event { .. }
                | Op::NodeAdd { .. }
                | Op::NodeRemove { .. }
                | Op::NodeSetState { .. }
                | Op::Probe { .. }
                | Op::Outcome { .. }
                | Op::LeaseRelease { .. }
                | Op::HostLeaseEnd { .. }
                | Op::MapReplace { .. }
        ) {
            self.moved = true;
        }
        let r = self.step(op);
        self.check_pages();
        self.seen.resize(self.hist.len(), None);
        match addressed {
            Some(Some(i)) => self.seen[i] = None,
            Some(None) => {}
            None => self.seen.iter_mut().for_each(|s| *s = None),
        }
        let after = self.snapshot();
        if let Some(r) = r {
            assert_ne!(r, R::Panic, "PANIC from {op:?}");
            if is_no_change_error(r) {
                // Named per call, so an allow-list entry covers one reported call only.
                let mut site = format!("error.changes_nothing.{}", op_name(op));
                if matches!(op, Op::TokenRoute { .. } | Op::TokensRoute { .. }) && r == R::BufferTooSmall {
                    // token_route routes (and counts) before it writes the token, so a
                    // short buffer still says the node: its own site, in known-findings.txt.
                    site.push_str(".BufferTooSmall");
                }
                if matches!(op, Op::TxRecovered { .. }) && r == R::InvalidArgument {
                    // A split gtrid's refusal counts the span in `tx_spans`, once
                    // (docs/semantics.md, "Agreement across processes"): everything
                    // else stays as it was.
                    self.holds(&site, without_spans(&before) == without_spans(&after), &(op, r, &before, &after));
                } else {
                    self.holds(&site, before == after, &(op, r, &before, &after));
                }
            }
        }
    }

    /// Runs one op; returns the result code of the call under test.
    fn step(&mut self, op: &Op) -> Option<R> {
        match op.clone() {
            Op::New { slot, cfg } => {
                self.new_cluster(slot, cfg);
                None
            }
            Op::NewBad { kind } => {
                let mut out: *mut racaffinity_cluster = null_mut();
                let good = CString::new(CFGS[0].text).unwrap();
                let (r, want) = match kind % 5 {
                    0 => (unsafe { racaffinity_cluster_new(null(), &mut out) }, R::NullArgument),
                    1 => (unsafe { racaffinity_cluster_new(good.as_ptr(), null_mut()) }, R::NullArgument),
                    2 => {
                        let t = CString::new(vec![b'n', b'o', 0xc3, 0x28]).unwrap();
                        (unsafe { racaffinity_cluster_new(t.as_ptr(), &mut out) }, R::InvalidUtf8)
                    }
                    3 => {
                        let t = CString::new("nodes = A,,B").unwrap();
                        (unsafe { racaffinity_cluster_new(t.as_ptr(), &mut out) }, R::Config)
                    }
                    _ => {
                        let t = CString::new("nodes = A\nbogus = 1").unwrap();
                        (unsafe { racaffinity_cluster_new(t.as_ptr(), &mut out) }, R::Config)
                    }
                };
                self.check("cluster_new.bad", r, want, &kind);
                assert!(out.is_null(), "a failed cluster_new wrote a handle");
                Some(r)
            }
            Op::Free { h } => {
                let (p, live) = self.resolve(h);
                if let Some(i) = live {
                    self.free_slot_cluster(i);
                    // Its leases die with it: releasing one later is INVALID_HANDLE or INVALID_LEASE.
                    return Some(R::Ok);
                }
                let r = racaffinity_cluster_free(p);
                // NULL is accepted; anything else not live is INVALID_HANDLE.
                let want = if p.is_null() { R::Ok } else { R::InvalidHandle };
                self.check("cluster_free.invalid", r, want, &h);
                Some(r)
            }
            Op::NodeCount { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut n = u32::MAX;
                let r = unsafe { racaffinity_cluster_node_count(p, if null_out { null_mut() } else { &mut n }) };
                let want = if null_out { R::NullArgument } else { Self::handle_err(p, live).unwrap_or(R::Ok) };
                self.check("node_count", r, want, &h);
                if r == R::Ok {
                    let c = &self.hist[live.unwrap()];
                    self.holds("node_count.value", n as usize == c.live_count(), &(n, &c.removed));
                }
                Some(r)
            }
            Op::Heartbeat { h } => {
                let (p, live) = self.resolve(h);
                let (mut ms, mut misses) = (0u64, 0u32);
                let r = unsafe { racaffinity_cluster_heartbeat(p, &mut ms, &mut misses) };
                self.check("heartbeat", r, Self::handle_err(p, live).unwrap_or(R::Ok), &h);
                if r == R::Ok {
                    self.holds(
                        "heartbeat.value",
                        (ms, misses) == self.hist[live.unwrap()].cfg.heartbeat,
                        &(ms, misses),
                    );
                }
                Some(r)
            }
            Op::RecoveryScope { h } => {
                let (p, live) = self.resolve(h);
                let mut s = racaffinity_recovery_scope::Node;
                let r = unsafe { racaffinity_cluster_recovery_scope(p, &mut s) };
                self.check("recovery_scope", r, Self::handle_err(p, live).unwrap_or(R::Ok), &h);
                if r == R::Ok {
                    let db = self.hist[live.unwrap()].cfg.scope_db;
                    self.holds("recovery_scope.value", (s == racaffinity_recovery_scope::Database) == db, &s);
                }
                Some(r)
            }
            Op::SetStrict { h, scope, strict } => {
                let (p, live) = self.resolve(h);
                let scope = scope % 6;
                let r = racaffinity_cluster_set_strict(p, scope, strict);
                let want = if scope > 3 { R::InvalidArgument } else { Self::handle_err(p, live).unwrap_or(R::Ok) };
                self.check("set_strict", r, want, &(h, scope));
                if r == R::Ok {
                    self.hist[live.unwrap()].strict[scope as usize] = strict;
                }
                Some(r)
            }
            Op::ThreadPin { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_thread_pin(p, if null_out { null_mut() } else { &mut route }) };
                match Self::handle_err(p, live) {
                    Some(want) => {
                        self.check("thread_pin.handle", r, want, &h);
                    }
                    None => {
                        let c = live.unwrap();
                        self.check_in("thread_pin", r, &self.hist[c].refusals(0), &h);
                        if r == R::Ok {
                            if !null_out {
                                self.route_ok("thread_pin.live", &self.hist[c], &route);
                            }
                            let cl = &mut self.hist[c];
                            cl.thread_depth = cl.thread_depth.map(|d| d + 1);
                            cl.thread_bound += 1;
                        }
                    }
                }
                Some(r)
            }
            Op::ThreadUnpin { h } => {
                let (p, live) = self.resolve(h);
                let mut released = false;
                let r = unsafe { racaffinity_thread_unpin(p, &mut released) };
                self.check("thread_unpin", r, Self::handle_err(p, live).unwrap_or(R::Ok), &h);
                if r == R::Ok {
                    let cl = &mut self.hist[live.unwrap()];
                    if let Some(d) = cl.thread_depth {
                        let want = d == 1;
                        cl.thread_depth = Some(d.saturating_sub(1));
                        cl.thread_bound = cl.thread_bound.saturating_sub(1);
                        self.holds("thread_unpin.released", released == want, &(d, released));
                    } else if released {
                        cl.thread_bound = 0;
                    }
                }
                Some(r)
            }
            Op::ContextNew { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut k = 0u64;
                let r = unsafe { racaffinity_context_new(p, if null_out { null_mut() } else { &mut k }) };
                let want = if null_out { R::NullArgument } else { Self::handle_err(p, live).unwrap_or(R::Ok) };
                self.check("context_new", r, want, &h);
                if r == R::Ok {
                    let c = live.unwrap();
                    self.holds("context_new.fresh", k != 0 && !self.hist[c].contexts.contains(&k), &k);
                    // An auto-pinned context could already hold this key (issue 13 hole: context_pin
                    // accepts keys never issued); the model then starts from "pinned, depth unknown".
                    self.hist[c].contexts.push(k);
                }
                Some(r)
            }
            Op::ContextPin { h, ctx } => {
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_context_pin(p, k, &mut route) };
                match Self::handle_err(p, live) {
                    Some(want) => {
                        self.check("context_pin.handle", r, want, &h);
                    }
                    None => {
                        let c = live.unwrap();
                        if !self.hist[c].contexts.contains(&k) {
                            // A key context_new never issued (issue 13 hole, reported): refusing
                            // it is the only answer that cannot collide with a later context_new.
                            if !self.check("context_pin.unissued_key", r, R::InvalidArgument, &k) && r != R::Ok {
                                self.check_in("context_pin", r, &self.ctx_refusals(c), &k);
                            }
                        } else {
                            self.check_in("context_pin", r, &self.ctx_refusals(c), &k);
                        }
                        if r == R::Ok {
                            self.route_ok("context_pin.live", &self.hist[c], &route);
                            *self.hist[c].ctx_depth.entry(k).or_insert(0) += 1;
                        }
                    }
                }
                Some(r)
            }
            Op::ContextUnpin { h, ctx } => {
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                let mut released = false;
                let r = unsafe { racaffinity_context_unpin(p, k, &mut released) };
                self.check("context_unpin", r, Self::handle_err(p, live).unwrap_or(R::Ok), &h);
                if r == R::Ok {
                    let c = live.unwrap();
                    let exact = !self.hist[c].cfg.auto_pin && !self.hist[c].ctx_inexact.contains(&k);
                    let d = self.hist[c].ctx_depth.get(&k).copied().unwrap_or(0);
                    if exact {
                        self.holds("context_unpin.released", released == (d == 1), &(k, d, released));
                    }
                    if released {
                        self.hist[c].ctx_inexact.remove(&k);
                    }
                    if d <= 1 || released {
                        self.hist[c].ctx_depth.remove(&k);
                    } else {
                        self.hist[c].ctx_depth.insert(k, d - 1);
                    }
                }
                Some(r)
            }
            Op::ContextRoute { h, ctx, lease } => {
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                // With thread.auto_pin a route pins its context, and a key
                // context_new never issued is refused like context_pin's.
                let unissued_auto_pin = Self::handle_err(p, live).is_none()
                    && live.is_some_and(|c| self.hist[c].cfg.auto_pin && !self.hist[c].contexts.contains(&k));
                if unissued_auto_pin {
                    let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                    let r = if lease {
                        let mut l =
                            racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                        unsafe { racaffinity_context_pick(p, k, &mut l) }
                    } else {
                        unsafe { racaffinity_context_route(p, k, &mut route) }
                    };
                    self.check("context_route.unissued_auto_pin", r, R::InvalidArgument, &k);
                    return Some(r);
                }
                if lease {
                    let mut l =
                        racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                    let r = unsafe { racaffinity_context_pick(p, k, &mut l) };
                    self.pick_result("context_pick", r, p, live, Some(l), None);
                    Some(r)
                } else {
                    let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                    let r = unsafe { racaffinity_context_route(p, k, &mut route) };
                    self.pick_result("context_route", r, p, live, None, Some(route));
                    Some(r)
                }
            }
            Op::Route { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_cluster_route(p, if null_out { null_mut() } else { &mut route }) };
                if null_out {
                    self.check("route.null_out", r, R::NullArgument, &h);
                } else {
                    self.pick_result("cluster_route", r, p, live, None, Some(route));
                }
                Some(r)
            }
            Op::Pick { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut l = racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                let r = unsafe { racaffinity_cluster_pick(p, if null_out { null_mut() } else { &mut l }) };
                if null_out {
                    self.check("pick.null_out", r, R::NullArgument, &h);
                } else {
                    self.pick_result("cluster_pick", r, p, live, Some(l), None);
                }
                Some(r)
            }
            Op::PickHostBegins { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut l =
                    racaffinity_lease { node: u32::MAX, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                let r = unsafe { racaffinity_cluster_pick_host_begins(p, if null_out { null_mut() } else { &mut l }) };
                if null_out {
                    self.check("pick_host_begins.null_out", r, R::NullArgument, &h);
                } else if r == R::Ok && l.token == 0 {
                    // The host's to begin and end in the page: a node of the
                    // lease table, and no lease of the library's.
                    let route = racaffinity_route { node: l.node, kind: l.kind };
                    self.pick_result("cluster_pick_host_begins", r, p, live, None, Some(route));
                    self.holds("pick_host_begins.has_word", (l.node as usize) < RACAFFINITY_HOST_LEASE_NODES, &l);
                    let r2 = unsafe { racaffinity_lease_release(p, &l, 2) };
                    self.check("pick_host_begins.host_lease_not_releasable", r2, R::InvalidLease, &l);
                } else {
                    // Otherwise a library lease, released by a later op like any other.
                    self.pick_result("cluster_pick_host_begins", r, p, live, Some(l), None);
                }
                Some(r)
            }
            Op::LeaseBegin { h, node } => {
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let mut l = racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                let r = unsafe { racaffinity_lease_begin(p, n, &mut l) };
                let want = Self::handle_err(p, live).unwrap_or_else(|| {
                    if self.hist[live.unwrap()].is_live_node(n) {
                        R::Ok
                    } else {
                        R::UnknownNode
                    }
                });
                self.check("lease_begin", r, want, &(h, n));
                if r == R::Ok {
                    self.holds("lease_begin.node", l.node == n && l.kind == racaffinity_route_kind::Affinity, &l);
                    self.record_lease(live.unwrap(), l);
                }
                Some(r)
            }
            Op::LeaseRelease { h, lease, outcome } => {
                let (p, live) = self.resolve(h);
                let outcome = outcome % 4;
                let (l, rec) = match lease {
                    LeaseSel::Issued(i) if !self.leases.is_empty() => {
                        let i = usize::from(i) % self.leases.len();
                        (Some(self.leases[i].lease), Some(i))
                    }
                    LeaseSel::Issued(_) | LeaseSel::Null => (None, None),
                    LeaseSel::Forged(oh, token) => {
                        let (op, _) = self.resolve(oh);
                        let l = racaffinity_lease {
                            node: 0,
                            kind: racaffinity_route_kind::Balanced,
                            owner: op as usize as u64,
                            token,
                        };
                        // A forged lease that happens to name an open one is that lease.
                        let rec = self.leases.iter().position(|x| x.lease.owner == l.owner && x.lease.token == token);
                        (Some(l), rec)
                    }
                };
                let r = unsafe {
                    racaffinity_lease_release(p, l.as_ref().map_or(null(), |l| l as *const racaffinity_lease), outcome)
                };
                let want = if l.is_none() {
                    R::NullArgument
                } else if outcome > 2 {
                    R::InvalidArgument
                } else if let Some(e) = Self::handle_err(p, live) {
                    e
                } else {
                    let c = live.unwrap();
                    match rec {
                        // Open, issued by this very handle.
                        Some(i)
                            if self.leases[i].open
                                && self.leases[i].cluster == c
                                && l.is_some_and(|l| l.owner == self.hist[c].bits) =>
                        {
                            R::Ok
                        }
                        _ => R::InvalidLease,
                    }
                };
                self.check("lease_release", r, want, &(h, l, outcome));
                if r == R::Ok {
                    self.leases[rec.unwrap()].open = false;
                }
                Some(r)
            }
            Op::TxBegin { h, g, null_out } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r =
                    unsafe { racaffinity_tx_begin(p, s.ptr, s.len, if null_out { null_mut() } else { &mut route }) };
                let pre = if null_out { Some(R::NullArgument) } else { s.null_err() }.or(Self::handle_err(p, live));
                self.tx_begin_result("tx_begin", r, pre, live, &s, &route, None);
                Some(r)
            }
            Op::TxBeginOn { h, g, node } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let n = self.node_arg(live, node);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_tx_begin_on(p, s.ptr, s.len, n, &mut route) };
                let pre = s.null_err().or(Self::handle_err(p, live));
                self.tx_begin_result("tx_begin_on", r, pre, live, &s, &route, Some(n));
                Some(r)
            }
            Op::TxBeginFor { h, g, req } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let built = req.as_ref().map(|q| self.build_req(live, q));
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe {
                    racaffinity_tx_begin_for(
                        p,
                        s.ptr,
                        s.len,
                        built.as_ref().map_or(null(), |b| &b.raw as *const racaffinity_route_request),
                        &mut route,
                    )
                };
                let pre = s.null_err().or(built.as_ref().and_then(|b| b.null_err())).or(Self::handle_err(p, live));
                if pre.is_none() && !self.hist[live.unwrap()].tx.contains_key(s.data()) {
                    // A new gtrid is placed from the request's other affinities first: its key
                    // and session are looked at (and must be valid) before the gtrid is.
                    let b = built.as_ref();
                    let c = live.unwrap();
                    let key_bad = b.is_some_and(|b| b.key_bad());
                    let sess_bad = b.is_some_and(|b| !b.has_key() && b.session_bad());
                    if key_bad || sess_bad {
                        self.check("tx_begin_for.bad_affinity", r, R::InvalidArgument, &(s.data(), &req));
                        return Some(r);
                    }
                    if !Self::gtrid_len_ok(s.data()) {
                        // The session lookup may refuse first (strict, no node); otherwise the gtrid is wrong.
                        let mut want = vec![R::InvalidArgument];
                        if b.is_some_and(|b| !b.has_key() && b.session.is_some()) {
                            want.extend(self.hist[c].refusals(2));
                            want.retain(|x| *x != R::Ok);
                        }
                        self.check_in("tx_begin_for.gtrid", r, &want, &(s.data(), &req));
                        return Some(r);
                    }
                    let mut want = self.hist[c].refusals(1);
                    if b.is_some_and(|b| !b.has_key() && b.session.is_some()) {
                        want.extend(self.hist[c].refusals(2));
                    }
                    want.retain(|x| *x != R::StrictAffinity || self.hist[c].strict[2]);
                    self.check_in("tx_begin_for.new", r, &want, &(s.data(), &req));
                    if r == R::Ok {
                        self.route_ok("tx.placed_live", &self.hist[c], &route);
                        self.hist[c]
                            .tx
                            .insert(s.data().to_vec(), Tx { branches: 1, prepared: false, owner: route.node });
                    }
                    return Some(r);
                }
                self.tx_begin_result("tx_begin_for", r, pre, live, &s, &route, None);
                Some(r)
            }
            Op::TxBeginForToken { h, g, req, tok } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let built = req.as_ref().map(|q| self.build_req(live, q));
                let a = self.tok_arg(live, &tok);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe {
                    racaffinity_tx_begin_for_token(
                        p,
                        s.ptr,
                        s.len,
                        built.as_ref().map_or(null(), |b| &b.raw as *const racaffinity_route_request),
                        a.ptr(),
                        &mut route,
                    )
                };
                // Arguments in the order the function reads them: gtrid, token, request, handle.
                let pre =
                    s.null_err().or(a.pre).or(built.as_ref().and_then(|b| b.null_err())).or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("tx_begin_for_token.args", r, want, &(s.len, &tok));
                    return Some(r);
                }
                let c = live.unwrap();
                let token_bad = parse_token(a.str()).is_none();
                if !Self::gtrid_len_ok(s.data()) {
                    self.tx_begin_result("tx_begin_for_token", r, None, live, &s, &route, None);
                    return Some(r);
                }
                if self.hist[c].tx.contains_key(s.data()) {
                    // The token is checked right after the gtrid, an existing gtrid's too (the
                    // header: "a malformed or foreign token is INVALID_ARGUMENT and changes
                    // nothing"); an existing gtrid is then joined, its request never read.
                    if token_bad {
                        self.check("tx_begin_for_token.bad_token_existing", r, R::InvalidArgument, &(s.data(), &a.s));
                    } else {
                        self.tx_begin_result("tx_begin_for_token", r, None, live, &s, &route, None);
                    }
                    return Some(r);
                }
                let b = built.as_ref();
                // A malformed token is refused whatever else the request holds, as is a bad key;
                // a bad session is refused when it is read (strict placement reads it, a token
                // wins over it otherwise).
                if token_bad || b.is_some_and(|b| b.key_bad()) {
                    self.check("tx_begin_for_token.bad_input", r, R::InvalidArgument, &(s.data(), &req, &a.s));
                    return Some(r);
                }
                let mut want = self.hist[c].refusals(1);
                if b.is_some_and(|b| !b.has_key() && b.session_bad()) {
                    want.push(R::InvalidArgument);
                }
                self.check_in("tx_begin_for_token.new", r, &want, &(s.data(), &req, &a.s));
                if r == R::Ok {
                    self.route_ok("tx_begin_for_token.placed_live", &self.hist[c], &route);
                    self.hist[c].tx.insert(s.data().to_vec(), Tx { branches: 1, prepared: false, owner: route.node });
                }
                Some(r)
            }
            Op::TxPrepared { h, g } => self.tx_simple(h, &g, 0),
            Op::TxEnd { h, g } => self.tx_simple(h, &g, 1),
            Op::TxComplete { h, g } => self.tx_simple(h, &g, 2),
            Op::TxRoute { h, g } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_tx_route(p, s.ptr, s.len, &mut route) };
                let want = s.null_err().or(Self::handle_err(p, live)).unwrap_or_else(|| {
                    let c = &self.hist[live.unwrap()];
                    if !Self::gtrid_len_ok(s.data()) {
                        R::InvalidArgument
                    } else if c.tx.contains_key(s.data()) {
                        // 2PC commands are never refused for routing reasons.
                        R::Ok
                    } else {
                        R::UnknownTransaction
                    }
                });
                self.check("tx_route", r, want, &(h, s.data()));
                if r == R::Ok {
                    let c = &self.hist[live.unwrap()];
                    let t = c.tx[s.data()];
                    if !c.cfg.scope_db {
                        // recovery.scope = node: the branch exists only on its node.
                        self.holds("tx_route.owner", route.node == t.owner, &(t, route));
                    } else {
                        self.holds(
                            "tx_route.db_scope",
                            route.node == t.owner || c.is_live_node(route.node),
                            &(t, route),
                        );
                    }
                }
                Some(r)
            }
            Op::TxRecovered { h, g, node } => {
                let (p, live) = self.resolve(h);
                let s = span(&g, &GTRIDS, 64);
                let n = self.node_arg(live, node);
                let r = unsafe { racaffinity_tx_recovered(p, s.ptr, s.len, n) };
                let want = s.null_err().or(Self::handle_err(p, live)).unwrap_or_else(|| {
                    let c = &self.hist[live.unwrap()];
                    if !Self::gtrid_len_ok(s.data()) {
                        R::InvalidArgument
                    } else if n as usize >= c.names.len() {
                        R::UnknownNode
                    } else {
                        match c.tx.get(s.data()) {
                            Some(t) if t.owner != n => {
                                let o = t.owner as usize;
                                let renamed = c.removed[o] && c.names[o].eq_ignore_ascii_case(&c.names[n as usize]);
                                if renamed || c.cfg.scope_db {
                                    R::Ok
                                } else {
                                    // The same id on a second node: a split transaction.
                                    R::InvalidArgument
                                }
                            }
                            _ => R::Ok,
                        }
                    }
                });
                self.check("tx_recovered", r, want, &(h, s.data(), n));
                if r == R::Ok {
                    let c = &mut self.hist[live.unwrap()];
                    let scope_db = c.cfg.scope_db;
                    let names = c.names.clone();
                    let removed = c.removed.clone();
                    let e = c.tx.entry(s.data().to_vec()).or_insert(Tx { branches: 1, prepared: true, owner: n });
                    let o = e.owner as usize;
                    if e.owner != n && removed[o] && names[o].eq_ignore_ascii_case(&names[n as usize]) {
                        e.owner = n;
                    }
                    let _ = scope_db;
                    e.prepared = true;
                }
                Some(r)
            }
            Op::SessionRoute { h, k } => self.keyed(h, &k, 2),
            Op::KeyRoute { h, k } => self.keyed(h, &k, 3),
            Op::SessionEnd { h, k } => {
                let (p, live) = self.resolve(h);
                let s = span(&k, &KEYS, 1024);
                let mut existed = false;
                let r = unsafe { racaffinity_session_end(p, s.ptr, s.len, &mut existed) };
                let want = s.null_err().or(Self::handle_err(p, live)).unwrap_or(if Self::key_len_ok(s.data()) {
                    R::Ok
                } else {
                    R::InvalidArgument
                });
                self.check("session_end", r, want, &(h, s.len));
                Some(r)
            }
            Op::KeyRouteI64 { h, v } => {
                let (p, live) = self.resolve(h);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r = unsafe { racaffinity_key_route_i64(p, v, &mut route) };
                match Self::handle_err(p, live) {
                    Some(want) => {
                        self.check("key_route_i64.handle", r, want, &h);
                    }
                    None => {
                        let c = &self.hist[live.unwrap()];
                        self.check_in("key_route_i64", r, &c.refusals(3), &v);
                        if r == R::Ok {
                            self.route_ok("key_route_i64.live", c, &route);
                        }
                    }
                }
                Some(r)
            }
            Op::KeyPartition { h, k } => {
                let (p, live) = self.resolve(h);
                let s = span(&k, &KEYS, 1024);
                let mut part = u32::MAX;
                let r = unsafe { racaffinity_key_partition(p, s.ptr, s.len, &mut part) };
                let want = s.null_err().or(Self::handle_err(p, live)).unwrap_or(if Self::key_len_ok(s.data()) {
                    R::Ok
                } else {
                    R::InvalidArgument
                });
                self.check("key_partition", r, want, &(h, s.len));
                if r == R::Ok {
                    // h(key) % data.partitions (racaffinity-hrw-v2).
                    let c = &self.hist[live.unwrap()];
                    let expect = (racaffinity::hash::hash_bytes(s.data()) % u64::from(c.cfg.partitions)) as u32;
                    self.holds("key_partition.value", part == expect, &(part, expect));
                }
                Some(r)
            }
            Op::PartitionOwner { h, p: part } => {
                let (p, live) = self.resolve(h);
                let part = part % 20;
                let mut node = u32::MAX;
                let r = unsafe { racaffinity_partition_owner(p, part, &mut node) };
                match Self::handle_err(p, live) {
                    Some(want) => {
                        self.check("partition_owner.handle", r, want, &h);
                    }
                    None => {
                        let c = &self.hist[live.unwrap()];
                        if part >= c.cfg.partitions {
                            self.check("partition_owner.range", r, R::InvalidArgument, &part);
                        } else {
                            let mut want = vec![R::Ok];
                            if c.live_count() == 0 || c.cfg.data_balanced {
                                // A balanced partition nobody routed yet has no owner.
                                want.push(R::NoNodeAvailable);
                            }
                            self.check_in("partition_owner", r, &want, &part);
                            if r == R::Ok {
                                self.holds("partition_owner.live", c.is_live_node(node), &(node, &c.removed));
                            }
                        }
                    }
                }
                Some(r)
            }
            Op::RequestPick { h, req } => {
                let (p, live) = self.resolve(h);
                let built = req.as_ref().map(|q| self.build_req(live, q));
                let mut l = racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                let r = unsafe {
                    racaffinity_request_pick(
                        p,
                        built.as_ref().map_or(null(), |b| &b.raw as *const racaffinity_route_request),
                        &mut l,
                    )
                };
                let pre = match &built {
                    None => Some(R::NullArgument),
                    Some(b) => b.null_err(),
                }
                .or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("request_pick.args", r, want, &(h, &req));
                    return Some(r);
                }
                let b = built.unwrap();
                let c = live.unwrap();
                // Precedence: transaction, data key, session, context/thread pin.
                if !b.gtrid.is_empty() {
                    let g = b.gtrid.clone();
                    if !Self::gtrid_len_ok(&g) {
                        self.check("request_pick.gtrid_len", r, R::InvalidArgument, &g);
                    } else if let Some(t) = self.hist[c].tx.get(&g).copied() {
                        let mut want = self.hist[c].refusals(1);
                        if t.prepared {
                            want.push(R::PreparedNodeUnavailable);
                            want.retain(|x| *x != R::StrictAffinity);
                        }
                        self.check_in("request_pick.tx", r, &want, &(g.clone(), t));
                        if r == R::Ok {
                            if t.prepared {
                                self.holds("tx.prepared_never_moves", l.node == t.owner, &(t, l));
                            }
                            self.hist[c].tx.get_mut(&g).unwrap().owner = l.node;
                        }
                    } else {
                        self.check("request_pick.unknown_tx", r, R::UnknownTransaction, &g);
                    }
                } else if b.has_key() {
                    if b.key_bad() {
                        self.check("request_pick.key_len", r, R::InvalidArgument, &b.key.len());
                    } else {
                        self.check_in("request_pick.key", r, &self.hist[c].refusals(3), &req);
                    }
                } else if b.session.is_some() {
                    if b.session_bad() {
                        self.check("request_pick.session_len", r, R::InvalidArgument, &b.session);
                    } else {
                        self.check_in("request_pick.session", r, &self.hist[c].refusals(2), &req);
                    }
                } else if b.raw.context != 0
                    && self.hist[c].cfg.auto_pin
                    && !self.hist[c].contexts.contains(&b.raw.context)
                {
                    // As context_route: with thread.auto_pin the request pins its
                    // context, and a key context_new never issued is refused.
                    self.check("request_pick.unissued_auto_pin", r, R::InvalidArgument, &b.raw.context);
                } else {
                    self.check_in("request_pick.pin", r, &self.hist[c].refusals(0), &req);
                    if r == R::Ok && b.raw.context == 0 && self.hist[c].cfg.auto_pin {
                        self.hist[c].thread_bound = self.hist[c].thread_bound.max(1);
                    }
                }
                if r == R::Ok {
                    self.record_lease(c, l);
                }
                Some(r)
            }
            Op::Event { h, ev } => self.event(h, &ev),
            Op::Metrics { h, cap, null_buf, prometheus } => {
                let (p, live) = self.resolve(h);
                let mut buf = vec![0x55 as c_char; usize::from(cap) * 4 + 1];
                let mut need = 0usize;
                let bp = if null_buf { null_mut() } else { buf.as_mut_ptr() };
                let r = unsafe {
                    if prometheus {
                        racaffinity_metrics_prometheus(p, bp, buf.len(), &mut need)
                    } else {
                        racaffinity_metrics_json(p, bp, buf.len(), &mut need)
                    }
                };
                if let Some(want) = Self::handle_err(p, live) {
                    self.check("metrics.handle", r, want, &h);
                    return Some(r);
                }
                let want = if null_buf {
                    R::NullArgument
                } else if need > buf.len() {
                    R::BufferTooSmall
                } else {
                    R::Ok
                };
                self.check("metrics", r, want, &(cap, need));
                if r == R::Ok {
                    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().expect("UTF-8 metrics");
                    self.holds("metrics.len", text.len() + 1 == need, &(text.len(), need));
                    if prometheus {
                        self.holds(
                            "metrics.prometheus",
                            text.lines().all(|l| l.is_empty() || l.starts_with('#') || l.starts_with("racaffinity_")),
                            &text,
                        );
                    } else {
                        let v: serde_json::Value = serde_json::from_str(text).expect("metrics JSON parses");
                        let c = &self.hist[live.unwrap()];
                        let n = v["nodes"].as_array().map_or(0, |a| a.len());
                        self.holds("metrics.nodes", n == c.live_count() || n == c.names.len(), &(n, &c.removed));
                    }
                } else if r == R::BufferTooSmall {
                    self.holds("metrics.untouched", buf.iter().all(|b| *b == 0x55), &cap);
                }
                Some(r)
            }
            Op::NodeAdd { h, name, weight, address } => {
                let (p, live) = self.resolve(h);
                let (cname, sname) = self.name_arg(live, name);
                let addr = CString::new("h9:1521").unwrap();
                let weight = if weight % 3 == 0 { weight } else { weight % 10 };
                let mut id = u32::MAX;
                let r = unsafe {
                    racaffinity_node_add(
                        p,
                        cname.as_ref().map_or(null(), |c| c.as_ptr()),
                        if address { addr.as_ptr() } else { null() },
                        weight,
                        &mut id,
                    )
                };
                let want = match name {
                    NameSel::Null => R::NullArgument,
                    NameSel::NonUtf8 => R::InvalidUtf8,
                    _ => Self::handle_err(p, live).unwrap_or_else(|| {
                        let c = &self.hist[live.unwrap()];
                        if matches!(name, NameSel::Invalid) || weight > 1_000_000 {
                            R::InvalidArgument
                        } else if c.find(&sname).is_some() {
                            R::DuplicateNode
                        } else {
                            R::Ok
                        }
                    }),
                };
                self.check("node_add", r, want, &(h, &sname, weight));
                if r == R::Ok {
                    let c = &mut self.hist[live.unwrap()];
                    let expect = c.names.len() as u32;
                    c.names.push(sname);
                    c.addresses.push(if address { "h9:1521".into() } else { String::new() });
                    c.removed.push(false);
                    c.admin.push(0);
                    self.holds("node_add.id", id == expect, &(id, expect));
                }
                Some(r)
            }
            Op::NodeRemove { h, name } => {
                let (p, live) = self.resolve(h);
                let (cname, sname) = self.name_arg(live, name);
                let r = unsafe { racaffinity_node_remove(p, cname.as_ref().map_or(null(), |c| c.as_ptr())) };
                let want = match name {
                    NameSel::Null => R::NullArgument,
                    NameSel::NonUtf8 => R::InvalidUtf8,
                    _ => Self::handle_err(p, live).unwrap_or_else(|| {
                        if self.hist[live.unwrap()].find(&sname).is_some() {
                            R::Ok
                        } else {
                            R::UnknownNode
                        }
                    }),
                };
                self.check("node_remove", r, want, &(h, &sname));
                if r == R::Ok {
                    let c = &mut self.hist[live.unwrap()];
                    let i = c.find(&sname).unwrap();
                    c.removed[i] = true;
                }
                Some(r)
            }
            Op::NodeSetState { h, name, state } => {
                let (p, live) = self.resolve(h);
                let (cname, sname) = self.name_arg(live, name);
                let state = state % 4;
                let r = unsafe { racaffinity_node_set_state(p, cname.as_ref().map_or(null(), |c| c.as_ptr()), state) };
                let want = match name {
                    NameSel::Null => R::NullArgument,
                    NameSel::NonUtf8 => R::InvalidUtf8,
                    _ if state > 2 => R::InvalidArgument,
                    _ => Self::handle_err(p, live).unwrap_or_else(|| {
                        if self.hist[live.unwrap()].find(&sname).is_some() {
                            R::Ok
                        } else {
                            R::UnknownNode
                        }
                    }),
                };
                self.check("node_set_state", r, want, &(h, &sname, state));
                if r == R::Ok {
                    let c = &mut self.hist[live.unwrap()];
                    let i = c.find(&sname).unwrap();
                    c.admin[i] = state;
                }
                Some(r)
            }
            Op::NodeGetState { h, node } => {
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let mut st = racaffinity_node_state::Up;
                let r = unsafe { racaffinity_node_get_state(p, n, &mut st) };
                let want = Self::handle_err(p, live).unwrap_or_else(|| {
                    if (n as usize) < self.hist[live.unwrap()].names.len() {
                        R::Ok
                    } else {
                        R::UnknownNode
                    }
                });
                self.check("node_get_state", r, want, &(h, n));
                if r == R::Ok {
                    let c = &self.hist[live.unwrap()];
                    let i = n as usize;
                    // The operator's layer is a floor: Down over Draining over Up.
                    let ok = if c.removed[i] || c.admin[i] == 2 {
                        st == racaffinity_node_state::Down
                    } else if c.admin[i] == 1 {
                        st != racaffinity_node_state::Up
                    } else {
                        true
                    };
                    self.holds("node_get_state.layers", ok, &(n, st, c.admin[i], c.removed[i]));
                }
                Some(r)
            }
            Op::NodeFind { h, name } => {
                let (p, live) = self.resolve(h);
                let (cname, sname) = self.name_arg(live, name);
                let mut id = u32::MAX;
                let r = unsafe { racaffinity_node_find(p, cname.as_ref().map_or(null(), |c| c.as_ptr()), &mut id) };
                let found = live.and_then(|c| self.hist[c].find(&sname));
                let want = match name {
                    NameSel::Null => R::NullArgument,
                    NameSel::NonUtf8 => R::InvalidUtf8,
                    _ => Self::handle_err(p, live).unwrap_or(if found.is_some() { R::Ok } else { R::UnknownNode }),
                };
                self.check("node_find", r, want, &(h, &sname));
                if r == R::Ok {
                    self.holds("node_find.id", Some(id as usize) == found, &(id, found));
                }
                Some(r)
            }
            Op::NodeName { h, node, cap, address } => {
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let mut buf = vec![0x55 as c_char; usize::from(cap % 80)];
                let mut need = 0usize;
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let r = unsafe {
                    if address {
                        racaffinity_node_address(p, n, bp, buf.len(), &mut need)
                    } else {
                        racaffinity_node_name(p, n, bp, buf.len(), &mut need)
                    }
                };
                let text = live.and_then(|c| {
                    let c = &self.hist[c];
                    (n as usize).lt(&c.names.len()).then(|| {
                        if address {
                            c.addresses[n as usize].clone()
                        } else {
                            c.names[n as usize].clone()
                        }
                    })
                });
                let want = Self::handle_err(p, live).unwrap_or_else(|| match &text {
                    None => R::UnknownNode,
                    Some(_) if bp.is_null() => R::NullArgument,
                    Some(t) if t.len() + 1 > buf.len() => R::BufferTooSmall,
                    Some(_) => R::Ok,
                });
                self.check("node_name", r, want, &(h, n, cap, address));
                if let Some(t) = text.as_ref().filter(|_| matches!(r, R::Ok | R::BufferTooSmall | R::NullArgument)) {
                    self.holds("node_name.need", need == t.len() + 1, &(need, &text));
                }
                if r == R::Ok {
                    let got = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_string();
                    self.holds("node_name.value", Some(&got) == text.as_ref(), &(got, &text));
                }
                Some(r)
            }
            Op::Probe { h, node, ok } | Op::Outcome { h, node, ok } => {
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let r = if matches!(op, Op::Probe { .. }) {
                    racaffinity_probe_report(p, n, ok)
                } else {
                    racaffinity_outcome_report(p, n, ok)
                };
                // A removed node's id is taken and ignored (a report of work
                // begun before the removal); an id never had is unknown.
                let want = Self::handle_err(p, live).unwrap_or_else(|| {
                    if (n as usize) < self.hist[live.unwrap()].names.len() {
                        R::Ok
                    } else {
                        R::UnknownNode
                    }
                });
                self.check("health_report", r, want, &(h, n));
                Some(r)
            }
            Op::ResultMessage { code, cap } => {
                // One past the last code: the codes are 0..=FEED_UNAVAILABLE.
                let codes = R::FeedUnavailable as u32 + 1;
                let code = code % (codes + 2);
                let mut buf = vec![0 as c_char; usize::from(cap)];
                let mut need = 0usize;
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let r = unsafe { racaffinity_result_message(code, bp, buf.len(), &mut need) };
                let want = if code >= codes {
                    R::InvalidArgument
                } else if bp.is_null() {
                    R::NullArgument
                } else if need > buf.len() {
                    R::BufferTooSmall
                } else {
                    R::Ok
                };
                self.check("result_message", r, want, &(code, cap, need));
                // The message of the last failure on this thread is always readable.
                let mut big = vec![0 as c_char; 4096];
                let r2 = unsafe { racaffinity_last_error_message(big.as_mut_ptr(), big.len(), &mut need) };
                self.check("last_error_message", r2, R::Ok, &need);
                None
            }
            other => self.step_more(&other),
        }
    }

    /// Shared checks of pick / route calls without affinities beyond pins.
    fn pick_result(
        &mut self,
        site: &'static str,
        r: R,
        p: *const racaffinity_cluster,
        live: Option<usize>,
        lease: Option<racaffinity_lease>,
        route: Option<racaffinity_route>,
    ) {
        if let Some(want) = Self::handle_err(p, live) {
            self.check(site, r, want, &site);
            return;
        }
        let c = live.unwrap();
        let want = if site.starts_with("context") { self.ctx_refusals(c) } else { self.hist[c].refusals(0) };
        self.check_in(site, r, &want, &site);
        if r == R::Ok {
            if let Some(rt) = route {
                self.route_ok("pick.live", &self.hist[c], &rt);
            }
            if let Some(l) = lease {
                self.record_lease(c, l);
            }
            if self.hist[c].cfg.auto_pin {
                self.hist[c].thread_bound = self.hist[c].thread_bound.max(1);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn tx_begin_result(
        &mut self,
        site: &'static str,
        r: R,
        pre: Option<R>,
        live: Option<usize>,
        s: &SpanArg,
        route: &racaffinity_route,
        preferred: Option<u32>,
    ) {
        if let Some(want) = pre {
            self.check(site, r, want, &(site, s.len));
            return;
        }
        let c = live.unwrap();
        let g = s.data().to_vec();
        if !Self::gtrid_len_ok(&g) {
            self.check(site, r, R::InvalidArgument, &g.len());
            return;
        }
        if let Some(n) = preferred {
            if n as usize >= self.hist[c].names.len() {
                // An id this cluster never had (issue 13, failure 8: OK today).
                if !self.check("tx_begin_on.unknown_preferred", r, R::UnknownNode, &n) {
                    // Tolerated: carry on as if the preference were absent.
                } else {
                    return;
                }
            }
        }
        if self.hist[c].tx.contains_key(&g) {
            self.begin_existing(site, c, &g, r, route);
        } else {
            self.begin_new(site, c, &g, r, route, preferred.is_some());
        }
    }

    /// tx_prepared (0), tx_end (1), tx_complete (2).
    fn tx_simple(&mut self, h: H, g: &Span, which: u8) -> Option<R> {
        let (p, live) = self.resolve(h);
        let s = span(g, &GTRIDS, 64);
        let r = unsafe {
            match which {
                0 => racaffinity_tx_prepared(p, s.ptr, s.len),
                1 => racaffinity_tx_end(p, s.ptr, s.len),
                _ => racaffinity_tx_complete(p, s.ptr, s.len),
            }
        };
        let want = s.null_err().or(Self::handle_err(p, live)).unwrap_or_else(|| {
            if !Self::gtrid_len_ok(s.data()) {
                R::InvalidArgument
            } else if self.hist[live.unwrap()].tx.contains_key(s.data()) {
                R::Ok
            } else {
                R::UnknownTransaction
            }
        });
        self.check(["tx_prepared", "tx_end", "tx_complete"][usize::from(which)], r, want, &(h, s.data()));
        if r == R::Ok {
            let c = &mut self.hist[live.unwrap()];
            let g = s.data().to_vec();
            match which {
                0 => c.tx.get_mut(&g).unwrap().prepared = true,
                1 => {
                    let e = c.tx.get_mut(&g).unwrap();
                    e.branches = e.branches.saturating_sub(1);
                    if e.branches == 0 {
                        c.tx.remove(&g);
                    }
                }
                _ => {
                    c.tx.remove(&g);
                }
            }
        }
        Some(r)
    }

    /// session_route (scope 2) and key_route (scope 3).
    fn keyed(&mut self, h: H, k: &Span, scope: usize) -> Option<R> {
        let (p, live) = self.resolve(h);
        let s = span(k, &KEYS, 1024);
        let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
        let r = unsafe {
            if scope == 2 {
                racaffinity_session_route(p, s.ptr, s.len, &mut route)
            } else {
                racaffinity_key_route(p, s.ptr, s.len, &mut route)
            }
        };
        let site = if scope == 2 { "session_route" } else { "key_route" };
        if let Some(want) = s.null_err().or(Self::handle_err(p, live)) {
            self.check(site, r, want, &(h, s.len));
            return Some(r);
        }
        let c = &self.hist[live.unwrap()];
        if !Self::key_len_ok(s.data()) {
            self.check(site, r, R::InvalidArgument, &s.len);
        } else {
            self.check_in(site, r, &c.refusals(scope), &s.data());
            if r == R::Ok {
                self.route_ok("keyed.live", c, &route);
            }
        }
        Some(r)
    }

    fn event(&mut self, h: H, ev: &Ev) -> Option<R> {
        let (p, live) = self.resolve(h);
        let c = live.map(|i| &self.hist[i]);
        let name_of =
            |i: u8| -> String { c.map_or("MYDB1".into(), |c| c.names[usize::from(i) % c.names.len()].clone()) };
        let known = |n: &str| c.is_some_and(|c| c.find(n).is_some());
        let mut line: Option<Vec<u8>> = None;
        // The result when the handle is good.
        let mut want: Vec<R> = vec![];
        let sm = |inst: &str, status: &str, reason: &str| {
            format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={inst} host=h2 status={status} reason={reason} card=1 timestamp=2026-11-29 08:00:00")
        };
        match ev {
            Ev::Down(i, planned) => {
                let n = name_of(*i);
                line = Some(sm(&n, "down", if *planned { "USER" } else { "FAILURE" }).into_bytes());
                want.push(if known(&n) { R::Ok } else { R::UnknownNode });
            }
            Ev::Up(i) => {
                let n = name_of(*i);
                line = Some(sm(&n, "up", "BOOT").into_bytes());
                want.push(if known(&n) { R::Ok } else { R::UnknownNode });
            }
            Ev::Rlb(a, b, pct, aff) => {
                let (na, nb) = (name_of(*a), name_of(*b));
                let pct = pct % 101;
                let aff = if *aff { "TRUE" } else { "FALSE" };
                line = Some(
                    format!(
                        "VERSION=1.0 database=orcl service=svc {{ {{instance={na} percent={pct} flag=GOOD aff={aff}}}{{instance={nb} percent={} flag=UNKNOWN aff=TRUE}} }} timestamp=2026-11-29 08:00:00",
                        100 - pct
                    )
                    .into_bytes(),
                );
                // The same instance twice may be refused as malformed; else every entry must exist.
                if na.eq_ignore_ascii_case(&nb) {
                    want.extend([R::Ok, R::EventParse, R::UnknownNode]);
                } else {
                    want.push(if known(&na) && known(&nb) { R::Ok } else { R::UnknownNode });
                }
            }
            Ev::NodeDown(known_host) => {
                let host = if *known_host { "h2" } else { "nohost" };
                line = Some(format!("NODE VERSION=1.0 host={host} incarnation=175 status=nodedown reason=member_leave timestamp=2026-11-29 08:00:00").into_bytes());
                // Only live nodes with that host count; the model does not track addresses by host.
                want.extend([R::Ok, R::UnknownNode]);
            }
            Ev::Foreign => {
                line = Some(sm(&name_of(0), "down", "FAILURE").replace("database=orcl", "database=other").into_bytes());
                want.push(if c.is_some_and(|c| c.cfg.filtered) {
                    R::ForeignEvent
                } else if known(&name_of(0)) {
                    R::Ok
                } else {
                    R::UnknownNode
                });
            }
            Ev::Malformed(i) => {
                line = Some(BAD_EVENTS[usize::from(*i) % BAD_EVENTS.len()].as_bytes().to_vec());
                want.push(R::EventParse);
            }
            Ev::UnknownInstance => {
                line = Some(sm("NOSUCH9", "down", "FAILURE").into_bytes());
                want.push(R::UnknownNode);
            }
            Ev::NonUtf8 => {
                line = Some(vec![b'N', b'O', b'D', b'E', b' ', 0xff]);
            }
            Ev::Null => {}
            Ev::Raw(s) => {
                line = Some(s.bytes().filter(|b| *b != 0).collect());
                want.extend([R::Ok, R::EventParse, R::UnknownNode, R::ForeignEvent]);
            }
        }
        let cline = line.map(|l| CString::new(l).unwrap());
        let mut changes = u32::MAX;
        let r = unsafe { racaffinity_event_apply(p, cline.as_ref().map_or(null(), |c| c.as_ptr()), &mut changes) };
        let pre = match ev {
            Ev::Null => Some(R::NullArgument),
            Ev::NonUtf8 => Some(R::InvalidUtf8),
            _ => None,
        }
        .or(Self::handle_err(p, live));
        match pre {
            Some(w) => {
                self.check("event_apply.args", r, w, ev);
            }
            None => {
                self.check_in("event_apply", r, &want, ev);
                if r == R::Ok {
                    let n = self.hist[live.unwrap()].live_count();
                    self.holds("event_apply.changes", changes as usize <= n, &(changes, n));
                }
            }
        }
        Some(r)
    }

    fn build_req(&self, live: Option<usize>, q: &Req) -> BuiltReq {
        let g = q.gtrid.as_ref().map(|s| span(s, &GTRIDS, 64));
        let k = q.key.as_ref().map(|s| span(s, &KEYS, 1024));
        let se = q.session.as_ref().map(|s| span(s, &KEYS, 1024));
        let ctx = q.ctx.map_or(0, |c| self.ctx_arg(live, c));
        let empty = |s: &Option<SpanArg>| -> (*const u8, usize) { s.as_ref().map_or((null(), 0), |s| (s.ptr, s.len)) };
        let (gp, gl) = empty(&g);
        let (kp, kl) = empty(&k);
        let (sp, sl) = empty(&se);
        let raw = racaffinity_route_request {
            gtrid: gp,
            gtrid_len: gl,
            key: kp,
            key_len: kl,
            key_i64: q.key_i64.unwrap_or(0),
            key_is_i64: u32::from(q.key_i64.is_some()),
            session: sp,
            session_len: sl,
            context: ctx,
        };
        let null = [&g, &k, &se].iter().any(|s| s.as_ref().is_some_and(|s| s.null_err().is_some()));
        BuiltReq {
            raw,
            null,
            gtrid: g.as_ref().map(|s| s.data().to_vec()).unwrap_or_default(),
            key: k.as_ref().map(|s| s.data().to_vec()).unwrap_or_default(),
            key_is_i64: q.key_i64.is_some(),
            session: se.as_ref().map(|s| s.data().to_vec()).filter(|s| !s.is_empty()),
            _keep: (g, k, se),
        }
    }
}

struct BuiltReq {
    raw: racaffinity_route_request,
    null: bool,
    gtrid: Vec<u8>,
    key: Vec<u8>,
    key_is_i64: bool,
    session: Option<Vec<u8>>,
    _keep: (Option<SpanArg>, Option<SpanArg>, Option<SpanArg>),
}

impl BuiltReq {
    fn null_err(&self) -> Option<R> {
        self.null.then_some(R::NullArgument)
    }
    fn has_key(&self) -> bool {
        self.key_is_i64 || !self.key.is_empty()
    }
    /// A byte key (used when no integer key is set) longer than 1024 bytes.
    fn key_bad(&self) -> bool {
        !self.key_is_i64 && self.key.len() > 1024
    }
    fn session_bad(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.len() > 1024)
    }
}

// ---------------------------------------------------------------------------
// Session tokens, the epoch page, UCP contexts, the partition map, connect strings
// ---------------------------------------------------------------------------

const SIDS: [&str; 6] = ["sess-1", "s", "A1b2~x", "x!ra1.00000000.none", "bad id", "semi;colon"];
const SOURCES: [&str; 5] = ["loader:test", "pm/db-1.x_y", "bad source!", "", "a b"];
const ERRORS: [&str; 3] = ["relation \"pm\" does not exist", "", "\u{e9}t\u{e9}"];
/// Hosts (connect_string) and whether they are valid, and if IPv6.
const HOSTS: [(&str, bool, bool); 12] = [
    ("MYDBHOST1", true, false),
    ("10.0.0.7", true, false),
    ("::1", true, true),
    ("[2001:db8::1]", true, true),
    ("a-b.example", true, false),
    ("", false, false),
    ("h)", false, false),
    ("h(PORT=1)", false, false),
    ("h h", false, false),
    ("a..b", false, false),
    ("1.2.3", false, false),
    ("h:1", false, false),
];
/// Listener addresses (address_connect_string): valid, bare host, port.
const ADDRESSES: [(&str, bool, &str, u16); 11] = [
    ("h", true, "h", 0),
    ("h:1522", true, "h", 1522),
    ("[::1]:1522", true, "::1", 1522),
    ("[::1]", true, "::1", 0),
    ("::1", false, "", 0),
    ("h:0", false, "", 0),
    ("h:99999", false, "", 0),
    ("h:+1", false, "", 0),
    ("h)", false, "", 0),
    ("", false, "", 0),
    ("h:1:2", false, "", 0),
];
const SERVICES: [(&str, bool); 7] = [
    ("MYDB", true),
    ("svc.example.com", true),
    ("a$b#c_-.", true),
    ("", false),
    ("s)", false),
    ("s=x", false),
    ("s/x", false),
];
const INSTANCES: [(&str, bool); 6] =
    [("MYDB1", true), ("I_1$#", true), ("1abc", false), ("", false), ("i)", false), ("a.b", false)];

/// Characters a connect-string value may carry: nothing that could open,
/// close or separate a field of any form.
fn connect_safe(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-$#:[]".contains(&b))
}

fn read_word(p: *const u64) -> u64 {
    // SAFETY: a word from racaffinity_cluster_epoch_page, not yet freed.
    unsafe { (*(p as *const std::sync::atomic::AtomicU64)).load(std::sync::atomic::Ordering::Acquire) }
}

/// A materialized C string argument: what the callee sees, or the error its
/// conversion gives first (NULL, INVALID_UTF8, INVALID_ARGUMENT over 1 MiB).
struct TextArg {
    c: Option<Cow<'static, CStr>>,
    s: Option<String>,
    pre: Option<R>,
    /// Index in the pool, for the model's validity tables.
    pool: Option<usize>,
}

impl TextArg {
    fn ptr(&self) -> *const c_char {
        self.c.as_ref().map_or(null(), |c| c.as_ptr())
    }
    fn str(&self) -> &str {
        self.s.as_deref().unwrap_or("")
    }
}

/// One string over the 1 MiB cap for the whole run: building and scanning
/// a fresh one per op cost a third of this target's time.
fn huge() -> &'static CStr {
    static HUGE: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    HUGE.get_or_init(|| CString::new(vec![b'a'; RACAFFINITY_MAX_STRING_BYTES + 1]).unwrap())
}

fn text_arg(t: &Text, pool: &[&str], long: usize) -> TextArg {
    let owned = |s: String, pool: Option<usize>| TextArg {
        c: Some(Cow::Owned(CString::new(s.clone()).unwrap())),
        s: Some(s),
        pre: None,
        pool,
    };
    match t {
        Text::Pool(i) => {
            let i = usize::from(*i) % pool.len();
            owned(pool[i].to_string(), Some(i))
        }
        Text::Raw(r) => owned(r.chars().filter(|c| *c != '\0').collect(), None),
        Text::Long(d) => owned("a".repeat(long + 1 + usize::from(*d % 4)), None),
        Text::NonUtf8 => {
            TextArg { c: Some(Cow::Borrowed(c"a\xc3\x28")), s: None, pre: Some(R::InvalidUtf8), pool: None }
        }
        Text::Null => TextArg { c: None, s: None, pre: Some(R::NullArgument), pool: None },
        Text::Huge => TextArg { c: Some(Cow::Borrowed(huge())), s: None, pre: Some(R::InvalidArgument), pool: None },
    }
}

/// The model's session-id rule: 1..=1024 bytes of RFC 6265 cookie octets.
fn sid_ok(s: &str) -> bool {
    (1..=1024).contains(&s.len())
        && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && !matches!(b, b'"' | b',' | b';' | b'\\'))
}

/// The model's reading of a token: `<sid>!ra1.<8 hex>.<8 hex|none>`, as
/// (session id, primary id, backup id).
fn parse_token(t: &str) -> Option<(&str, u32, Option<u32>)> {
    let (sid, rest) = t.rsplit_once('!')?;
    if !sid_ok(sid) {
        return None;
    }
    let v: Vec<&str> = rest.split('.').collect();
    let id = |s: &str| {
        (s.len() == 8 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| u32::from_str_radix(s, 16).unwrap())
    };
    match v.as_slice() {
        ["ra1", p, b] => {
            let p = id(p)?;
            let b = if *b == "none" { None } else { Some(id(b)?) };
            Some((sid, p, b))
        }
        _ => None,
    }
}

fn token_id(name: &str) -> u32 {
    u32::from_str_radix(&racaffinity::node_token_id(name), 16).unwrap()
}

impl Cl {
    /// The node a token id names here: the one live node with that id, else none.
    fn token_node(&self, id: u32) -> u32 {
        let mut hits = self.live_ids().filter(|i| token_id(&self.names[*i]) == id);
        match (hits.next(), hits.next()) {
            (Some(i), None) => i as u32,
            _ => RACAFFINITY_NO_NODE,
        }
    }
}

/// What the metrics JSON says about node `name` and the thread scope:
/// (picks, affinity_hits, thread hits).
fn hit_counts(json: &str, node: usize, name: &str, scope: &str) -> Option<(u64, u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).expect("metrics JSON");
    let nodes = v["nodes"].as_array()?;
    let n = nodes.get(node).filter(|n| n["name"].as_str() == Some(name))?;
    Some((n["picks"].as_u64()?, n["affinity_hits"].as_u64()?, v["scopes"][scope]["hits"].as_u64()?))
}

impl Model {
    fn tok_arg(&self, live: Option<usize>, t: &Tok) -> TextArg {
        let made = |i: u8| -> Option<&String> {
            (!self.tokens.is_empty()).then(|| &self.tokens[usize::from(i) % self.tokens.len()])
        };
        let plain = |s: String| text_arg(&Text::Raw(s), &[], 0);
        match t {
            Tok::Made(i) => plain(made(*i).cloned().unwrap_or_else(|| "s!ra1.00000000.none".into())),
            Tok::Named { sid, primary, backup } => {
                let mut names: Vec<String> = live.map_or(vec![], |c| self.hist[c].names.clone());
                names.extend(["MYDB1", "X1", "W4", "NEW1", "nosuch"].map(String::from));
                let n = |i: u8| racaffinity::node_token_id(&names[usize::from(i) % names.len()]);
                let b = backup.map_or("none".to_string(), n);
                plain(format!("{}!ra1.{}.{b}", SIDS[usize::from(*sid) % 4], n(*primary)))
            }
            Tok::Forged { sid, primary, backup } => {
                let b = backup.map_or("none".to_string(), |b| format!("{b:08x}"));
                plain(format!("{}!ra1.{primary:08x}.{b}", SIDS[usize::from(*sid) % SIDS.len()]))
            }
            Tok::Garbled { t, at, to } => {
                let mut b = made(*t).cloned().unwrap_or_else(|| "s!ra1.00000000.none".into()).into_bytes();
                let at = usize::from(*at) % b.len();
                b[at] = b"!.ra1none09af;x A\""[usize::from(*to) % 18];
                plain(String::from_utf8(b).unwrap())
            }
            Tok::Text(t) => text_arg(t, &SIDS, 1024),
        }
    }

    fn remember_token(&mut self, t: String) {
        if self.tokens.len() < 32 {
            self.tokens.push(t);
        } else {
            let i = t.len() % 32;
            self.tokens[i] = t;
        }
    }

    /// The text a buffer call wrote, after checking the documented buffer
    /// protocol: NULL buf is NULL_ARGUMENT, a short one BUFFER_TOO_SMALL with
    /// the size needed, and `need` is always the text's size with its NUL.
    fn written(&self, site: &'static str, r: R, buf: &[c_char], need: usize) -> Option<String> {
        if r != R::Ok {
            return None;
        }
        let got = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_str().expect("UTF-8 output").to_string();
        self.holds(site, got.len() + 1 == need, &(&got, need));
        Some(got)
    }

    /// The result a buffer write gives for a text of `need` bytes (NUL included).
    fn buf_result(bp: *const c_char, cap: usize, need: usize) -> R {
        if bp.is_null() {
            R::NullArgument
        } else if cap < need {
            R::BufferTooSmall
        } else {
            R::Ok
        }
    }

    fn step_more(&mut self, op: &Op) -> Option<R> {
        match op.clone() {
            Op::SessionRouting { h, k, nulls } => {
                let (p, live) = self.resolve(h);
                let s = span(&k, &KEYS, 1024);
                let (mut pr, mut bk) = (u32::MAX - 1, u32::MAX - 1);
                let r = unsafe {
                    racaffinity_session_routing(
                        p,
                        s.ptr,
                        s.len,
                        if nulls & 1 != 0 { null_mut() } else { &mut pr },
                        if nulls & 2 != 0 { null_mut() } else { &mut bk },
                    )
                };
                let pre = s.null_err().or((nulls & 3 != 0).then_some(R::NullArgument)).or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("session_routing.args", r, want, &(h, s.len, nulls));
                    return Some(r);
                }
                let c = &self.hist[live.unwrap()];
                if !Self::key_len_ok(s.data()) {
                    self.check("session_routing.key", r, R::InvalidArgument, &s.len);
                    return Some(r);
                }
                // Only nodes that take new work count, and the model does not know which do.
                self.check_in("session_routing", r, &[R::Ok, R::NoNodeAvailable], &s.len);
                if r == R::Ok {
                    self.holds(
                        "session_routing.nodes",
                        c.is_live_node(pr) && bk != pr && (bk == RACAFFINITY_NO_NODE || c.is_live_node(bk)),
                        &(pr, bk, &c.removed),
                    );
                }
                Some(r)
            }
            Op::TokenNew { h, sid, cap } => {
                let (p, live) = self.resolve(h);
                let a = text_arg(&sid, &SIDS, 1024);
                let mut buf = vec![0x55 as c_char; usize::from(cap)];
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let mut need = 0usize;
                let r = unsafe { racaffinity_session_token_new(p, a.ptr(), bp, buf.len(), &mut need) };
                if let Some(want) = a.pre.or(Self::handle_err(p, live)) {
                    self.check("token_new.args", r, want, &(h, &sid));
                    return Some(r);
                }
                let c = live.unwrap();
                if !sid_ok(a.str()) {
                    self.check("token_new.sid", r, R::InvalidArgument, &a.s);
                    return Some(r);
                }
                if r == R::NoNodeAvailable {
                    return Some(r);
                }
                self.check("token_new", r, Self::buf_result(bp, buf.len(), need), &(cap, need));
                // "A buffer of strlen(session_id) + RACAFFINITY_TOKEN_EXTRA_BYTES + 1 always fits."
                self.holds("token_new.fits", need <= a.str().len() + RACAFFINITY_TOKEN_EXTRA_BYTES + 1, &need);
                if let Some(t) = self.written("token_new.need", r, &buf, need) {
                    // The token carries the session's routing data: it decodes to
                    // what session_routing answers for the id, and to the id.
                    let (mut pr, mut bk) = (0u32, 0u32);
                    let rr =
                        unsafe { racaffinity_session_routing(p, a.str().as_ptr(), a.str().len(), &mut pr, &mut bk) };
                    self.check("token_new.routing", rr, R::Ok, &t);
                    let parsed = parse_token(&t);
                    let cl = &self.hist[c];
                    let ok = parsed.is_some_and(|(s, tp, tb)| {
                        s == a.str()
                            && cl.token_node(tp) == pr
                            && tb.map_or(RACAFFINITY_NO_NODE, |b| cl.token_node(b)) == bk
                    });
                    self.holds("token_new.decodes_to_routing", ok, &(&t, pr, bk));
                    let (mut dp, mut db) = (0u32, 0u32);
                    let mut sidbuf = vec![0 as c_char; t.len() + 1];
                    let ct = CString::new(t.clone()).unwrap();
                    let rd = unsafe {
                        racaffinity_session_token_decode(
                            p,
                            ct.as_ptr(),
                            &mut dp,
                            &mut db,
                            sidbuf.as_mut_ptr(),
                            sidbuf.len(),
                            &mut need,
                        )
                    };
                    self.check("token_new.decode", rr, R::Ok, &rd);
                    self.holds("token_new.decode_nodes", (dp, db) == (pr, bk), &(dp, db, pr, bk));
                    self.remember_token(t);
                }
                Some(r)
            }
            Op::TokenDecode { h, tok, nulls, cap } => {
                let (p, live) = self.resolve(h);
                let a = self.tok_arg(live, &tok);
                let (mut pr, mut bk) = (u32::MAX - 1, u32::MAX - 1);
                let mut buf = vec![0x55 as c_char; usize::from(cap)];
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let mut need = 0usize;
                let r = unsafe {
                    racaffinity_session_token_decode(
                        p,
                        a.ptr(),
                        if nulls & 1 != 0 { null_mut() } else { &mut pr },
                        if nulls & 2 != 0 { null_mut() } else { &mut bk },
                        bp,
                        buf.len(),
                        &mut need,
                    )
                };
                let pre = a.pre.or((nulls & 3 != 0).then_some(R::NullArgument)).or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("token_decode.args", r, want, &(h, &tok, nulls));
                    return Some(r);
                }
                let Some((sid, tp, tb)) = parse_token(a.str()) else {
                    self.check("token_decode.malformed", r, R::InvalidArgument, &a.s);
                    return Some(r);
                };
                self.check("token_decode", r, Self::buf_result(bp, buf.len(), sid.len() + 1), &(&a.s, cap));
                self.holds("token_decode.need", need == sid.len() + 1, &(need, sid));
                let cl = &self.hist[live.unwrap()];
                let want = (cl.token_node(tp), tb.map_or(RACAFFINITY_NO_NODE, |b| cl.token_node(b)));
                self.holds("token_decode.nodes", (pr, bk) == want, &(&a.s, pr, bk, want));
                if let Some(got) = self.written("token_decode.len", r, &buf, need) {
                    self.holds("token_decode.sid", got == sid, &(got, sid));
                }
                Some(r)
            }
            Op::TokenRoute { h, tok, nulls, cap } => {
                let (p, live) = self.resolve(h);
                let a = self.tok_arg(live, &tok);
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let mut changed = false;
                let mut buf = vec![0x55 as c_char; usize::from(cap)];
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let mut need = 0usize;
                let r = unsafe {
                    racaffinity_session_token_route(
                        p,
                        a.ptr(),
                        if nulls & 1 != 0 { null_mut() } else { &mut route },
                        bp,
                        buf.len(),
                        &mut need,
                        if nulls & 2 != 0 { null_mut() } else { &mut changed },
                    )
                };
                // A NULL buf is refused before routing (so it changes nothing).
                let null_arg = nulls & 3 != 0 || bp.is_null();
                let pre = a.pre.or(null_arg.then_some(R::NullArgument)).or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("token_route.args", r, want, &(h, &tok, nulls));
                    return Some(r);
                }
                let c = live.unwrap();
                if parse_token(a.str()).is_none() {
                    self.check("token_route.malformed", r, R::InvalidArgument, &a.s);
                    return Some(r);
                }
                let mut want = self.hist[c].refusals(2);
                if !matches!(r, R::Ok | R::BufferTooSmall | R::NullArgument) {
                    self.check_in("token_route", r, &want, &a.s);
                    return Some(r);
                }
                want = vec![Self::buf_result(bp, buf.len(), need)];
                self.check_in("token_route.buffer", r, &want, &(&a.s, cap, need));
                // The node is written before the buffer: a short buffer still routes.
                self.route_ok("token_route.live", &self.hist[c], &route);
                // "A buffer of strlen(token) + 5 always fits."
                self.holds("token_route.fits", need <= a.str().len() + 5, &(&a.s, need));
                if let Some(t) = self.written("token_route.need", r, &buf, need) {
                    self.holds("token_route.changed", changed == (t != a.str()), &(&a.s, &t, changed));
                    // The token the client keeps names the node it was routed to.
                    let ok = parse_token(&t).is_some_and(|(_, tp, _)| self.hist[c].token_node(tp) == route.node);
                    self.holds("token_route.token_names_route", ok, &(&t, route));
                    self.remember_token(t);
                }
                Some(r)
            }
            Op::TokensRoute { h, toks, nulls, cap } => {
                let (p, live) = self.resolve(h);
                let args: Vec<TextArg> = toks.iter().take(8).map(|t| self.tok_arg(live, t)).collect();
                let ptrs: Vec<*const c_char> = args.iter().map(TextArg::ptr).collect();
                // nulls & 32: a NULL array (with its count, or with count 0).
                let (tp, count) = if nulls & 32 != 0 { (null(), ptrs.len()) } else { (ptrs.as_ptr(), ptrs.len()) };
                let mut index = usize::MAX;
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let mut changed = false;
                let mut buf = vec![0x55 as c_char; usize::from(cap)];
                let bp = if cap == 0 { null_mut() } else { buf.as_mut_ptr() };
                let mut need = usize::MAX;
                let r = unsafe {
                    racaffinity_session_tokens_route(
                        p,
                        tp,
                        count,
                        if nulls & 1 != 0 { null_mut() } else { &mut index },
                        if nulls & 2 != 0 { null_mut() } else { &mut route },
                        bp,
                        buf.len(),
                        &mut need,
                        if nulls & 4 != 0 { null_mut() } else { &mut changed },
                    )
                };
                // Every NULL (out-pointers, buf, the array, an element) is refused
                // before the handle and before routing; a candidate that is no text
                // (not UTF-8, over the cap) is only malformed.
                let null_arg = nulls & 7 != 0
                    || bp.is_null()
                    || (tp.is_null() && count > 0)
                    || args.iter().any(|a| a.pre == Some(R::NullArgument));
                let pre = null_arg.then_some(R::NullArgument).or(Self::handle_err(p, live));
                if let Some(want) = pre {
                    self.check("tokens_route.args", r, want, &(h, &toks, nulls));
                    return Some(r);
                }
                let c = live.unwrap();
                let cl = &self.hist[c];
                let parsed: Vec<Option<(&str, u32, Option<u32>)>> =
                    args.iter().map(|a| if a.pre.is_some() { None } else { parse_token(a.str()) }).collect();
                let names_a_node = |t: &(&str, u32, Option<u32>)| {
                    cl.token_node(t.1) != RACAFFINITY_NO_NODE
                        || t.2.is_some_and(|b| cl.token_node(b) != RACAFFINITY_NO_NODE)
                };
                // "the first token that names a node of this cluster as primary or
                // backup, else the first well-formed one"
                let chosen = parsed
                    .iter()
                    .position(|t| t.as_ref().is_some_and(names_a_node))
                    .or_else(|| parsed.iter().position(Option::is_some));
                let Some(ix) = chosen else {
                    // "When no candidate is well-formed (or count is 0) the result is
                    // INVALID_ARGUMENT and *out_index is count."
                    self.check("tokens_route.none_well_formed", r, R::InvalidArgument, &(&toks, count));
                    self.holds("tokens_route.index_is_count", index == count, &(index, count));
                    return Some(r);
                };
                // "A refusal (STRICT_AFFINITY, NO_NODE_AVAILABLE) still writes *out_index."
                self.holds("tokens_route.index", index == ix, &(index, ix, &toks));
                let t = args[ix].str().to_string();
                if !matches!(r, R::Ok | R::BufferTooSmall) {
                    self.check_in("tokens_route", r, &cl.refusals(2), &t);
                    return Some(r);
                }
                self.check("tokens_route.buffer", r, Self::buf_result(bp, buf.len(), need), &(&t, cap, need));
                self.route_ok("tokens_route.live", cl, &route);
                // "A buffer of the longest candidate's strlen + 5 always fits."
                let longest = args.iter().filter(|a| a.pre.is_none()).map(|a| a.str().len()).max().unwrap_or(0);
                self.holds("tokens_route.fits", need <= t.len() + 5 && need <= longest + 5, &(&t, need));
                if let Some(got) = self.written("tokens_route.need", r, &buf, need) {
                    // "*out_changed: whether it differs from tokens[*out_index]"
                    self.holds("tokens_route.changed", changed == (got != t), &(&t, &got, changed));
                    let ok = parse_token(&got).is_some_and(|(_, tp, _)| cl.token_node(tp) == route.node);
                    self.holds("tokens_route.token_names_route", ok, &(&got, route));
                    self.remember_token(got);
                }
                Some(r)
            }
            Op::EpochPage { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut w: *const u64 = null();
                let mut hand_out: *mut racaffinity_epoch_page = null_mut();
                let r = unsafe {
                    racaffinity_cluster_epoch_page(p, if null_out { null_mut() } else { &mut w }, &mut hand_out)
                };
                let want = if null_out { R::NullArgument } else { Self::handle_err(p, live).unwrap_or(R::Ok) };
                self.check("epoch_page", r, want, &(h, null_out));
                if r == R::Ok {
                    let now = read_word(w);
                    let c = live.unwrap();
                    // Every page of one cluster is the same word; every hand-out is new.
                    if let Some(e) = self.pages.iter().find(|pg| !pg.freed && pg.cluster == c) {
                        self.holds("epoch_page.same_word", e.word == w, &(e.word, w));
                    }
                    let fresh = !self.pages.iter().any(|pg| pg.hand_out == hand_out);
                    self.holds("epoch_page.never_reissued", fresh, &hand_out);
                    self.pages.push(Page { word: w, hand_out, cluster: c, last: now, freed: false });
                }
                Some(r)
            }
            Op::EpochFree { page } => {
                match page {
                    PageSel::Issued(i) if !self.pages.is_empty() => {
                        // A second free of a hand-out is a no-op, whatever other
                        // hand-outs of its word are live (check_pages reads them).
                        let i = usize::from(i) % self.pages.len();
                        racaffinity_epoch_page_free(self.pages[i].hand_out);
                        self.pages[i].freed = true;
                    }
                    PageSel::Issued(_) | PageSel::Null => racaffinity_epoch_page_free(null_mut()),
                    PageSel::Foreign(bits) => {
                        // A live word's address or any other number: never a hand-out.
                        let p = match self.pages.iter().find(|p| !p.freed) {
                            Some(pg) if bits & 1 == 0 => pg.word as usize as *mut racaffinity_epoch_page,
                            _ => bits as usize as *mut racaffinity_epoch_page,
                        };
                        if !self.pages.iter().any(|pg| pg.hand_out == p) {
                            racaffinity_epoch_page_free(p);
                        }
                    }
                }
                None
            }
            Op::RouteCacheable { h, ctx, nulls } | Op::PickHostLeasable { h, ctx, nulls } => {
                // One answer in two shapes: the pick also says who leased (a
                // route the host may lease is one it may cache).
                let pick = matches!(op, Op::PickHostLeasable { .. });
                let site = |route: &'static str, pick_site: &'static str| if pick { pick_site } else { route };
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                let epoch0 = live.and_then(|c| self.epoch_of(c));
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let mut lease =
                    racaffinity_lease { node: u32::MAX, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
                let mut flag = false;
                let out_flag: *mut bool = if nulls & 2 != 0 { null_mut() } else { &mut flag };
                let r = unsafe {
                    if pick {
                        let out = if nulls & 1 != 0 { null_mut() } else { &mut lease };
                        racaffinity_context_pick_host_leasable(p, k, out, out_flag)
                    } else {
                        let out = if nulls & 1 != 0 { null_mut() } else { &mut route };
                        racaffinity_context_route_cacheable(p, k, out, out_flag)
                    }
                };
                if pick {
                    route = racaffinity_route { node: lease.node, kind: lease.kind };
                }
                if nulls & 3 != 0 {
                    let s = site("route_cacheable.null_out", "pick_host_leasable.null_out");
                    self.check(s, r, R::NullArgument, &(h, nulls));
                    return Some(r);
                }
                let unissued_auto_pin = Self::handle_err(p, live).is_none()
                    && live.is_some_and(|c| self.hist[c].cfg.auto_pin && !self.hist[c].contexts.contains(&k));
                if unissued_auto_pin {
                    let s = site("route_cacheable.unissued_auto_pin", "pick_host_leasable.unissued_auto_pin");
                    self.check(s, r, R::InvalidArgument, &k);
                    return Some(r);
                }
                let s = site("context_route_cacheable", "context_pick_host_leasable");
                self.pick_result(s, r, p, live, None, Some(route));
                if r == R::Ok && flag {
                    let c = live.unwrap();
                    let affinity = route.kind == racaffinity_route_kind::Affinity;
                    self.holds(site("route_cacheable.affinity", "pick_host_leasable.affinity"), affinity, &route);
                    if pick {
                        let covered = (route.node as usize) < RACAFFINITY_HOST_LEASE_NODES;
                        self.holds("pick_host_leasable.has_word", covered, &route);
                        // The host's lease, not the library's: it cannot be released there.
                        let r2 = unsafe { racaffinity_lease_release(p, &lease, 2) };
                        self.check("pick_host_leasable.host_lease_not_releasable", r2, R::InvalidLease, &lease);
                    }
                    // While the epoch holds, the same context routes to the same node.
                    let mut again = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                    let r2 = unsafe { racaffinity_context_route(p, k, &mut again) };
                    if epoch0.is_some() && epoch0 == self.epoch_of(c) {
                        self.check(site("route_cacheable.again", "pick_host_leasable.again"), r2, R::Ok, &k);
                        let s = site("route_cacheable.same_route", "pick_host_leasable.same_route");
                        self.holds(s, again.node == route.node, &(route, again));
                    }
                } else if r == R::Ok && pick {
                    // The library leased the node: released at once, exactly once.
                    let r2 = unsafe { racaffinity_lease_release(p, &lease, 2) };
                    self.check("pick_host_leasable.release", r2, R::Ok, &lease);
                    let r3 = unsafe { racaffinity_lease_release(p, &lease, 2) };
                    self.check("pick_host_leasable.second_release", r3, R::InvalidLease, &lease);
                }
                Some(r)
            }
            Op::CountHostHits { h, node, scope, count } => {
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let count = match count {
                    Count::Small(v) => u64::from(v),
                    Count::Any(v) => v,
                };
                let scope = scope.map(|s| u32::from(s % 6));
                const SCOPES: [&str; 4] = ["thread", "transaction", "session", "data"];
                let scope_name = SCOPES.get(scope.unwrap_or(0) as usize).copied().unwrap_or("thread");
                let name = live.and_then(|c| self.hist[c].names.get(n as usize).cloned()).unwrap_or_default();
                let hits = |json: &str| hit_counts(json, n as usize, &name, scope_name);
                let before = live.and_then(|c| hits(&Self::metrics_of(self.hist[c].bits)));
                let r = match scope {
                    None => racaffinity_cluster_count_host_hits(p, n, count),
                    Some(s) => racaffinity_cluster_count_host_hits_for(p, n, s, count),
                };
                // The scope is checked before the handle, DATA (no context pin
                // follows it) by the core before the node. A removed node's id
                // still counts: its hits were served before the removal.
                let want = if scope.is_some_and(|s| s > 3) {
                    R::InvalidArgument
                } else {
                    Self::handle_err(p, live).unwrap_or_else(|| {
                        if scope == Some(3) {
                            R::InvalidArgument
                        } else if (n as usize) < self.hist[live.unwrap()].names.len() {
                            R::Ok
                        } else {
                            R::UnknownNode
                        }
                    })
                };
                self.check("count_host_hits", r, want, &(h, n, scope, count));
                if r == R::Ok {
                    let c = live.unwrap();
                    let after = hits(&Self::metrics_of(self.hist[c].bits));
                    if let (Some(b), Some(a)) = (before, after) {
                        let want = (b.0.wrapping_add(count), b.1.wrapping_add(count), b.2.wrapping_add(count));
                        self.holds("count_host_hits.exact", a == want, &(n, scope_name, count, b, a));
                    }
                }
                Some(r)
            }
            Op::HostLeaseEnd { h, node, outcome } => {
                let (end, site) = (racaffinity_cluster_host_lease_end, "host_lease_end");
                let (p, live) = self.resolve(h);
                let n = self.node_arg(live, node);
                let outcome = if outcome % 2 == 0 { 2 } else { 3 + outcome / 2 };
                let r = end(p, n, outcome);
                let want = if outcome > 2 {
                    R::InvalidArgument
                } else {
                    Self::handle_err(p, live).unwrap_or_else(|| {
                        // A removed node's id still ends its leases.
                        if (n as usize) < self.hist[live.unwrap()].names.len() {
                            R::Ok
                        } else {
                            R::UnknownNode
                        }
                    })
                };
                self.check(site, r, want, &(h, n, outcome));
                Some(r)
            }
            Op::AutoPin { h, null_out } => {
                let (p, live) = self.resolve(h);
                let mut v = false;
                let r = unsafe { racaffinity_cluster_auto_pin(p, if null_out { null_mut() } else { &mut v }) };
                let want = if null_out { R::NullArgument } else { Self::handle_err(p, live).unwrap_or(R::Ok) };
                self.check("auto_pin", r, want, &(h, null_out));
                if r == R::Ok {
                    self.holds("auto_pin.value", v == self.hist[live.unwrap()].cfg.auto_pin, &v);
                }
                Some(r)
            }
            Op::ContextPinFor { h, ctx, scope, null_out } => {
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                let scope = scope % 6;
                let mut route = racaffinity_route { node: u32::MAX, kind: racaffinity_route_kind::Balanced };
                let r =
                    unsafe { racaffinity_context_pin_for(p, k, scope, if null_out { null_mut() } else { &mut route }) };
                // The scope is checked before the handle; DATA by the core after it.
                let pre = if scope > 3 { Some(R::InvalidArgument) } else { Self::handle_err(p, live) };
                if let Some(want) = pre {
                    self.check("context_pin_for.args", r, want, &(h, scope));
                    return Some(r);
                }
                let c = live.unwrap();
                if scope == 3 {
                    self.check("context_pin_for.data", r, R::InvalidArgument, &k);
                    return Some(r);
                }
                let pinned = self.hist[c].ctx_depth.contains_key(&k) || self.hist[c].ctx_inexact.contains(&k);
                if !self.hist[c].contexts.contains(&k) && !pinned {
                    self.check("context_pin_for.unissued_key", r, R::InvalidArgument, &k);
                    return Some(r);
                }
                let mut want = self.ctx_refusals(c);
                want.extend(self.hist[c].refusals(scope as usize));
                self.check_in("context_pin_for", r, &want, &(k, scope));
                if r == R::Ok {
                    if !null_out {
                        self.route_ok("context_pin_for.live", &self.hist[c], &route);
                    }
                    let cl = &mut self.hist[c];
                    *cl.ctx_depth.entry(k).or_insert(0) += 1;
                    cl.ctx_scopes |= 1 << scope;
                    if scope == 2 {
                        cl.ctx_inexact.insert(k);
                    }
                }
                Some(r)
            }
            Op::ContextRelease { h, ctx, null_out } => {
                let (p, live) = self.resolve(h);
                let k = self.ctx_arg(live, ctx);
                let mut existed = false;
                let r = unsafe { racaffinity_context_release(p, k, if null_out { null_mut() } else { &mut existed }) };
                self.check("context_release", r, Self::handle_err(p, live).unwrap_or(R::Ok), &h);
                if r == R::Ok {
                    let c = live.unwrap();
                    let cl = &self.hist[c];
                    let d = cl.ctx_depth.get(&k).copied().unwrap_or(0);
                    if !null_out && !cl.cfg.auto_pin && !cl.ctx_inexact.contains(&k) {
                        self.holds("context_release.existed", existed == (d > 0), &(k, d, existed));
                    }
                    let cl = &mut self.hist[c];
                    cl.ctx_depth.remove(&k);
                    cl.ctx_inexact.remove(&k);
                    // Released at every level: nothing is left to unpin.
                    let mut released = true;
                    let r2 = unsafe { racaffinity_context_unpin(p, k, &mut released) };
                    self.check("context_release.unpin_after", r2, R::Ok, &k);
                    self.holds("context_release.gone", !released, &k);
                }
                Some(r)
            }
            Op::MapReplace { h, entries, source, nulls } => {
                let (p, live) = self.resolve(h);
                let src = text_arg(&source, &SOURCES, 64);
                let parts_n = live.map_or(4096, |c| self.hist[c].cfg.partitions);
                let names: Vec<(TextArg, String)> = entries
                    .iter()
                    .take(8)
                    .map(|(_, sel)| {
                        let (c, s) = self.name_arg(live, *sel);
                        let pre = match sel {
                            NameSel::Null => Some(R::NullArgument),
                            NameSel::NonUtf8 => Some(R::InvalidUtf8),
                            _ => None,
                        };
                        (TextArg { c: c.map(Cow::Owned), s: Some(s.clone()), pre, pool: None }, s)
                    })
                    .collect();
                let parts: Vec<u32> = entries.iter().take(8).map(|(p, _)| p % (parts_n + 2)).collect();
                let ptrs: Vec<*const c_char> = names.iter().map(|(a, _)| a.ptr()).collect();
                let mode = nulls % 8;
                let len = if mode == 4 { MAX_PARTITIONS as usize + 1 } else { parts.len() };
                let (pp, np) = match mode {
                    1 => (null(), ptrs.as_ptr()),
                    2 => (parts.as_ptr(), null()),
                    4 => (null(), null()),
                    _ => (parts.as_ptr(), ptrs.as_ptr()),
                };
                let mut epoch = 0u64;
                let word0 = live.and_then(|c| self.epoch_of(c));
                let r = unsafe {
                    racaffinity_partition_map_replace(
                        p,
                        pp,
                        np,
                        len,
                        src.ptr(),
                        if mode == 3 { null_mut() } else { &mut epoch },
                    )
                };
                let pre = if mode == 3 {
                    Some(R::NullArgument)
                } else if src.pre.is_some() {
                    src.pre
                } else if mode == 4 {
                    Some(R::InvalidArgument)
                } else if len > 0 && matches!(mode, 1 | 2) {
                    Some(R::NullArgument)
                } else {
                    names.iter().find_map(|(a, _)| a.pre).or(Self::handle_err(p, live))
                };
                if let Some(want) = pre {
                    self.check(
                        "map_replace.args",
                        r,
                        want,
                        &(h, mode, &names.iter().map(|n| &n.1).collect::<Vec<_>>()),
                    );
                    return Some(r);
                }
                let c = live.unwrap();
                let cl = &self.hist[c];
                let src_ok =
                    racaffinity::check_partition_map_source(src.str()).is_ok() && (1..=64).contains(&src.str().len());
                let mut want = if src_ok { R::Ok } else { R::InvalidArgument };
                let mut map: Vec<(u32, usize)> = Vec::new();
                if want == R::Ok {
                    for (pt, (_, name)) in parts.iter().zip(&names) {
                        if *pt >= cl.cfg.partitions {
                            want = R::InvalidArgument;
                        } else if let Some(i) = cl.find(name) {
                            if map.iter().any(|(q, _)| q == pt) {
                                want = R::InvalidArgument;
                            } else {
                                map.push((*pt, i));
                                continue;
                            }
                        } else {
                            want = R::UnknownNode;
                        }
                        break;
                    }
                }
                self.check(
                    "map_replace",
                    r,
                    want,
                    &(src.str(), &parts, names.iter().map(|n| &n.1).collect::<Vec<_>>()),
                );
                if r == R::Ok {
                    let last = self.hist[c].map_epoch;
                    self.holds("map_replace.epoch_grows", epoch > last, &(last, epoch));
                    self.hist[c].map_epoch = epoch;
                    if let (Some(w0), Some(w1)) = (word0, self.epoch_of(c)) {
                        self.holds("map_replace.routing_epoch_advances", w1 > w0, &(w0, w1));
                    }
                    // Each partition given now belongs to the node given.
                    for (pt, i) in map {
                        let mut owner = u32::MAX;
                        let r2 = unsafe { racaffinity_partition_owner(p, pt, &mut owner) };
                        self.check("map_replace.owner_call", r2, R::Ok, &pt);
                        self.holds("map_replace.owner", owner == i as u32, &(pt, owner, i));
                    }
                }
                Some(r)
            }
            Op::MapLoadFailed { h, source, error } => {
                let (p, live) = self.resolve(h);
                let src = text_arg(&source, &SOURCES, 64);
                let err = text_arg(&error, &ERRORS, 4096);
                let r = unsafe { racaffinity_partition_map_load_failed(p, src.ptr(), err.ptr()) };
                if let Some(want) = src.pre.or(err.pre).or(Self::handle_err(p, live)) {
                    self.check("map_load_failed.args", r, want, &(h, &source, &error));
                    return Some(r);
                }
                let c = live.unwrap();
                let src_ok =
                    racaffinity::check_partition_map_source(src.str()).is_ok() && (1..=64).contains(&src.str().len());
                self.check("map_load_failed", r, if src_ok { R::Ok } else { R::InvalidArgument }, &src.s);
                if r == R::Ok {
                    self.hist[c].load_failures += 1;
                    let v: serde_json::Value =
                        serde_json::from_str(&Self::metrics_of(self.hist[c].bits)).expect("metrics JSON");
                    let pm = &v["partition_map"];
                    let text = format!("{}: {}", src.str(), err.str());
                    let last = pm["last_error"].as_str().unwrap_or("");
                    self.holds(
                        "map_load_failed.metrics",
                        pm["load_failures"].as_u64() == Some(self.hist[c].load_failures)
                            && !last.is_empty()
                            && text.starts_with(last),
                        &(pm, &text),
                    );
                }
                Some(r)
            }
            Op::Connect { form, host, port, service, instance, cap } => {
                let hosts: Vec<&str> = HOSTS.iter().map(|x| x.0).collect();
                let h = text_arg(&host, &hosts, 253);
                let valid = h.pool.map(|i| HOSTS[i].1);
                let v6 = h.pool.is_some_and(|i| HOSTS[i].2);
                let bare = h.str().trim_start_matches('[').trim_end_matches(']').to_string();
                self.connect(form, h, valid, bare, v6, port, &service, &instance, cap, false, 0)
            }
            Op::AddressConnect { form, address, default_port, service, instance, cap } => {
                let addrs: Vec<&str> = ADDRESSES.iter().map(|x| x.0).collect();
                let a = text_arg(&address, &addrs, 253);
                let e = a.pool.map(|i| ADDRESSES[i]);
                let port = e.map_or(0, |e| if e.3 == 0 { default_port } else { e.3 });
                // No port in the address and none by default: INVALID_ARGUMENT.
                let valid = e.map(|e| e.1 && port != 0);
                let v6 = e.is_some_and(|e| e.2.contains(':'));
                let bare = e.map_or(String::new(), |e| e.2.to_string());
                self.connect(form, a, valid, bare, v6, port, &service, &instance, cap, true, default_port)
            }
            _ => unreachable!("step handles {op:?}"),
        }
    }

    /// connect_string (address = false: `host` and `port` as given) and
    /// address_connect_string (`host` is the listener address, `port` the
    /// one the model expects in the output).
    #[allow(clippy::too_many_arguments)]
    fn connect(
        &mut self,
        form: u32,
        host: TextArg,
        host_valid: Option<bool>,
        bare_host: String,
        v6: bool,
        port: u16,
        service: &Text,
        instance: &Text,
        cap: u16,
        address: bool,
        default_port: u16,
    ) -> Option<R> {
        let form = form % 6;
        let services: Vec<&str> = SERVICES.iter().map(|x| x.0).collect();
        let instances: Vec<&str> = INSTANCES.iter().map(|x| x.0).collect();
        let s = text_arg(service, &services, 128);
        let i = text_arg(instance, &instances, 64);
        let mut buf = vec![0x55 as c_char; usize::from(cap % 300)];
        let bp = if buf.is_empty() { null_mut() } else { buf.as_mut_ptr() };
        let mut need = 0usize;
        let r = unsafe {
            if address {
                racaffinity_address_connect_string(
                    form,
                    host.ptr(),
                    default_port,
                    s.ptr(),
                    i.ptr(),
                    bp,
                    buf.len(),
                    &mut need,
                )
            } else {
                racaffinity_connect_string(form, host.ptr(), port, s.ptr(), i.ptr(), bp, buf.len(), &mut need)
            }
        };
        let site = if address { "address_connect_string" } else { "connect_string" };
        let what = (form, &host.s, port, &s.s, &i.s, cap);
        if let Some(want) = host.pre.or(s.pre).or(i.pre) {
            self.check(site, r, want, &what);
            return Some(r);
        }
        // Known only when every value comes from the pools.
        let valid = match (host_valid, s.pool, i.pool) {
            (Some(h), Some(sv), Some(iv)) => Some(h && SERVICES[sv].1 && INSTANCES[iv].1 && (address || port != 0)),
            _ => None,
        };
        if form > 3 || valid == Some(false) {
            self.check(site, r, R::InvalidArgument, &what);
            return Some(r);
        }
        if valid.is_none() {
            if r == R::InvalidArgument {
                return Some(r);
            }
            // Accepted: no value may carry anything that breaks the syntax.
            self.holds(
                "connect_string.safe_values",
                connect_safe(host.str()) && connect_safe(s.str()) && connect_safe(i.str()),
                &what,
            );
        }
        self.check_in(site, r, &[Self::buf_result(bp, buf.len(), need)], &(what, need));
        if let Some(got) = self.written("connect_string.need", r, &buf, need) {
            if valid == Some(true) {
                let url_host = if v6 { format!("[{bare_host}]") } else { bare_host.clone() };
                let easy = format!("{url_host}:{port}/{}/{}", s.str(), i.str());
                let desc = format!(
                    "(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST={bare_host})(PORT={port})))\
                     (CONNECT_DATA=(SERVICE_NAME={})(INSTANCE_NAME={})))",
                    s.str(),
                    i.str()
                );
                let want = match form {
                    0 => desc,
                    1 => easy,
                    2 => format!("jdbc:oracle:thin:@{desc}"),
                    _ => format!("jdbc:oracle:thin:@//{easy}"),
                };
                self.holds("connect_string.value", got == want, &(got, want));
            }
        }
        Some(r)
    }
}

fuzz_target!(|input: Input| {
    let mut m = Model {
        hist: Vec::new(),
        slots: [None, None],
        leases: Vec::new(),
        allowed: known_findings(),
        tokens: Vec::new(),
        pages: Vec::new(),
        seen: Vec::new(),
        moved: false,
    };
    // Every sequence starts from two live clusters so most ops reach the core.
    m.new_cluster(false, 0);
    m.new_cluster(true, 1);
    let first = input.ops.len().min(256);
    for op in &input.ops[..first] {
        m.run(op);
    }
    for later in input.later.into_iter().take(256 - first) {
        m.run(&later.into());
    }
    // Leave nothing behind for the next input: every live cluster is freed
    // (after its thread pins), and freeing it again is INVALID_HANDLE.
    for i in 0..m.hist.len() {
        if m.hist[i].live {
            let bits = m.hist[i].bits as usize as *mut racaffinity_cluster;
            m.free_slot_cluster(i);
            assert_eq!(racaffinity_cluster_free(bits), R::InvalidHandle, "double free");
        }
    }
    // Every epoch word is still readable after its cluster is gone (ASan
    // checks the read), until it is freed.
    m.check_pages();
    for pg in &m.pages {
        if !pg.freed {
            racaffinity_epoch_page_free(pg.hand_out);
        }
    }
    // Every hand-out is freed now: one more free of each is a no-op.
    for pg in &m.pages {
        racaffinity_epoch_page_free(pg.hand_out);
    }
});
