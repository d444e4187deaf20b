#!/usr/bin/env python3
"""Converts the shared vectors (tests/vectors/*.json) into a line-based file
that tests/c/test_vectors.c replays through the C API.

C has no JSON parser, so this script flattens the cases the C ABI can express
into one record per line:

    RECORD field field ...

Fields are separated by one space. Every string field is lower-case hex of its
UTF-8 (or raw) bytes, "-" for the empty string, so keys with NUL bytes, event
lines with tabs or newlines and configs with `;` all survive. Numbers are
decimal. The file ends with one `EXPECT <record> <count>` line per record type;
the C side fails unless it replayed exactly that many of each, so a truncated
file cannot pass.

Vectors the C ABI has no call for (the raw hash functions, parse-only event
results, split_host_port, partition_owner out of range) are emitted as `SKIP`
records with a reason, and test_vectors prints them.

Partition owners (`partition_owners`: the owner of partition p) have no direct
C call either. They are replayed through a witness: the smallest i64 key whose
partition is p under the documented hash (h of its 8 little-endian bytes, mod
partitions). The C side checks that racaffinity_key_partition of those bytes is
p and that racaffinity_key_route_i64 of the key gives the expected owner.

The converter is strict like rust/core/tests/vectors.rs: an unknown key in a
section it converts is an error, so a new field cannot be skipped silently.

Usage: vectors_to_c.py [--vectors DIR] OUT
Plain Python 3 standard library.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_VECTORS = HERE.parent / "vectors"

# racaffinity-hrw-v2 key hash, the vectors generator's own (README "Deterministic rendezvous hashing"),
# only to find partition witnesses; the C side verifies every witness.
sys.path.insert(0, str(DEFAULT_VECTORS))
from generate import h as _h  # noqa: E402


def witness_i64(partition: int, partitions: int) -> int:
    """Smallest i64 k >= 0 with h(le64(k)) % partitions == partition."""
    k = 0
    while _h(struct.pack("<q", k)) % partitions != partition:
        k += 1
        if k > 50 * partitions + 1000:
            raise SystemExit(f"no witness for partition {partition} of {partitions}")
    return k


class Out:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counts: Counter[str] = Counter()

    def rec(self, kind: str, *fields) -> None:
        self.counts[kind] += 1
        self.lines.append(" ".join([kind, *(str(f) for f in fields)]))

    def comment(self, text: str) -> None:
        self.lines.append("# " + text)


def hx(s: str | bytes) -> str:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return b.hex() if b else "-"


def cstr(s: str, ctx: str) -> str:
    """A string the C side passes as a NUL-terminated argument."""
    if "\x00" in s:
        raise SystemExit(f"{ctx}: a NUL byte cannot be passed as a C string")
    return hx(s)


def keys(ctx: str, obj: dict, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(obj, dict):
        raise SystemExit(f"{ctx}: expected an object, got {obj!r}")
    unknown = set(obj) - required - set(optional)
    missing = required - set(obj)
    if unknown or missing:
        raise SystemExit(f"{ctx}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}: "
                         "teach tests/c/vectors_to_c.py and tests/c/test_vectors.c about them")
    return obj


def byte_spec(ctx: str, spec: dict) -> bytes:
    keys(ctx, spec, {"hex"}, {"utf8", "repeat"})
    one = bytes.fromhex(spec["hex"])
    if "utf8" in spec and spec["utf8"].encode("utf-8") != one:
        raise SystemExit(f"{ctx}: utf8 spelling does not match hex")
    return one * spec.get("repeat", 1)


ERROR_KINDS = {"Config", "InvalidArgument", "UnknownNode", "DuplicateNode", "NoNodeAvailable", "StrictAffinity",
               "PreparedNodeUnavailable", "UnknownTransaction", "EventParse", "ForeignEvent"}


def kind(ctx: str, k: str) -> str:
    if k not in ERROR_KINDS:
        raise SystemExit(f"{ctx}: unknown error kind {k!r}")
    return k


# ---------------------------------------------------------------------------


def routed(out: Out, ctx: str, sec: dict, parts: int, removal: bool) -> None:
    extra = {"owner_before"} if removal else {"hash"}
    for row in sec["transactions"]:
        keys(ctx, row, {"gtrid", "owner"}, extra)
        out.rec("TX", hx(byte_spec(ctx, row["gtrid"])), hx(row["owner"]))
    for row in sec["sessions"]:
        keys(ctx, row, {"key", "owner"}, extra)
        out.rec("SESS", hx(byte_spec(ctx, row["key"])), hx(row["owner"]))
    for row in sec["data"]:
        keys(ctx, row, {"partition", "owner"}, extra | {"key", "i64"})
        if "key" in row:
            out.rec("DATA", hx(byte_spec(ctx, row["key"])), row["partition"], hx(row["owner"]))
        elif "i64" in row:
            out.rec("DATA64", int(row["i64"]), row["partition"], hx(row["owner"]))
        else:
            raise SystemExit(f"{ctx}: data row has neither key nor i64")
    for p in sec["partition_owners"]:
        keys(ctx, p, {"partition", "owner"})
        out.rec("POWNER", p["partition"], witness_i64(p["partition"], parts), hx(p["owner"]))


def rendezvous(out: Out, v: dict) -> None:
    keys("rendezvous", v, {"description", "hash_version", "hash", "topologies", "errors"})
    n_hash = sum(len(x) for x in v["hash"].values())
    out.rec("SKIP", "rendezvous.json", "hash", n_hash,
            hx("the C ABI exports no hash functions; placements below exercise them"))
    for t in v["topologies"]:
        ctx = f"rendezvous: {t.get('name')}"
        keys(ctx, t, {"name", "about", "config", "partitions", "nodes", "transactions", "sessions", "data",
                      "partition_owners", "removals"})
        out.comment(f"topology {t['name']}: {t['about']}")
        out.rec("TOPO", hx(t["name"]), cstr(t["config"], ctx), t["partitions"])
        for n in t["nodes"]:
            keys(ctx, n, {"name", "weight", "seed"})
            out.rec("NODE", hx(n["name"]), n["weight"])
        routed(out, ctx, t, t["partitions"], removal=False)
        for r in t["removals"]:
            keys(ctx, r, {"remove", "removed", "transactions", "sessions", "data", "partition_owners"})
            out.rec("REMOVAL", hx(r["remove"]), hx(r["removed"]))
            routed(out, f"{ctx} without {r['remove']}", r, t["partitions"], removal=True)
        out.rec("ENDTOPO")
    first = v["topologies"][0]["config"]
    out.rec("ERRTOPO", cstr(first, "rendezvous errors"))
    skipped = 0
    for e in v["errors"]:
        keys("rendezvous errors", e, {"op", "arg", "error"})
        op = e["op"]
        if op in ("tx_begin", "session_route", "route_key", "partition_of"):
            out.rec("RERR", op, hx(byte_spec("rendezvous errors", e["arg"])), kind("errors", e["error"]))
        elif op == "remove_node":
            out.rec("RERR", op, cstr(e["arg"], "remove_node"), kind("errors", e["error"]))
        elif op == "partition_owner":
            skipped += 1
        else:
            raise SystemExit(f"rendezvous errors: no C mapping for op {op!r}")
    if skipped:
        out.rec("SKIP", "rendezvous.json", "errors/partition_owner", skipped,
                hx("the C ABI has no partition_owner call"))


def events(out: Out, v: dict) -> None:
    keys("events", v, {"description", "parse", "parse_errors", "apply"})
    out.rec("SKIP", "events.json", "parse", len(v["parse"]),
            hx("the C ABI has no parse-only call; parsed fields are not observable"))
    for p in v["parse_errors"]:
        keys("events parse_errors", p, {"line", "error"})
        out.rec("PARSEERR", cstr(p["line"], "parse_errors"), kind("parse_errors", p["error"]))
    for a in v["apply"]:
        ctx = f"events apply {a.get('name')}"
        keys(ctx, a, {"name", "config", "steps", "nodes"})
        out.rec("APPLY", hx(a["name"]), cstr(a["config"], ctx))
        for st in a["steps"]:
            keys(ctx, st, {"line", "error"}, {"changes", "revoked", "advised"})
            changes = st.get("changes", [])
            for c in changes:
                keys(ctx, c, {"node", "from", "to"})
            ch = ",".join(f"{hx(c['node'])}:{c['from']}:{c['to']}" for c in changes) or "-"
            revoked = ",".join(hx(n) for n in st.get("revoked", [])) or "-"
            advised = ",".join(hx(n) for n in st.get("advised", [])) or "-"
            err = kind(ctx, st["error"]) if st["error"] is not None else "OK"
            out.rec("STEP", cstr(st["line"], ctx), err, len(changes), ch, revoked, advised)
        for n in a["nodes"]:
            keys(ctx, n, {"name", "state", "effective_weight", "rlb_percent", "rlb_flag", "affinity_advised"})
            pct = -1 if n["rlb_percent"] is None else n["rlb_percent"]
            out.rec("VIEW", hx(n["name"]), n["state"], pct, int(bool(n["affinity_advised"])))
        out.rec("ENDAPPLY")


def connect(out: Out, v: dict) -> None:
    keys("connect", v, {"description", "build", "build_errors", "split_host_port"})
    for b in v["build"]:
        keys("connect build", b, {"host", "port", "service", "instance", "expect"})
        e = keys("connect build expect", b["expect"],
                 {"descriptor", "easy_connect", "jdbc_descriptor_url", "jdbc_easy_connect_url"})
        out.rec("BUILD", cstr(b["host"], "build"), b["port"], cstr(b["service"], "build"),
                cstr(b["instance"], "build"), hx(e["descriptor"]), hx(e["easy_connect"]),
                hx(e["jdbc_descriptor_url"]), hx(e["jdbc_easy_connect_url"]))
    for b in v["build_errors"]:
        keys("connect build_errors", b, {"host", "port", "service", "instance", "error"})
        if not 0 <= b["port"] <= 0xFFFF:
            raise SystemExit(f"build_errors: port {b['port']} does not fit uint16_t")
        out.rec("BUILDERR", cstr(b["host"], "build_errors"), b["port"], cstr(b["service"], "build_errors"),
                cstr(b["instance"], "build_errors"), kind("build_errors", b["error"]))
    out.rec("SKIP", "connect.json", "split_host_port", len(v["split_host_port"]),
            hx("the C ABI has no split_host_port call (node_add addresses are checked in test_api)"))


# Config fields the C API can observe: name and policy (metrics JSON), the node
# list (names and static weights), and each scope's strict switch.
STRICT_FIELDS = {"thread.strict": "thread", "transaction.strict": "transaction", "session.strict": "session",
                 "data.strict": "data"}


def config(out: Out, v: dict) -> None:
    keys("config", v, {"description", "parse", "errors", "node_names"})
    unobservable = 0
    for p in v["parse"]:
        keys("config parse", p, {"text", "expect"})
        out.rec("CFGOK", cstr(p["text"], "config parse"))
        for field, want in p["expect"].items():
            if field == "name":
                out.rec("CFGNAME", hx(want))
            elif field == "policy":
                out.rec("CFGPOLICY", hx(want))
            elif field == "nodes":
                out.rec("CFGNODES", len(want))
                for n in want:
                    keys("config parse nodes", n, {"name", "weight", "address"})
                    out.rec("CFGNODE", hx(n["name"]), n["weight"])
            elif field in STRICT_FIELDS:
                out.rec("CFGSTRICT", STRICT_FIELDS[field], int(bool(want)))
            else:
                unobservable += 1
        out.rec("ENDCFG")
    if unobservable:
        out.rec("SKIP", "config.json", "parse/fields", unobservable,
                hx("fields without a C getter (database, service, partitions, durations, modes, panic, map)"))
    for e in v["errors"]:
        keys("config errors", e, {"text", "error", "key"})
        out.rec("CFGERR", cstr(e["text"], "config errors"), kind("config errors", e["error"]), hx(e["key"]))
    nn = keys("config node_names", v["node_names"], {"valid", "invalid"})
    for n in nn["valid"]:
        out.rec("NAMEOK", cstr(n, "node_names"))
    for n in nn["invalid"]:
        out.rec("NAMEBAD", cstr(n, "node_names"))


def xa_keys(out: Out, v: dict) -> None:
    keys("xa_keys", v, {"description", "keys"})
    for c in v["keys"]:
        keys("xa_keys keys", c, {"format_id", "gtrid", "key"})
        if not -(1 << 31) <= c["format_id"] < (1 << 31):
            raise SystemExit(f"xa_keys: format_id {c['format_id']} does not fit int32_t")
        out.rec("XAKEY", c["format_id"], hx(bytes.fromhex(c["gtrid"])), hx(bytes.fromhex(c["key"])))


HANDLERS = {"rendezvous.json": rendezvous, "events.json": events, "connect.json": connect, "config.json": config,
            "xa_keys.json": xa_keys}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=Path, default=DEFAULT_VECTORS)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()

    present = sorted(p.name for p in args.vectors.glob("*.json"))
    missing = sorted(set(HANDLERS) - set(present))
    unknown = sorted(set(present) - set(HANDLERS))
    if missing or unknown:
        print(f"vectors_to_c: missing files {missing}, files without a C handler {unknown}", file=sys.stderr)
        return 1
    out = Out()
    out.comment("generated by tests/c/vectors_to_c.py from tests/vectors/*.json; do not edit")
    for name, handler in HANDLERS.items():
        out.comment(f"---- {name}")
        handler(out, json.loads((args.vectors / name).read_text(encoding="utf-8")))
    for k in sorted(out.counts):
        out.lines.append(f"EXPECT {k} {out.counts[k]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out.lines) + "\n", encoding="utf-8")
    summary = ", ".join(f"{k} {n}" for k, n in sorted(out.counts.items()))
    print(f"vectors_to_c: wrote {args.out} ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
