//! Runs the shared test vectors in `tests/vectors/*.json` against the public API.
//!
//! The vectors are written by `tests/vectors/generate.py`; the rendezvous ones
//! come from an independent Python implementation of racaffinity-hrw-v2 written
//! from the documentation in `hash.rs`, so this test checks the core against
//! the documentation, not against itself. Every binding runs the same files.
//!
//! Every `*.json` file in the directory must have a handler here, every known
//! file must exist, and every object's keys must be understood, so vectors
//! cannot be skipped silently. All mismatches are collected and reported
//! together.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;

use racaffinity::config::Config;
use racaffinity::connect::{
    descriptor, easy_connect, jdbc_descriptor_url, jdbc_easy_connect_url, split_host_port, InstanceAddress,
};
use racaffinity::event::{parse_event, Event, FanEvent, RlbAdvisory};
use racaffinity::hash;
use racaffinity::{validate_node_name, Cluster, DataKey, Error, EventEffect, NodeId, Route, RouteKind, SessionMode};
use serde_json::{json, Map, Value};

/// Smallest believable number of checks per file: an emptied or truncated
/// file must fail rather than pass vacuously.
const MIN_CASES: &[(&str, usize)] =
    &[("rendezvous.json", 400), ("events.json", 80), ("connect.json", 60), ("config.json", 40), ("xa_keys.json", 90)];

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// Checks and failures of one file.
struct Run {
    file: String,
    cases: usize,
    failures: Vec<String>,
}

impl Run {
    fn fail(&mut self, ctx: &str, msg: impl std::fmt::Display) {
        self.failures.push(format!("{}: {ctx}: {msg}", self.file));
    }

    /// One case: `got` must equal `want`.
    fn eq<T: PartialEq + Debug>(&mut self, ctx: &str, got: T, want: T) {
        self.cases += 1;
        if got != want {
            self.fail(ctx, format!("got {got:?}, want {want:?}"));
        }
    }

    /// One case: `r` must fail with error kind `want`.
    fn err<T: Debug>(&mut self, ctx: &str, r: Result<T, Error>, want: &str) {
        self.cases += 1;
        match r {
            Ok(v) => self.fail(ctx, format!("got Ok({v:?}), want error {want}")),
            Err(e) if kind(&e) != want => self.fail(ctx, format!("got error {} ({e}), want {want}", kind(&e))),
            Err(_) => {}
        }
    }

    /// `v` must be an object with only `allowed` keys (and all of `required`).
    fn keys<'a>(&mut self, ctx: &str, v: &'a Value, required: &[&str], optional: &[&str]) -> &'a Map<String, Value> {
        let Some(m) = v.as_object() else { panic!("{}: {ctx}: expected an object, got {v}", self.file) };
        for k in m.keys() {
            if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
                self.fail(ctx, format!("unknown key `{k}` (the harness would ignore it)"));
            }
        }
        for k in required {
            if !m.contains_key(*k) {
                self.fail(ctx, format!("missing key `{k}`"));
            }
        }
        m
    }
}

fn kind(e: &Error) -> String {
    format!("{:?}", e.kind())
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn opt_s(v: &Value) -> Option<&str> {
    if v.is_null() {
        None
    } else {
        Some(s(v))
    }
}

/// The objects of the array `v[name]`, each checked to hold exactly the `required` keys.
fn cases<'a>(run: &mut Run, v: &'a Map<String, Value>, name: &str, required: &[&str]) -> Vec<&'a Map<String, Value>> {
    arr(&v[name]).iter().map(|c| run.keys(name, c, required, &[])).collect()
}

fn arr(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("expected an array, got {v}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

fn hex64(v: &Value) -> u64 {
    let t = s(v);
    assert_eq!(t.len(), 16, "u64 hex must have 16 digits: {t}");
    u64::from_str_radix(t, 16).unwrap_or_else(|e| panic!("bad u64 hex {t}: {e}"))
}

fn dec_i64(v: &Value) -> i64 {
    s(v).parse().unwrap_or_else(|e| panic!("bad i64 {v}: {e}"))
}

fn unhex(t: &str) -> Vec<u8> {
    assert!(t.len() % 2 == 0, "odd hex length: {t}");
    (0..t.len()).step_by(2).map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("hex digit")).collect()
}

/// A byte string `{hex, utf8?, repeat?}`; `utf8`, when given, must spell the same bytes.
fn bytes(run: &mut Run, ctx: &str, v: &Value) -> Vec<u8> {
    let m = run.keys(ctx, v, &["hex"], &["utf8", "repeat"]);
    let one = unhex(s(&m["hex"]));
    if let Some(t) = m.get("utf8") {
        run.eq(&format!("{ctx}: utf8 spelling of the hex"), s(t).as_bytes(), &one[..]);
    }
    let n = m.get("repeat").map_or(1, u) as usize;
    one.repeat(n)
}

fn show(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(t) if b.len() <= 40 => format!("{t:?}"),
        _ if b.len() <= 40 => format!("0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        _ => format!("<{} bytes>", b.len()),
    }
}

fn name_of(c: &Cluster, id: NodeId) -> String {
    c.node_name(id).unwrap_or_else(|| format!("#{}", id.0))
}

fn cluster(run: &mut Run, ctx: &str, config: &str) -> Option<Cluster> {
    match Cluster::from_config_text(config) {
        Ok(c) => Some(c),
        Err(e) => {
            run.fail(ctx, format!("config {config:?} refused: {e}"));
            None
        }
    }
}

// ---------------------------------------------------------------------------
// rendezvous.json
// ---------------------------------------------------------------------------

fn rendezvous(run: &mut Run, v: &Value) {
    let top = run.keys("top", v, &["description", "hash_version", "hash", "topologies", "errors"], &[]);
    run.eq("hash_version", s(&top["hash_version"]), hash::HASH_VERSION);

    let h = run.keys("hash", &top["hash"], &["fmix64", "hash_bytes", "hash_i64", "score", "weighted_score"], &[]);
    for m in cases(run, h, "fmix64", &["input", "output"]) {
        let input = hex64(&m["input"]);
        run.eq(&format!("fmix64({input:016x})"), hash::fmix64(input), hex64(&m["output"]));
    }
    for m in cases(run, h, "hash_bytes", &["bytes", "fnv1a64", "hash"]) {
        let b = bytes(run, "hash_bytes", &m["bytes"]);
        let want = hex64(&m["hash"]);
        run.eq(&format!("hash_bytes({})", show(&b)), hash::hash_bytes(&b), want);
        // The intermediate FNV value is for other languages; it must finalise to `hash`.
        run.eq(&format!("fmix64(fnv1a64) of {}", show(&b)), hash::fmix64(hex64(&m["fnv1a64"])), want);
    }
    for m in cases(run, h, "hash_i64", &["i64", "hash"]) {
        let k = dec_i64(&m["i64"]);
        run.eq(&format!("hash_i64({k})"), hash::hash_i64(k), hex64(&m["hash"]));
    }
    for m in cases(run, h, "score", &["key_hash", "node_seed", "score"]) {
        let (k, sd) = (hex64(&m["key_hash"]), hex64(&m["node_seed"]));
        run.eq(&format!("score({k:016x}, {sd:016x})"), hash::score(k, sd), hex64(&m["score"]));
    }
    for m in cases(run, h, "weighted_score", &["score", "weight", "bits", "value"]) {
        let sc = hex64(&m["score"]);
        let w = m["weight"].as_f64().expect("weight");
        let ctx = format!("weighted_score({sc:016x}, {w})");
        let got = hash::weighted_score(sc, w);
        run.eq(&ctx, format!("{:016x}", got.to_bits()), s(&m["bits"]).to_string());
        let value: f64 = s(&m["value"]).parse().expect("value");
        run.eq(&format!("{ctx}: value matches bits"), value.to_bits(), hex64(&m["bits"]));
    }

    let topologies = arr(&top["topologies"]);
    for t in topologies {
        topology(run, t);
    }

    let first = topologies.first().map(|t| s(&t["config"]).to_string()).unwrap_or_default();
    for m in cases(run, top, "errors", &["op", "arg", "error"]) {
        let Some(cl) = cluster(run, "errors", &first) else { continue };
        let (op, want) = (s(&m["op"]), s(&m["error"]));
        let arg = &m["arg"];
        let ctx = format!("errors: {op}({})", if arg.is_object() { "<bytes>".into() } else { arg.to_string() });
        let b = if arg.is_object() { bytes(run, &ctx, arg) } else { Vec::new() };
        match op {
            "tx_begin" => run.err(&ctx, cl.tx_begin(&b), want),
            "session_route" => run.err(&ctx, cl.session_route(&b), want),
            "route_key" => run.err(&ctx, cl.route_key(&b), want),
            "partition_of" => run.err(&ctx, cl.partition_of(DataKey::Bytes(&b)), want),
            "partition_owner" => {
                let p = u32::try_from(u(arg)).expect("partition fits u32");
                run.err(&ctx, cl.partition_owner(p), want)
            }
            "remove_node" => run.err(&ctx, cl.remove_node(s(arg)), want),
            other => run.fail(&ctx, format!("no handler for op `{other}`")),
        }
    }
}

fn topology(run: &mut Run, t: &Value) {
    let m = run.keys(
        "topology",
        t,
        &[
            "name",
            "about",
            "config",
            "partitions",
            "nodes",
            "transactions",
            "sessions",
            "data",
            "partition_owners",
            "removals",
        ],
        &[],
    );
    let tname = s(&m["name"]).to_string();
    let config = s(&m["config"]).to_string();
    let Some(c) = cluster(run, &tname, &config) else { return };
    run.eq(&format!("{tname}: session.mode"), c.config().session.mode, SessionMode::Stateless);
    run.eq(&format!("{tname}: partitions"), u64::from(c.partitions()), u(&m["partitions"]));

    let mut want_nodes = Vec::new();
    for n in arr(&m["nodes"]) {
        let nm = run.keys(&tname, n, &["name", "weight", "seed"], &[]);
        let name = s(&nm["name"]);
        run.eq(&format!("{tname}: seed of {name}"), hash::node_seed(name), hex64(&nm["seed"]));
        want_nodes.push((name.to_string(), u(&nm["weight"])));
    }
    let got_nodes: Vec<(String, u64)> = c
        .node_ids()
        .into_iter()
        .map(|id| {
            let n = c.node(id).expect("live node");
            (n.name().to_string(), u64::from(n.weight()))
        })
        .collect();
    run.eq(&format!("{tname}: nodes (name, weight) in id order"), got_nodes, want_nodes);

    routed(run, &tname, &c, m, false);
    for p in arr(&m["partition_owners"]) {
        partition_owner(run, &tname, &c, p);
    }

    for r in arr(&m["removals"]) {
        let rm =
            run.keys(&tname, r, &["remove", "removed", "transactions", "sessions", "data", "partition_owners"], &[]);
        let ctx = format!("{tname} without {}", s(&rm["remove"]));
        // A fresh cluster: the first one's registries hold the keys routed above.
        let Some(c) = cluster(run, &ctx, &config) else { continue };
        match c.remove_node(s(&rm["remove"])) {
            Ok(id) => run.eq(&format!("{ctx}: removed node"), name_of(&c, id), s(&rm["removed"]).to_string()),
            Err(e) => {
                run.fail(&ctx, format!("remove_node failed: {e}"));
                continue;
            }
        }
        routed(run, &ctx, &c, rm, true);
        for p in arr(&rm["partition_owners"]) {
            partition_owner(run, &ctx, &c, p);
        }
    }
}

fn partition_owner(run: &mut Run, ctx: &str, c: &Cluster, v: &Value) {
    let m = run.keys(ctx, v, &["partition", "owner"], &[]);
    let p = u32::try_from(u(&m["partition"])).expect("partition fits u32");
    let got = c.partition_owner(p).map(|id| name_of(c, id));
    run.eq(&format!("{ctx}: partition_owner({p})"), got, Ok(s(&m["owner"]).to_string()));
}

/// Transactions, sessions and data keys of one topology (or of one removal,
/// whose rows carry `owner_before` instead of `hash`).
fn routed(run: &mut Run, ctx: &str, c: &Cluster, m: &Map<String, Value>, removal: bool) {
    let extra: &[&str] = if removal { &["owner_before"] } else { &["hash"] };
    let check_hash = |run: &mut Run, row: &Map<String, Value>, what: &str, got: u64| {
        if let Some(hv) = row.get("hash") {
            run.eq(&format!("{what}: hash"), got, hex64(hv));
        }
    };
    let check_before = |run: &mut Run, row: &Map<String, Value>, what: &str, removed: &str| {
        // Vector sanity: only the removed node's keys may move.
        if let Some(b) = row.get("owner_before") {
            let (b, now) = (s(b), s(&row["owner"]));
            if b != now && !b.eq_ignore_ascii_case(removed) {
                run.fail(what, format!("vector moves a key from {b} to {now}, but only {removed}'s keys may move"));
            }
        }
    };
    let removed = m.get("removed").map(|v| s(v).to_string()).unwrap_or_default();

    // A gtrid's first branch is placed; a session's first route is already affinity.
    type RouteBytes = fn(&Cluster, &[u8]) -> racaffinity::Result<Route>;
    let keyed: [(&str, &str, &str, RouteBytes, RouteKind); 2] = [
        ("transactions", "gtrid", "tx_begin", Cluster::tx_begin, RouteKind::Placed),
        ("sessions", "key", "session_route", Cluster::session_route, RouteKind::Affinity),
    ];
    for (section, field, call, route, kind) in keyed {
        for row in arr(&m[section]) {
            let r = run.keys(ctx, row, &[field, "owner"], extra);
            let k = bytes(run, ctx, &r[field]);
            let what = format!("{ctx}: {call}({})", show(&k));
            check_hash(run, r, &what, hash::hash_bytes(&k));
            check_before(run, r, &what, &removed);
            let got = route(c, &k).map(|rt| (name_of(c, rt.node), rt.kind));
            run.eq(&what, got, Ok((s(&r["owner"]).to_string(), kind)));
        }
    }
    for row in arr(&m["data"]) {
        let r = run.keys(ctx, row, &["partition", "owner"], &[extra, &["key", "i64"]].concat());
        let want = Ok((s(&r["owner"]).to_string(), RouteKind::Affinity));
        let want_p = Ok(u(&r["partition"]) as u32);
        if let Some(kv) = r.get("key") {
            let k = bytes(run, ctx, kv);
            let what = format!("{ctx}: route_key({})", show(&k));
            check_hash(run, r, &what, hash::hash_bytes(&k));
            check_before(run, r, &what, &removed);
            run.eq(&format!("{what}: partition_of"), c.partition_of(DataKey::Bytes(&k)), want_p.clone());
            run.eq(&what, c.route_key(&k).map(|rt| (name_of(c, rt.node), rt.kind)), want);
        } else if let Some(iv) = r.get("i64") {
            let k = dec_i64(iv);
            let what = format!("{ctx}: route_key_i64({k})");
            check_hash(run, r, &what, hash::hash_i64(k));
            check_before(run, r, &what, &removed);
            run.eq(&format!("{what}: partition_of"), c.partition_of(DataKey::Int(k)), want_p);
            run.eq(&what, c.route_key_i64(k).map(|rt| (name_of(c, rt.node), rt.kind)), want);
        } else {
            run.fail(ctx, "data row has neither `key` nor `i64`");
        }
    }
}

// ---------------------------------------------------------------------------
// events.json
// ---------------------------------------------------------------------------

fn fan_json(e: &FanEvent) -> Value {
    json!({
        "kind": "fan",
        "event_type": e.event_type.as_str(),
        "version": e.version,
        "service": e.service,
        "database": e.database,
        "instance": e.instance,
        "host": e.host,
        "status": e.status.as_str(),
        "reason": e.reason.map(|r| r.as_str()),
        "card": e.card,
        "timestamp": e.timestamp,
    })
}

fn rlb_json(a: &RlbAdvisory) -> Value {
    json!({
        "kind": "rlb",
        "version": a.version,
        "database": a.database,
        "service": a.service,
        "timestamp": a.timestamp,
        "entries": a.entries.iter().map(|e| json!({
            "instance": e.instance,
            "percent": e.percent,
            "flag": e.flag.as_str(),
            "aff": e.aff,
        })).collect::<Vec<_>>(),
    })
}

fn node_views(c: &Cluster) -> Value {
    c.node_ids()
        .into_iter()
        .map(|id| {
            let n = c.node(id).expect("live node");
            json!({
                "name": n.name(),
                "state": n.state().as_str(),
                "effective_weight": n.effective_weight(),
                "rlb_percent": n.rlb_percent(),
                "rlb_flag": n.rlb_flag().map(|f| f.as_str()),
                "affinity_advised": n.affinity_advised(),
            })
        })
        .collect()
}

fn effect_json(c: &Cluster, e: &EventEffect) -> Value {
    let names = |ids: &[NodeId]| ids.iter().map(|id| name_of(c, *id)).collect::<Vec<_>>();
    json!({
        "changes": e.changes.iter().map(|ch| json!({
            "node": ch.name, "from": ch.from.as_str(), "to": ch.to.as_str(),
        })).collect::<Vec<_>>(),
        "revoked": names(&e.revoked),
        "advised": names(&e.advised),
    })
}

fn events(run: &mut Run, v: &Value) {
    let top = run.keys("top", v, &["description", "parse", "parse_errors", "apply"], &[]);
    for m in cases(run, top, "parse", &["line", "expect"]) {
        let line = s(&m["line"]);
        let got = match parse_event(line) {
            Ok(Event::Fan(e)) => fan_json(&e),
            Ok(Event::Rlb(a)) => rlb_json(&a),
            Err(e) => json!({ "error": kind(&e), "message": e.to_string() }),
        };
        run.eq(&format!("parse_event({line:?})"), got, m["expect"].clone());
    }
    for m in cases(run, top, "parse_errors", &["line", "error"]) {
        let line = s(&m["line"]);
        run.err(&format!("parse_event({line:?})"), parse_event(line), s(&m["error"]));
    }
    for case in arr(&top["apply"]) {
        let m = run.keys("apply", case, &["name", "config", "steps", "nodes"], &[]);
        let name = s(&m["name"]);
        let Some(c) = cluster(run, name, s(&m["config"])) else { continue };
        for (i, step) in arr(&m["steps"]).iter().enumerate() {
            let st = run.keys(name, step, &["line", "error"], &["changes", "revoked", "advised"]);
            let line = s(&st["line"]);
            let ctx = format!("{name}: step {} apply_event({line:?})", i + 1);
            let before = node_views(&c);
            let r = c.apply_event(line);
            match opt_s(&st["error"]) {
                Some(want) => {
                    run.err(&ctx, r, want);
                    run.eq(&format!("{ctx}: a failed line changes nothing"), node_views(&c), before);
                }
                None => {
                    let want = json!({
                        "changes": st.get("changes").cloned().unwrap_or(json!([])),
                        "revoked": st.get("revoked").cloned().unwrap_or(json!([])),
                        "advised": st.get("advised").cloned().unwrap_or(json!([])),
                    });
                    let got = r.map(|e| effect_json(&c, &e)).map_err(|e| format!("{} ({e})", kind(&e)));
                    run.eq(&ctx, got, Ok(want));
                }
            }
        }
        run.eq(&format!("{name}: nodes after the last step"), node_views(&c), m["nodes"].clone());
    }
}

// ---------------------------------------------------------------------------
// connect.json
// ---------------------------------------------------------------------------

fn address<'a>(run: &mut Run, ctx: &str, m: &'a Map<String, Value>) -> Option<InstanceAddress<'a>> {
    let Ok(port) = u16::try_from(u(&m["port"])) else {
        run.fail(ctx, "port does not fit u16 (such cases are for bindings with wider port types)");
        return None;
    };
    Some(InstanceAddress { host: s(&m["host"]), port, service: s(&m["service"]), instance: s(&m["instance"]) })
}

fn connect(run: &mut Run, v: &Value) {
    let top = run.keys("top", v, &["description", "build", "build_errors", "split_host_port"], &[]);
    for m in cases(run, top, "build", &["host", "port", "service", "instance", "expect"]) {
        let ctx = format!("build({}:{}/{}/{})", s(&m["host"]), m["port"], s(&m["service"]), s(&m["instance"]));
        let Some(a) = address(run, &ctx, m) else { continue };
        let e = run.keys(
            &ctx,
            &m["expect"],
            &["descriptor", "easy_connect", "jdbc_descriptor_url", "jdbc_easy_connect_url"],
            &[],
        );
        let want = |k: &str| Ok(s(&e[k]).to_string());
        run.eq(&format!("{ctx}: validate"), a.validate(), Ok(()));
        run.eq(&format!("{ctx}: descriptor"), descriptor(&a), want("descriptor"));
        run.eq(&format!("{ctx}: easy_connect"), easy_connect(&a), want("easy_connect"));
        run.eq(&format!("{ctx}: jdbc_descriptor_url"), jdbc_descriptor_url(&a), want("jdbc_descriptor_url"));
        run.eq(&format!("{ctx}: jdbc_easy_connect_url"), jdbc_easy_connect_url(&a), want("jdbc_easy_connect_url"));
    }
    for m in cases(run, top, "build_errors", &["host", "port", "service", "instance", "error"]) {
        let ctx = format!("build({:?}:{}/{:?}/{:?})", s(&m["host"]), m["port"], s(&m["service"]), s(&m["instance"]));
        let Some(a) = address(run, &ctx, m) else { continue };
        let want = s(&m["error"]);
        run.err(&format!("{ctx}: validate"), a.validate(), want);
        run.err(&format!("{ctx}: descriptor"), descriptor(&a), want);
        run.err(&format!("{ctx}: easy_connect"), easy_connect(&a), want);
        run.err(&format!("{ctx}: jdbc_descriptor_url"), jdbc_descriptor_url(&a), want);
        run.err(&format!("{ctx}: jdbc_easy_connect_url"), jdbc_easy_connect_url(&a), want);
    }
    for c in arr(&top["split_host_port"]) {
        let m = run.keys("split_host_port", c, &["input", "default_port"], &["host", "port", "error"]);
        let input = s(&m["input"]);
        let default = u16::try_from(u(&m["default_port"])).expect("default_port fits u16");
        let ctx = format!("split_host_port({input:?}, {default})");
        let got = split_host_port(input, default).map(|(h, p)| (h.to_string(), p));
        match opt_s(m.get("error").unwrap_or(&Value::Null)) {
            Some(want) => run.err(&ctx, got, want),
            None => {
                let port = u16::try_from(u(&m["port"])).expect("port fits u16");
                run.eq(&ctx, got, Ok((s(&m["host"]).to_string(), port)))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// config.json
// ---------------------------------------------------------------------------

fn config_field(c: &Config, key: &str) -> Option<Value> {
    let nodes = || -> Value {
        c.nodes.iter().map(|n| json!({ "name": n.name, "weight": n.weight, "address": n.address })).collect()
    };
    let mode = match c.session.mode {
        SessionMode::Registry => "registry",
        SessionMode::Stateless => "stateless",
    };
    Some(match key {
        "name" => json!(c.name),
        "database" => json!(c.database),
        "service" => json!(c.service),
        "nodes" => nodes(),
        "policy" => json!(c.policy.as_str()),
        "panic" => json!(c.panic.as_str()),
        "thread.strict" => json!(c.thread.strict),
        "thread.auto_pin" => json!(c.thread.auto_pin),
        "transaction.strict" => json!(c.transaction.strict),
        "transaction.placement" => json!(c.transaction.placement.as_str()),
        "session.strict" => json!(c.session.strict),
        "session.placement" => json!(c.session.placement.as_str()),
        "session.mode" => json!(mode),
        "session.idle_ttl_ms" => json!(c.session.idle_ttl_ms),
        "data.strict" => json!(c.data.strict),
        "data.placement" => json!(c.data.placement.as_str()),
        "data.partitions" => json!(c.data.partitions),
        "data.map" => c.data.map.iter().map(|(p, n)| json!([p, n])).collect(),
        "health.eject_after_failures" => json!(c.health.eject_after_failures),
        "health.eject_backoff_ms" => json!(c.health.eject_base_ms),
        "health.eject_backoff_max_ms" => json!(c.health.eject_max_ms),
        "heartbeat.interval_ms" => json!(c.health.heartbeat_interval_ms),
        "heartbeat.misses" => json!(c.health.heartbeat_misses),
        _ => return None,
    })
}

fn config(run: &mut Run, v: &Value) {
    let top = run.keys("top", v, &["description", "parse", "errors", "node_names"], &[]);
    for m in cases(run, top, "parse", &["text", "expect"]) {
        let text = s(&m["text"]);
        let ctx = format!("Config::parse({text:?})");
        let parsed = match Config::parse(text) {
            Ok(p) => p,
            Err(e) => {
                run.cases += 1;
                run.fail(&ctx, format!("refused: {} ({e})", kind(&e)));
                continue;
            }
        };
        let Some(fields) = m["expect"].as_object() else { panic!("{ctx}: expect must be an object") };
        for (k, want) in fields {
            match config_field(&parsed, k) {
                Some(got) => run.eq(&format!("{ctx}: {k}"), got, want.clone()),
                None => run.fail(&ctx, format!("no handler for expected field `{k}`")),
            }
        }
        // The rendered text must parse back to the same config.
        run.eq(&format!("{ctx}: to_text round trip"), Config::parse(&parsed.to_text()).as_ref(), Ok(&parsed));
    }
    for m in cases(run, top, "errors", &["text", "error", "key"]) {
        let text = s(&m["text"]);
        let ctx = format!("Config::parse({text:?})");
        let got = match Config::parse(text) {
            Ok(_) => Err("Ok".to_string()),
            Err(e) => {
                let key = if let Error::Config { key, .. } = &e { key.clone() } else { format!("<no key> ({e})") };
                Ok((kind(&e), key))
            }
        };
        run.eq(&ctx, got, Ok((s(&m["error"]).to_string(), s(&m["key"]).to_string())));
    }
    let nn = run.keys("node_names", &top["node_names"], &["valid", "invalid"], &[]);
    for n in arr(&nn["valid"]) {
        run.eq(&format!("validate_node_name({:?})", s(n)), validate_node_name(s(n)), Ok(()));
    }
    for n in arr(&nn["invalid"]) {
        run.err(&format!("validate_node_name({:?})", s(n)), validate_node_name(s(n)), "InvalidArgument");
    }
}

// ---------------------------------------------------------------------------
// xa_keys.json
// ---------------------------------------------------------------------------

fn xa_keys(run: &mut Run, v: &Value) {
    let top = run.keys("top", v, &["description", "keys"], &[]);
    for c in cases(run, top, "keys", &["format_id", "gtrid", "key"]) {
        let fid = c["format_id"].as_i64().and_then(|f| i32::try_from(f).ok());
        let Some(fid) = fid else { panic!("xa_keys.json: format_id must be a 32-bit integer: {}", c["format_id"]) };
        let gtrid = unhex(s(&c["gtrid"]));
        run.eq(
            &format!("xa_transaction_key({fid}, {})", show(&gtrid)),
            racaffinity::xa_transaction_key(fid, &gtrid),
            unhex(s(&c["key"])),
        );
    }
}

// ---------------------------------------------------------------------------

type Handler = fn(&mut Run, &Value);

const HANDLERS: &[(&str, Handler)] = &[
    ("rendezvous.json", rendezvous),
    ("events.json", events),
    ("connect.json", connect),
    ("config.json", config),
    ("xa_keys.json", xa_keys),
];

#[test]
fn shared_vectors() {
    let dir = vectors_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();

    let mut failures = Vec::new();
    let mut counts = BTreeMap::new();
    for path in &files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some((_, handler)) = HANDLERS.iter().find(|(n, _)| *n == file) else {
            failures.push(format!("{file}: no handler in rust/core/tests/vectors.rs; add one"));
            continue;
        };
        let text = std::fs::read_to_string(path).expect("read vector file");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: invalid JSON: {e}"));
        let mut run = Run { file: file.clone(), cases: 0, failures: Vec::new() };
        match v.get("description").and_then(Value::as_str) {
            Some(d) if !d.trim().is_empty() => {}
            _ => run.fail("top", "missing a non-empty `description`"),
        }
        handler(&mut run, &v);
        let min = MIN_CASES.iter().find(|(n, _)| *n == file).map_or(1, |(_, m)| *m);
        if run.cases < min {
            run.fail("top", format!("only {} cases, expected at least {min}", run.cases));
        }
        counts.insert(file, run.cases);
        failures.extend(run.failures);
    }
    for (name, _) in HANDLERS {
        if !counts.contains_key(*name) && !failures.iter().any(|f| f.starts_with(name)) {
            failures.push(format!("{name}: missing from {}", dir.display()));
        }
    }
    let total: usize = counts.values().sum();
    eprintln!("vector cases: {counts:?} (total {total})");
    assert!(failures.is_empty(), "{} vector failure(s):\n{}", failures.len(), failures.join("\n"));
}
