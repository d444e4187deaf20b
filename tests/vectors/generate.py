#!/usr/bin/env python3
"""Generates the shared test vectors in tests/vectors/*.json.

Every binding (Rust core, C, Java, Python) runs these files, so a marshalling
bug shows up as a disagreement with the vectors rather than as a silent
misroute in production.

The rendezvous vectors are *computed* here by a second, independent
implementation of racaffinity-hrw-v2 written from its documentation (the module
docs of rust/core/src/hash.rs), not from the Rust code, and so are the XA
transaction keys (xa_keys.json, from docs/semantics.md "The key of an XA
transaction", with hashlib's SHA-256). The other files (events, connect
strings, config) are hand-written expectations.

Usage:
    python3 tests/vectors/generate.py          # (re)write the JSON files
    python3 tests/vectors/generate.py --check  # exit 1 if a checked-in file differs

Plain Python 3.11 standard library; output is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HASH_VERSION = "racaffinity-hrw-v2"

# ---------------------------------------------------------------------------
# racaffinity-hrw-v2, re-implemented from the documentation
# ---------------------------------------------------------------------------

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1


def fmix64(k: int) -> int:
    """MurmurHash3's 64-bit finaliser."""
    k &= MASK64
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & MASK64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & MASK64
    k ^= k >> 33
    return k


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def h(data: bytes) -> int:
    """Step 1: h(bytes) = fmix64(FNV-1a 64(bytes))."""
    return fmix64(fnv1a64(data))


def i64_bytes(v: int) -> bytes:
    """Step 2: an i64 key is hashed as its 8 little-endian (two's complement) bytes."""
    assert I64_MIN <= v <= I64_MAX, v
    return struct.pack("<q", v)


def hash_i64(v: int) -> int:
    return h(i64_bytes(v))


def seed(name: str) -> int:
    """Step 2: a node's seed is h(node name in ASCII upper case, as UTF-8)."""
    return h(name.upper().encode("utf-8"))


def score(key_hash: int, node_seed: int) -> int:
    """Step 3."""
    return fmix64(key_hash ^ node_seed)


def weighted_score(s: int, weight: float) -> float:
    """Step 4, unequal weights: u = ((score >> 12) + 0.5) / 2^52, then weight / -ln(u).

    (score >> 12) + 0.5 is exact in IEEE-754 binary64, so u is strictly inside (0,1).
    """
    u = (float(s >> 12) + 0.5) / float(1 << 52)
    return weight / -math.log(u)


def f64_bits(x: float) -> str:
    return struct.pack(">d", x).hex()


class Fragile(Exception):
    """The winner depends on the last bits of ln(); such a key is not a portable vector."""


def owner(nodes: list[tuple[str, int]], key_hash: int) -> str:
    """Step 4: the rendezvous winner among `nodes` ((name, weight) pairs)."""
    assert nodes
    weights = {w for _, w in nodes}
    if len(weights) == 1:
        # Highest integer score; ties go to the lower upper-cased name (bytewise).
        best = max(nodes, key=lambda n: (score(key_hash, seed(n[0])), _neg_bytes(n[0])))
        return best[0]
    scored = sorted(
        ((weighted_score(score(key_hash, seed(n)), float(w)), n) for n, w in nodes),
        key=lambda t: (t[0], _neg_bytes(t[1])),
        reverse=True,
    )
    (best, name), (second, _) = scored[0], scored[1]
    # Another language's ln() may differ from this one's by an ulp or so; keep
    # only keys whose winner is clear by far more than that.
    if not (math.isfinite(best) and best - second > abs(best) * 1e-9):
        raise Fragile(name)
    return name


def _neg_bytes(name: str) -> tuple[int, ...]:
    """Sort key making the *lower* upper-cased name compare higher (wins a tie under max())."""
    return tuple(-b for b in name.upper().encode("utf-8")) + (1,)


# ---------------------------------------------------------------------------
# JSON helpers
# ---------------------------------------------------------------------------


def hex64(v: int) -> str:
    return f"{v & MASK64:016x}"


def bspec(data: bytes, repeat: int | None = None) -> dict:
    """A byte string: `hex`, plus `utf8` when it is printable UTF-8; `repeat`
    means the bytes are `hex` repeated that many times."""
    d: dict = {"hex": data.hex()}
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        s = None
    if s is not None and s != "" and s.isprintable():
        d["utf8"] = s
    if repeat is not None:
        d["repeat"] = repeat
    return d


def full_bytes(spec: dict) -> bytes:
    return bytes.fromhex(spec["hex"]) * spec.get("repeat", 1)


def render(obj, indent: int = 0, column: int = 0, width: int = 120) -> str:
    """Deterministic JSON: a value that fits on the rest of its line stays on one
    line, a larger object or array gets one member per line."""
    flat = json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    if column + len(flat) <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 2)
    if isinstance(obj, list):
        items = [pad + render(v, indent + 2, indent + 2, width) for v in obj]
    else:
        items = []
        for k, v in obj.items():
            head = pad + json.dumps(k, ensure_ascii=False) + ": "
            items.append(head + render(v, indent + 2, len(head), width))
    open_, close = ("[", "]") if isinstance(obj, list) else ("{", "}")
    return open_ + "\n" + ",\n".join(items) + "\n" + " " * indent + close


# ---------------------------------------------------------------------------
# rendezvous.json
# ---------------------------------------------------------------------------

GTRIDS: list[bytes] = [
    b"gtrid-42",
    b"gtrid-1",
    b"0001.0a0b0c0d.00000001",
    b"x",
    bytes([0x00]),
    bytes([0xFF, 0x00, 0x80, 0x7F]),
    bytes(range(64)),  # MAXGTRIDSIZE
    "ü-transaction".encode("utf-8"),
]

SESSIONS: list[bytes] = [
    b"JSESSIONID=8F3A0C2B1D",
    b"sess-1",
    b"sess-2",
    b"user:alice",
    bytes([0x01, 0x02, 0x03]),
    "Grüße".encode("utf-8"),
]

DATA_KEYS: list[bytes] = [
    b"customer:42",
    b"order:2026-11-29:000001",
    b"ACME",
    b"acme",
    bytes([0x00]),
    bytes([0x2A, 0, 0, 0, 0, 0, 0, 0]),  # same bytes as the i64 key 42
    "東京".encode("utf-8"),
]

DATA_I64: list[int] = [0, 1, -1, 42, 4096, -(1 << 31), I64_MIN, I64_MAX]

TOPOLOGIES = [
    {
        "name": "three-equal",
        "about": "3 nodes, equal weights, default 4096 partitions",
        "config": "nodes = MYDB1, MYDB2, MYDB3\nsession.mode = stateless",
        "nodes": [("MYDB1", 1), ("MYDB2", 1), ("MYDB3", 1)],
        "partitions": 4096,
        "partition_owners": [0, 1, 2, 7, 4095],
        "remove": ["MYDB2"],
    },
    {
        "name": "eight-equal",
        "about": "8 nodes, equal weights; the weight is spelled out for some nodes",
        "config": (
            "nodes = RAC1, RAC2, RAC3, RAC4, RAC5, RAC6, RAC7, RAC8\n"
            "node.RAC3.weight = 1\nnode.RAC8.address = rac8.example.com:1521\nsession.mode = stateless"
        ),
        "nodes": [(f"RAC{i}", 1) for i in range(1, 9)],
        "partitions": 4096,
        "partition_owners": [0, 1, 100, 2047, 4095],
        "remove": [],
    },
    {
        "name": "four-weighted",
        "about": "4 nodes with weights 1, 2, 3, 4 (weighted rendezvous)",
        "config": (
            "nodes = W1, W2, W3, W4\nnode.W1.weight = 1\nnode.W2.weight = 2\n"
            "node.W3.weight = 3\nnode.W4.weight = 4\nsession.mode = stateless"
        ),
        "nodes": [("W1", 1), ("W2", 2), ("W3", 3), ("W4", 4)],
        "partitions": 4096,
        "partition_owners": [0, 1, 2, 3, 4095],
        "remove": ["W4"],
    },
    {
        "name": "weights-1-1-2",
        "about": "unequal weights; removing the weight-2 node leaves equal weights (integer-score rule)",
        "config": "nodes = P1, P2, P3\nnode.P3.weight = 2\nsession.mode = stateless",
        "nodes": [("P1", 1), ("P2", 1), ("P3", 2)],
        "partitions": 4096,
        "partition_owners": [0, 1, 4095],
        "remove": ["P3"],
    },
    {
        "name": "mixed-case",
        "about": "names hash upper-cased (seed = h(upper(name))), as they match: `mydb2` and `MYDB2` place alike; lookups such as remove_node ignore case too",
        "config": "nodes = MyDb1, mydb2, MYDB3, Orcl_4\nsession.mode = stateless",
        "nodes": [("MyDb1", 1), ("mydb2", 1), ("MYDB3", 1), ("Orcl_4", 1)],
        "partitions": 4096,
        "partition_owners": [0, 1, 4095],
        "remove": ["MYDB2"],  # spelled differently from the config on purpose
    },
    {
        "name": "seven-partitions",
        "about": "data.partitions = 7; every partition's owner is listed; `;` separates config entries",
        "config": "nodes = A1, B2, C3; data.partitions = 7; session.mode = stateless",
        "nodes": [("A1", 1), ("B2", 1), ("C3", 1)],
        "partitions": 7,
        "partition_owners": list(range(7)),
        "remove": [],
    },
    {
        "name": "single-node",
        "about": "one node owns everything",
        "config": "nodes = ONLY\nsession.mode = stateless",
        "nodes": [("ONLY", 1)],
        "partitions": 4096,
        "partition_owners": [0, 4095],
        "remove": [],
    },
]

ROUTING_ERRORS = [
    # (op, argument, expected error kind)
    ("tx_begin", bspec(b""), "InvalidArgument"),
    ("tx_begin", bspec(b"\x00", 65), "InvalidArgument"),
    ("session_route", bspec(b""), "InvalidArgument"),
    ("session_route", bspec(b"k", 1025), "InvalidArgument"),
    ("route_key", bspec(b""), "InvalidArgument"),
    ("route_key", bspec(b"k", 1025), "InvalidArgument"),
    ("partition_of", bspec(b""), "InvalidArgument"),
    ("partition_owner", 4096, "InvalidArgument"),
    ("remove_node", "NOPE", "UnknownNode"),
]


def hash_section() -> dict:
    inputs = [
        b"",
        b"a",
        b"MYDB1",
        b"MYDB2",
        b"mydb1",
        bytes([0x00]),
        bytes([0xFF]),
        bytes(8),
        b"gtrid-42",
        "é".encode("utf-8"),
        b"The quick brown fox jumps over the lazy dog",
        bytes(range(256)),
    ]
    fmix_inputs = [0, 1, 2, FNV_OFFSET, MASK64, 0x8000000000000000, 0x0123456789ABCDEF]
    score_inputs = [(h(b"gtrid-42"), seed("MYDB1")), (h(b"gtrid-42"), seed("MYDB2")), (0, 0), (MASK64, 1)]
    ws_inputs = [
        (0, 1.0),  # smallest u
        (1 << 63, 1.0),  # u = 0.5
        (h(b"gtrid-42"), 1.0),
        (h(b"gtrid-42"), 3.0),
        (score(h(b"gtrid-42"), seed("W4")), 4.0),
        ((1 << 64) - (1 << 13), 2.0),  # (score >> 12) = 2^52 - 2: u just below 1
        (MASK64, 1.0),  # (score >> 12) = 2^52 - 1: the largest u, still below 1
    ]
    return {
        "fmix64": [{"input": hex64(x), "output": hex64(fmix64(x))} for x in fmix_inputs],
        "hash_bytes": [{"bytes": bspec(b), "fnv1a64": hex64(fnv1a64(b)), "hash": hex64(h(b))} for b in inputs],
        "hash_i64": [{"i64": str(v), "hash": hex64(hash_i64(v))} for v in [0, 1, -1, 42, I64_MIN, I64_MAX]],
        "score": [{"key_hash": hex64(k), "node_seed": hex64(s), "score": hex64(score(k, s))} for k, s in score_inputs],
        "weighted_score": [
            {"score": hex64(s), "weight": w, "bits": f64_bits(weighted_score(s, w)), "value": repr(weighted_score(s, w))}
            for s, w in ws_inputs
        ],
    }


def topology_section(t: dict, fragile: list[str]) -> dict:
    nodes: list[tuple[str, int]] = t["nodes"]
    parts: int = t["partitions"]

    def place(key_hash: int, among: list[tuple[str, int]]) -> str:
        return owner(among, key_hash)

    def data_owner(p: int, among) -> str:
        return place(hash_i64(p), among)

    def routed(among) -> dict:
        out: dict = {"transactions": [], "sessions": [], "data": []}
        for g in GTRIDS:
            try:
                out["transactions"].append({"gtrid": bspec(g), "hash": hex64(h(g)), "owner": place(h(g), among)})
            except Fragile:
                fragile.append(f"{t['name']}: gtrid {g!r}")
        for s in SESSIONS:
            try:
                out["sessions"].append({"key": bspec(s), "hash": hex64(h(s)), "owner": place(h(s), among)})
            except Fragile:
                fragile.append(f"{t['name']}: session {s!r}")

        def datum(spec: dict, hv: int, what: str) -> None:
            p = hv % parts
            try:
                out["data"].append({**spec, "hash": hex64(hv), "partition": p, "owner": data_owner(p, among)})
            except Fragile:
                fragile.append(f"{t['name']}: data {what}")

        for k in DATA_KEYS:
            datum({"key": bspec(k)}, h(k), f"key {k!r}")
        for v in DATA_I64:
            datum({"i64": str(v)}, hash_i64(v), f"i64 {v}")
        return out

    base = routed(nodes)
    sec: dict = {
        "name": t["name"],
        "about": t["about"],
        "config": t["config"],
        "partitions": parts,
        "nodes": [{"name": n, "weight": w, "seed": hex64(seed(n))} for n, w in nodes],
        **base,
        "partition_owners": [{"partition": p, "owner": data_owner(p, nodes)} for p in t["partition_owners"]],
        "removals": [],
    }
    for spelled in t["remove"]:
        gone = next(n for n, _ in nodes if n.upper() == spelled.upper())
        rest = [(n, w) for n, w in nodes if n != gone]
        after = routed(rest)
        rem: dict = {"remove": spelled, "removed": gone}
        moved = 0
        for section in ("transactions", "sessions", "data"):
            before_by_key = {json.dumps({k: v for k, v in c.items() if k != "owner"}): c["owner"] for c in base[section]}
            rows = []
            for c in after[section]:
                ident = json.dumps({k: v for k, v in c.items() if k != "owner"})
                if ident not in before_by_key:
                    continue  # fragile in one of the two runs
                was = before_by_key[ident]
                # Rendezvous moves only the removed node's keys.
                assert was == gone or was == c["owner"], (t["name"], section, c, was)
                moved += was != c["owner"]
                row = {k: v for k, v in c.items() if k not in ("hash", "owner")}
                row["owner_before"] = was
                row["owner"] = c["owner"]
                rows.append(row)
            rem[section] = rows
        assert moved > 0, f"{t['name']}: removing {gone} moved no key; pick keys it owns"
        rem["partition_owners"] = [{"partition": p, "owner": data_owner(p, rest)} for p in t["partition_owners"]]
        sec["removals"].append(rem)
    return sec


def rendezvous_file() -> dict:
    fragile: list[str] = []
    topologies = [topology_section(t, fragile) for t in TOPOLOGIES]
    if fragile:
        print("note: left out keys whose weighted winner is a near-tie:", *fragile, sep="\n  ", file=sys.stderr)
    return {
        "description": (
            f"Rendezvous placement vectors for {HASH_VERSION}, computed by tests/vectors/generate.py from the "
            "documentation in rust/core/src/hash.rs (not from the Rust code). u64 values are 16 lower-case hex "
            "digits; i64 values are decimal strings (they do not fit a double). A byte string is "
            "{hex, utf8 (only when printable UTF-8), repeat (optional: hex repeated this many times)}. "
            "`hash`: h(bytes) = fmix64(FNV-1a 64(bytes)), fmix64 = MurmurHash3's 64-bit finaliser; hash_i64 hashes "
            "the 8 little-endian bytes; score = fmix64(key_hash ^ h(node name)). weighted_score = weight / -ln(u) "
            "with u = ((score >> 12) + 0.5) / 2^52 in binary64 (exact, strictly inside (0,1)); `bits` is the "
            "big-endian IEEE-754 image (another libm may differ in the last bit or two: compare `value` within a "
            "few ulps if so). "
            "`topologies`: each `config` is the core's config text (all nodes Up, default placement = rendezvous, "
            "session.mode = stateless). transactions: owner of tx_begin(gtrid) on a fresh cluster; sessions: owner "
            "of session_route(key); data: partition = h(key) % partitions and the owner of route_key / "
            "route_key_i64; partition_owners: owner of partition p, which is rendezvous of hash_i64(p). Equal "
            "weights: highest integer score, ties to the lower name (bytewise); unequal: highest weighted_score. "
            "`removals`: expected owners on a fresh cluster after remove_node(remove); only keys owned by the "
            "removed node move. `errors`: calls on the first topology that must fail with the given error kind."
        ),
        "hash_version": HASH_VERSION,
        "hash": hash_section(),
        "topologies": topologies,
        "errors": [{"op": op, "arg": arg, "error": kind} for op, arg, kind in ROUTING_ERRORS],
    }


# ---------------------------------------------------------------------------
# events.json
# ---------------------------------------------------------------------------


def fan(event_type, status, *, service=None, database=None, instance=None, host=None, reason=None, card=None,
        timestamp=None) -> dict:
    return {
        "kind": "fan",
        "event_type": event_type,
        "version": "1.0",
        "service": service,
        "database": database,
        "instance": instance,
        "host": host,
        "status": status,
        "reason": reason,
        "card": card,
        "timestamp": timestamp,
    }


def rlb(entries, *, service=None, database=None, timestamp=None) -> dict:
    return {
        "kind": "rlb",
        "version": "1.0",
        "database": database,
        "service": service,
        "timestamp": timestamp,
        "entries": [{"instance": i, "percent": p, "flag": f, "aff": a} for i, p, f, a in entries],
    }


TS = "2026-11-29 08:00:00"

PARSE_OK = [
    (
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 status=down reason=FAILURE "
        "card=1 timestamp=2026-11-29 08:00:00",
        fan("servicemember", "down", service="svc", database="orcl", instance="orcl_2", host="h2", reason="failure",
            card=1, timestamp=TS),
    ),
    (
        "INSTANCE VERSION=1.0 service=orcl database=orcl instance=orcl1 host=node1 status=up reason=BOOT "
        "timestamp=2026-11-29 08:00:00",
        fan("instance", "up", service="orcl", database="orcl", instance="orcl1", host="node1", reason="boot",
            timestamp=TS),
    ),
    (
        "NODE VERSION=1.0 host=h2 incarnation=175 status=nodedown reason=member_leave timestamp=2026-11-29 08:00:00",
        fan("node", "nodedown", host="h2", reason="member_leave", timestamp=TS),
    ),
    ("SERVICE VERSION=1.0 service=svc status=up", fan("service", "up", service="svc")),
    ("DATABASE VERSION=1.0 status=not_restarting", fan("database", "not_restarting")),
    (
        "servicemember version=1.0 SERVICE=svc Instance=i1 STATUS=DOWN Reason=Public_NW_Down",
        fan("servicemember", "down", service="svc", instance="i1", reason="public_nw_down"),
    ),
    (
        "INSTANCE VERSION=1.0 instance=ORCL_1 host=Node1 status=up",
        fan("instance", "up", instance="ORCL_1", host="Node1"),
    ),
    (
        "INSTANCE VERSION=1.0 instance=i1 status=up timestamp=2026-11-29 08:00:00 timezone=+01:00 db_domain=",
        fan("instance", "up", instance="i1", timestamp=TS),
    ),
    (
        "INSTANCE\tVERSION=1.0\tinstance=i1\tstatus=down\treason=user\r\n",
        fan("instance", "down", instance="i1", reason="user"),
    ),
    ("SERVICE VERSION=1.0 status=up card=4294967295", fan("service", "up", card=4294967295)),
    ("DATABASE VERSION=1.0 status=preconn_up reason=autostart", fan("database", "preconn_up", reason="autostart")),
    (
        "VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD aff=TRUE}"
        "{instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } timestamp=2026-11-29 08:00:00",
        rlb([("orcl2", 50, "good", True), ("orcl1", 50, "unknown", False)], service="svc", database="orcl",
            timestamp=TS),
    ),
    (
        "SERVICEMETRICS VERSION=1.0 service=svc {{instance=a percent=0 flag=BLOCKED}{instance=b percent=100 "
        "flag=no_data aff=true}{ instance=c  percent=007 flag=Violating aff=False }}",
        rlb([("a", 0, "blocked", True), ("b", 100, "no_data", True), ("c", 7, "violating", False)], service="svc"),
    ),
    (
        "VERSION=1.0 timestamp=2026-11-29 08:00:00 { {instance=orcl2 percent=50 flag=GOOD} } service=svc "
        "database=orcl",
        rlb([("orcl2", 50, "good", True)], service="svc", database="orcl", timestamp=TS),
    ),
]

PARSE_ERR = [
    "",
    "   \t ",
    "ASM VERSION=1.0 status=up",
    "VERSION=1.0 status=up",
    "DATABASE status=up",
    "DATABASE VERSION=2.0 status=up",
    "DATABASE VERSION=1.0 reason=user",
    "DATABASE VERSION=1.0 status=sideways",
    "DATABASE VERSION=1.0 status=up reason=cosmic_rays",
    "SERVICE VERSION=1.0 status=up card=-1",
    "INSTANCE VERSION=1.0 host=h status=up",
    "NODE VERSION=1.0 instance=i status=nodedown",
    "INSTANCE VERSION=1.0 instance=a INSTANCE=b status=up",
    "INSTANCE VERSION=1.0 instance=i status=up bogus",
    "INSTANCE VERSION=1.0 instance= status=up",
    "INSTANCE VERSION=1.0 instance=i status=up\nINSTANCE VERSION=1.0 instance=j status=up",
    "INSTANCE VERSION=1.0 instance=i\u0007 status=up",
    "SERVICEMETRICS VERSION=1.0 service=svc",
    "VERSION=1.0 service=svc { }",
    "VERSION=1.0 { {instance=a percent=5 flag=GOOD}",
    "VERSION=1.0 { {instance=a percent=101 flag=GOOD} }",
    "VERSION=1.0 { {instance=a percent=5 flag=SUPERB} }",
    "VERSION=1.0 { {instance=a percent=5 flag=GOOD aff=yes} }",
    "VERSION=1.0 { {instance=orcl1 percent=5 flag=GOOD}{instance=ORCL1 percent=5 flag=GOOD} }",
    "VERSION=1.0 { {instance=a percent=5 flag=GOOD} } { }",
]

APPLY_CONFIG = (
    "database = orcl\nservice = svc\nnodes = MYDB1, MYDB2, MYDB3\n"
    "node.MYDB1.address = h1:1521\nnode.MYDB2.address = h2:1521\nnode.MYDB3.address = H2:1522"
)
NAMES = ["MYDB1", "MYDB2", "MYDB3"]


def sm(instance, status, reason=None, database="orcl", service="svc") -> str:
    parts = ["SERVICEMEMBER VERSION=1.0"]
    if service is not None:
        parts.append(f"service={service}")
    if database is not None:
        parts.append(f"database={database}")
    parts += [f"instance={instance}", f"status={status}"]
    if reason is not None:
        parts.append(f"reason={reason}")
    return " ".join(parts)


def ch(node, frm, to) -> dict:
    return {"node": node, "from": frm, "to": to}


def ok(line, changes=(), revoked=(), advised=()) -> dict:
    return {"line": line, "error": None, "changes": list(changes), "revoked": list(revoked), "advised": list(advised)}


def err(line, kind) -> dict:
    return {"line": line, "error": kind}


def node_view(name, state="up", weight=1, percent=None, flag=None, aff=True) -> dict:
    return {"name": name, "state": state, "effective_weight": weight, "rlb_percent": percent, "rlb_flag": flag,
            "affinity_advised": aff}


APPLY = [
    {
        "name": "fan-failover-drain-restore",
        "config": APPLY_CONFIG,
        "steps": [
            ok(sm("MYDB2", "down", "FAILURE"), [ch("MYDB2", "up", "down")]),
            ok(sm("MYDB2", "down", "FAILURE")),  # already down: no change
            ok(sm("mydb2", "up"), [ch("MYDB2", "down", "up")]),
            ok(sm("MYDB1", "down", "USER"), [ch("MYDB1", "up", "draining")]),
            ok(sm("MYDB1", "down", "failure"), [ch("MYDB1", "draining", "down")]),
            ok("INSTANCE VERSION=1.0 database=orcl instance=MYDB1 host=h1 status=up reason=BOOT",
               [ch("MYDB1", "down", "up")]),
            ok(sm("MYDB3", "down"), [ch("MYDB3", "up", "down")]),  # no reason: a failure
        ],
        "nodes": [node_view("MYDB1"), node_view("MYDB2"), node_view("MYDB3", "down")],
    },
    {
        "name": "node-events-by-host",
        "config": APPLY_CONFIG,
        "steps": [
            ok("NODE VERSION=1.0 host=h2 incarnation=175 status=nodedown reason=member_leave "
               "timestamp=2026-11-29 08:00:00", [ch("MYDB2", "up", "down"), ch("MYDB3", "up", "down")]),
            err("NODE VERSION=1.0 host=h9 status=nodedown", "UnknownNode"),
            ok("NODE VERSION=1.0 host=h2 status=up", [ch("MYDB2", "down", "up"), ch("MYDB3", "down", "up")]),
            ok("NODE VERSION=1.0 host=H1 status=down reason=failure", [ch("MYDB1", "up", "down")]),
        ],
        "nodes": [node_view("MYDB1", "down"), node_view("MYDB2"), node_view("MYDB3")],
    },
    {
        "name": "service-and-database-events",
        "config": APPLY_CONFIG,
        "steps": [
            ok("SERVICE VERSION=1.0 service=svc database=orcl status=down reason=user",
               [ch(n, "up", "draining") for n in NAMES]),
            ok("DATABASE VERSION=1.0 database=orcl status=down reason=failure",
               [ch(n, "draining", "down") for n in NAMES]),
            ok("SERVICE VERSION=1.0 service=svc status=preconn_up"),
            ok("SERVICE VERSION=1.0 service=svc status=unknown"),
            ok("DATABASE VERSION=1.0 database=orcl status=up", [ch(n, "down", "up") for n in NAMES]),
        ],
        "nodes": [node_view(n) for n in NAMES],
    },
    {
        "name": "foreign-events",
        "config": APPLY_CONFIG,
        "steps": [
            err(sm("MYDB3", "down", database="other"), "ForeignEvent"),
            err(sm("MYDB3", "down", service="other"), "ForeignEvent"),
            err("DATABASE VERSION=1.0 database=other status=down", "ForeignEvent"),
            err("VERSION=1.0 database=orcl service=other { {instance=MYDB3 percent=10 flag=GOOD} }", "ForeignEvent"),
            err("VERSION=1.0 database=other { {instance=MYDB3 percent=10 flag=GOOD} }", "ForeignEvent"),
            ok(sm("MYDB3", "down", database="ORCL", service="SVC"), [ch("MYDB3", "up", "down")]),
            ok(sm("MYDB3", "up", database=None, service=None), [ch("MYDB3", "down", "up")]),
        ],
        "nodes": [node_view(n) for n in NAMES],
    },
    {
        "name": "failed-lines-change-nothing",
        "config": APPLY_CONFIG,
        "steps": [
            ok(sm("MYDB1", "down", "user"), [ch("MYDB1", "up", "draining")]),
            err(sm("MYDB9", "down"), "UnknownNode"),
            err("SERVICEMEMBER VERSION=2.0 service=svc database=orcl instance=MYDB2 status=down", "EventParse"),
            err("garbage", "EventParse"),
            err("", "EventParse"),
            err(sm("MYDB2", "sideways"), "EventParse"),
            err(sm("MYDB2", "down") + " bogus", "EventParse"),
            err("VERSION=1.0 service=svc { {instance=MYDB1 percent=70 flag=GOOD aff=FALSE}"
                "{instance=NOPE percent=30 flag=GOOD} }", "UnknownNode"),
            err("VERSION=1.0 service=svc { {instance=MYDB1 percent=70 flag=GOOD}", "EventParse"),
            err("VERSION=1.0 service=svc { {instance=MYDB1 percent=70 flag=GOOD}{instance=mydb1 percent=30 "
                "flag=GOOD} }", "EventParse"),
            err("INSTANCE VERSION=1.0 database=orcl status=up", "EventParse"),
        ],
        "nodes": [node_view("MYDB1", "draining"), node_view("MYDB2"), node_view("MYDB3")],
    },
    {
        "name": "rlb-advice",
        "config": APPLY_CONFIG,
        "steps": [
            ok("SERVICEMETRICS VERSION=1.0 database=orcl service=svc { {instance=MYDB1 percent=50 flag=GOOD aff=TRUE}"
               "{instance=mydb2 percent=30 flag=VIOLATING aff=FALSE}{instance=MYDB3 percent=20 flag=BLOCKED} } "
               "timestamp=2026-11-29 08:00:00", revoked=["MYDB2"], advised=["MYDB1", "MYDB2", "MYDB3"]),
            ok("VERSION=1.0 service=svc { {instance=MYDB2 percent=40 flag=GOOD aff=TRUE} }", advised=["MYDB2"]),
            ok("VERSION=1.0 { {instance=MYDB1 percent=0 flag=NO_DATA aff=FALSE} }", revoked=["MYDB1"],
               advised=["MYDB1"]),
        ],
        "nodes": [
            # An advisory lists the instances offering the service: the last
            # one names MYDB1 only, so MYDB2 and MYDB3 get a share of 0.
            node_view("MYDB1", weight=0, percent=0, flag="no_data", aff=False),
            node_view("MYDB2", weight=0, percent=0, flag="no_data", aff=True),
            node_view("MYDB3", weight=0, percent=0, flag="no_data", aff=True),
        ],
    },
    {
        "name": "no-filter-accepts-any-database",
        "config": "nodes = MYDB1, MYDB2",
        "steps": [
            ok(sm("MYDB1", "down", "failure", database="anydb", service="anysvc"), [ch("MYDB1", "up", "down")]),
            ok("INSTANCE VERSION=1.0 service=orcl database=orcl instance=MYDB1 status=up", [ch("MYDB1", "down", "up")]),
            err("NODE VERSION=1.0 host=h1 status=nodedown", "UnknownNode"),  # no node has an address
        ],
        "nodes": [node_view("MYDB1"), node_view("MYDB2")],
    },
]


def events_file() -> dict:
    return {
        "description": (
            "FAN / RLB event vectors (hand-written; see rust/core/src/event and failover.rs). `parse`: lines and "
            "the result of parse_event: FAN fields are null when absent, enum values use the lower-case spellings "
            "(event_type, status, reason, flag); RLB entries list instance/percent/flag/aff in the order sent. "
            "`parse_errors`: lines that must fail with error kind EventParse. `apply`: a fresh cluster from "
            "`config`, then each step's line through apply_event in order; a step either fails with `error` (an "
            "error kind) and must change nothing, or succeeds with exactly the listed state `changes` (in node "
            "order), `revoked` (session affinity withdrawn by aff=FALSE) and `advised` (nodes whose RLB advice was "
            "updated). `nodes` is every node's view after the last step: state up/draining/down, effective_weight "
            "(RLB percent once advised, 0 when BLOCKED or not named by the last advisory, else the static weight), "
            "rlb_percent, rlb_flag, "
            "affinity_advised."
        ),
        "parse": [{"line": line, "expect": exp} for line, exp in PARSE_OK],
        "parse_errors": [{"line": line, "error": "EventParse"} for line in PARSE_ERR],
        "apply": APPLY,
    }


# ---------------------------------------------------------------------------
# connect.json
# ---------------------------------------------------------------------------


def connect_strings(host: str, port: int, service: str, instance: str) -> dict:
    """The documented formats (rust/core/src/connect.rs)."""
    bare = host[1:-1] if host.startswith("[") else host
    url_host = f"[{bare}]" if ":" in bare else bare
    desc = (
        f"(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST={bare})(PORT={port})))"
        f"(CONNECT_DATA=(SERVICE_NAME={service})(INSTANCE_NAME={instance})))"
    )
    ez = f"{url_host}:{port}/{service}/{instance}"
    return {
        "descriptor": desc,
        "easy_connect": ez,
        "jdbc_descriptor_url": "jdbc:oracle:thin:@" + desc,
        "jdbc_easy_connect_url": "jdbc:oracle:thin:@//" + ez,
    }


CONNECT_OK = [
    ("MYDBHOST1", 1522, "MYDB", "MYDB1"),
    ("db-1.rac.example.com", 65535, "sales.example.com$X#1-a_b", "orcl_1$#"),
    ("10.0.0.7", 1, "MYDB", "MYDB1"),
    ("2001:db8::1", 1521, "svc", "orcl2"),
    ("[2001:db8::1]", 1521, "svc", "orcl2"),
    ("::ffff:10.0.0.1", 1521, "SYS$USERS", "ORCL1"),
    ("a" * 63, 1521, "s" * 128, "i" + "1" * 63),
    ("1svc-host", 1521, "1svc", "x"),
]

CONNECT_ERR = [
    # (host, port, service, instance): the field at fault is the odd one out
    ("MYDBHOST1", 1522, "MYDB", "X)(INSTANCE_NAME=Y"),
    ("MYDBHOST1", 1522, "S)(SERVER=dedicated", "MYDB1"),
    ("h)(PORT=1", 1522, "MYDB", "MYDB1"),
    ("MYDBHOST1", 1522, "MYDB/OTHER", "MYDB1"),
    ("MYDBHOST1", 1522, "MYDB", "A B"),
    ("MYDBHOST1", 1522, "MÜDB", "MYDB1"),
    ("MYDBHOST1", 0, "MYDB", "MYDB1"),
    ("", 1522, "MYDB", "MYDB1"),
    ("a..b", 1522, "MYDB", "MYDB1"),
    ("-a.b", 1522, "MYDB", "MYDB1"),
    ("under_score", 1522, "MYDB", "MYDB1"),
    ("999.1.1.1", 1522, "MYDB", "MYDB1"),
    ("01.2.3.4", 1522, "MYDB", "MYDB1"),
    ("[::1", 1522, "MYDB", "MYDB1"),
    ("[h1]", 1522, "MYDB", "MYDB1"),
    ("fe80::1%eth0", 1522, "MYDB", "MYDB1"),
    ("host:1521", 1522, "MYDB", "MYDB1"),
    ("a" * 64, 1522, "MYDB", "MYDB1"),
    ("MYDBHOST1", 1522, "", "MYDB1"),
    ("MYDBHOST1", 1522, "s" * 129, "MYDB1"),
    ("MYDBHOST1", 1522, "MYDB", ""),
    ("MYDBHOST1", 1522, "MYDB", "1orcl"),
    ("MYDBHOST1", 1522, "MYDB", "orcl-1"),
    ("MYDBHOST1", 1522, "MYDB", "i" + "1" * 64),
]

SPLIT_OK = [
    ("MYDBHOST1:1522", 1521, "MYDBHOST1", 1522),
    ("MYDBHOST1", 1521, "MYDBHOST1", 1521),
    ("10.1.2.3:65535", 1521, "10.1.2.3", 65535),
    ("[::1]:1522", 1521, "::1", 1522),
    ("[2001:db8::7]", 1521, "2001:db8::7", 1521),
]

SPLIT_ERR = [
    ("", 1521),
    ("h:", 1521),
    ("h:+1521", 1521),
    ("h:0", 1521),
    ("h:65536", 1521),
    ("h", 0),
    (":1521", 1521),
    ("::1", 1521),
    ("2001:db8::1:1521", 1521),
    ("[::1]1521", 1521),
    ("[host]:1521", 1521),
    (" h:1521", 1521),
]


def connect_file() -> dict:
    return {
        "description": (
            "Oracle connect strings for one RAC instance (rust/core/src/connect.rs). `build`: host/port/service/"
            "instance and the expected descriptor, easy_connect, jdbc_descriptor_url and jdbc_easy_connect_url (an "
            "IPv6 host is bare in the descriptor and bracketed in Easy Connect). `build_errors`: inputs every builder "
            "(and validate) must refuse with error kind InvalidArgument; ports are 1..=65535 and a binding whose "
            "port type is wider must refuse larger values itself. `split_host_port`: `input` with `default_port` "
            "gives `host` and `port`, or fails with `error`."
        ),
        "build": [
            {"host": h_, "port": p, "service": s, "instance": i, "expect": connect_strings(h_, p, s, i)}
            for h_, p, s, i in CONNECT_OK
        ],
        "build_errors": [
            {"host": h_, "port": p, "service": s, "instance": i, "error": "InvalidArgument"} for h_, p, s, i in CONNECT_ERR
        ],
        "split_host_port": [
            {"input": s, "default_port": d, "host": h_, "port": p} for s, d, h_, p in SPLIT_OK
        ] + [{"input": s, "default_port": d, "error": "InvalidArgument"} for s, d in SPLIT_ERR],
    }


# ---------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------

CONFIG_OK = [
    ("nodes = MYDB1, MYDB2, MYDB3", {
        "name": "default", "database": None, "service": None,
        "nodes": [{"name": n, "weight": 1, "address": None} for n in ("MYDB1", "MYDB2", "MYDB3")],
        "policy": "least_outstanding", "panic": "try_all", "data.partitions": 4096, "session.mode": "registry",
        "session.placement": "balanced",
        "transaction.placement": "rendezvous", "data.placement": "rendezvous", "transaction.strict": False,
        "session.idle_ttl_ms": 1800000,
    }),
    (
        "# comment\n! also a comment\n\nname = sales\ndatabase = orcl\nservice = svc\n"
        "nodes = MYDB1 , MYDB2\nnode.MYDB2.weight = 3\nnode.MYDB1.address = h1:1522\n"
        "transaction.strict = true\nsession.mode = stateless\nsession.idle_ttl = 90s\ndata.partitions = 7\n"
        "data.partition.3 = MYDB2\nheartbeat.interval = 500ms\nhealth.eject_backoff = 2s\n"
        "health.eject_backoff_max = 1h\npanic = fail\npolicy = weighted",
        {
            "name": "sales", "database": "orcl", "service": "svc",
            "nodes": [{"name": "MYDB1", "weight": 1, "address": "h1:1522"}, {"name": "MYDB2", "weight": 3, "address": None}],
            "data.partitions": 7, "session.mode": "stateless", "transaction.strict": True,
            "session.idle_ttl_ms": 90000, "heartbeat.interval_ms": 500, "health.eject_backoff_ms": 2000,
            "health.eject_backoff_max_ms": 3600000, "data.map": [[3, "MYDB2"]], "panic": "fail",
            "policy": "weighted",
        },
    ),
    ("node.B.weight = 2; node.A.address = [::1]:1521; session.placement = rendezvous; thread.auto_pin = true", {
        "nodes": [{"name": "B", "weight": 2, "address": None}, {"name": "A", "weight": 1, "address": "[::1]:1521"}],
        "session.placement": "rendezvous",
    }),
    ("nodes = B1, A2\nnode.A2.weight = 5\nnode.B1.address = h1", {
        # the list fixes the order, whatever order the node settings come in
        "nodes": [{"name": "B1", "weight": 1, "address": "h1"}, {"name": "A2", "weight": 5, "address": None}],
    }),
    ("database =\nservice =\nnodes = X", {"database": None, "service": None}),
    ("nodes = N1\ndata.partitions = 1048576\nsession.idle_ttl = 2h", {"data.partitions": 1048576,
                                                                     "session.idle_ttl_ms": 7200000}),
]

CONFIG_ERR = [
    ("nodes = A\nbogus = 1", "bogus"),
    ("nodes = A\nnodes = B", "nodes"),
    ("nodes = A, a", "nodes"),
    ("nodes = A, B C", "nodes"),
    ("just some words", "just some words"),
    ("nodes = A\nnode.A.weight = 0", "node.A.weight"),
    ("nodes = A\nnode.A.weight = 1000001", "node.A.weight"),
    ("nodes = A\nnode.A.weight = heavy", "node.A.weight"),
    ("nodes = A\nnode.A.colour = red", "node.A.colour"),
    ("nodes = A\nnode.A = 1", "node.A"),
    ("nodes = A\nnode.B.weight = 2", "node.B"),
    ("nodes = A\nnode.A.address = h:0", "node.A"),
    ("nodes = A\ndata.partitions = 0", "data.partitions"),
    ("nodes = A\ndata.partitions = 1048577", "data.partitions"),
    ("nodes = A\ndata.partitions = 7\ndata.partition.7 = A", "data.partition.7"),
    ("nodes = A\ndata.partition.1 = B", "data.partition.1"),
    ("nodes = A\ntransaction.strict = maybe", "transaction.strict"),
    ("nodes = A\nsession.mode = sticky", "session.mode"),
    ("nodes = A\ndata.placement = random", "data.placement"),
    ("nodes = A\nsession.idle_ttl = 30", "session.idle_ttl"),
    ("nodes = A\nsession.idle_ttl = 30d", "session.idle_ttl"),
    ("nodes = A\nheartbeat.interval = 0ms", "heartbeat.interval"),
    ("nodes = A\nhealth.eject_backoff = 10s\nhealth.eject_backoff_max = 1s", "health.eject_backoff_max"),
    ("nodes = A\npolicy = fastest", "policy"),
    ("nodes = A\npanic = scream", "panic"),
    ("nodes = A\nname = my cluster", "name"),
    ("nodes = A\nheartbeat.misses = 0", "heartbeat.misses"),
    ("", "nodes"),
    ("nodes =", "nodes"),
    ("nodes = A\nhealth.eject_backoff = 18446744073709551615ms\nhealth.eject_backoff_max = 18446744073709551615ms",
     "health.eject_backoff"),
    ("nodes = A\nsession.idle_ttl = 721h", "session.idle_ttl"),
    ("nodes = N6403, N15384", "nodes"),
]

NODE_NAMES_OK = ["MYDB1", "a", "orcl_1", "n-1.x$#", "N" * 64]
NODE_NAMES_ERR = ["", "N" * 65, "A B", "A)(B", "MÜDB", "a=b", "a,b", "a;b"]


def config_file() -> dict:
    parses = [{"text": text, "expect": fields} for text, fields in CONFIG_OK]
    return {
        "description": (
            "Config text vectors (rust/core/src/config.rs). `parse`: texts that must parse, with a few fields of "
            "the result: name, database, service (null when unset or empty), nodes (in id order: name, weight, "
            "address or null), data.partitions, data.map ([partition, node] pairs), session.mode, "
            "session/transaction/data.placement, transaction.strict and durations in milliseconds (*_ms). `errors`: "
            "texts that must fail with error kind Config naming the offending `key`. `node_names`: names "
            "validate_node_name accepts (`valid`) and refuses with InvalidArgument (`invalid`)."
        ),
        "parse": parses,
        "errors": [{"text": text, "error": "Config", "key": key} for text, key in CONFIG_ERR],
        "node_names": {"valid": NODE_NAMES_OK, "invalid": NODE_NAMES_ERR},
    }


# ---------------------------------------------------------------------------
# xa_keys.json
# ---------------------------------------------------------------------------

MAX_GTRID = 64


def xa_key(format_id: int, gtrid: bytes) -> bytes:
    """The XA transaction key, from docs/semantics.md: an empty or over-64-byte
    gtrid as it is; else the format id (4 bytes, big-endian, signed) and the
    gtrid, or its SHA-256 digest when it is over 60 bytes."""
    if not 1 <= len(gtrid) <= MAX_GTRID:
        return gtrid
    g = gtrid if len(gtrid) <= MAX_GTRID - 4 else hashlib.sha256(gtrid).digest()
    return struct.pack(">i", format_id) + g


XA_FORMAT_IDS = [0, 1, 0x1234, 0x52414646, 0x7FFFFFFF, -1, -(1 << 31)]
XA_GTRIDS = [
    b"abc", b"g", b"x" * 59, b"x" * 60, b"x" * 61, b"x" * 64, bytes(range(64)), bytes(range(60)),
    "gtrid-é".encode("utf-8"), b"\x00" * 8, b"\xff" * 62, b"", b"y" * 65, b"z" * 200,
]


def xa_keys_file() -> dict:
    cases = []
    for gtrid in XA_GTRIDS:
        for fid in XA_FORMAT_IDS:
            cases.append({"format_id": fid, "gtrid": gtrid.hex(), "key": xa_key(fid, gtrid).hex()})
    return {
        "description": (
            "XA transaction keys (racaffinity::xa_transaction_key, racaffinity_xa_transaction_key, "
            "Cluster.xaTransactionKey, racaffinity.tpc.transaction_key): for each case, the key of the global "
            "transaction (`format_id`, a signed 32-bit integer; `gtrid`, hex bytes) is `key` (hex). Computed by "
            "tests/vectors/generate.py from docs/semantics.md, \"The key of an XA transaction\": the format id "
            "as 4 bytes big-endian then the gtrid, or its SHA-256 digest when it is 61 to 64 bytes; an empty or "
            "over-64-byte gtrid as it is."
        ),
        "keys": cases,
    }


# ---------------------------------------------------------------------------


FILES = {
    "rendezvous.json": rendezvous_file,
    "events.json": events_file,
    "connect.json": connect_file,
    "config.json": config_file,
    "xa_keys.json": xa_keys_file,
}


def self_test() -> None:
    """Sanity checks of the reference against values fixed by the documentation."""
    assert fnv1a64(b"") == FNV_OFFSET
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C  # published FNV-1a 64 test vector
    assert fnv1a64(b"foobar") == 0x85944171F73967E8  # published FNV-1a 64 test vector
    assert fmix64(0) == 0
    assert hash_i64(1) == h(bytes([1, 0, 0, 0, 0, 0, 0, 0]))
    assert i64_bytes(-1) == b"\xff" * 8 and i64_bytes(I64_MIN) == b"\x00" * 7 + b"\x80"
    assert math.isfinite(weighted_score(MASK64, 1.0)) and weighted_score(MASK64, 1.0) > weighted_score(1 << 63, 1.0)
    assert abs(weighted_score(1 << 63, 1.0) - 1.0 / math.log(2.0)) < 1e-12
    # SHA-256 of "abc", FIPS 180-2 appendix B.1: the digest the XA key uses.
    assert hashlib.sha256(b"abc").hexdigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert xa_key(0x1234, b"abc") == bytes.fromhex("00001234616263")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a checked-in file differs from the output")
    args = ap.parse_args()
    self_test()
    stale = []
    for name, build in FILES.items():
        text = render(build()) + "\n"
        json.loads(text)  # the renderer must emit valid JSON
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(HERE.parent.parent)}")
    if stale:
        print("out of date (run python3 tests/vectors/generate.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
