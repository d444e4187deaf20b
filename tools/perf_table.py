#!/usr/bin/env python3
"""One table of every benchmark's ratio against its baseline: what `make bench` prints.

    python3 tools/perf_table.py [--write-readme README.md] [options]

Reads the four benchmark outputs of a `make bench` run:

  Rust    criterion estimates, <criterion dir>/<group>/<bench>/new/estimates.json
          (RACAFF_BENCH_QUICK=1 cargo bench -p racaffinity --bench routing); the
          pairs, targets and 2-thread scaling rule come from
          rust/core/benches/summary.py, so they are written down once
  C       `CBENCH <name> <ns>` lines (tests/c/bench.sh writes target/c-bench/bench.out)
  Python  `PYBENCH <name> <ns> <ratio>` lines (python/bench.py's stdout; `make
          bench` tees it to target/bench/python.out)
  Java    JMH's JSON result (java/run_bench.sh: java/target/jmh-result.json)

and prints one markdown table: bench, value, baseline, baseline value, ratio,
target, met?. A source that is missing gives a note, not a failure.

--write-readme FILE rewrites the text between the lines `<!-- perf:begin -->`
and `<!-- perf:end -->` in FILE with the table, the date, the machine note and
the command (if FILE has no markers but a line `PERFORMANCE_TABLE`, that line
becomes the marked block).

Exit status: 0; 1 with --check when a target with data is missed; 2 when no
source has any data or the README has no place for the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
PLACEHOLDER = "PERFORMANCE_TABLE"
DEFAULT_COMMAND = "make bench"
MIN_BASELINE_NS = 2.0  # no ratio against a baseline under this (issue fast-paths-2)


@dataclass
class Row:
    lang: str
    bench: str
    value: Optional[float]  # ns
    baseline: str
    base_value: Optional[float]  # ns
    target: str = "–"
    met: Optional[bool] = None  # None: no target or no data
    ratio_text: Optional[str] = None  # overrides value / base_value
    note: str = ""
    measured: Optional[float] = None  # the median ratio the target was judged on, where it is a ratio
    also: Optional[Tuple[str, Optional[bool]]] = None  # a later issue's target for the same row, and met?
    issue: Optional[str] = None  # the bracket tag of the issue that set the target

    def ratio(self) -> str:
        if self.ratio_text is not None:
            return self.ratio_text
        if self.value is None or not self.base_value:
            return "–"
        if self.base_value < MIN_BASELINE_NS:
            # A baseline this small moves by half between runs while the
            # subject does not: its ratio cannot tell progress from noise.
            return "– (baseline < 2 ns: see the value)"
        r = self.value / self.base_value
        return f"{r:.1f}×" if r >= 10 else f"{r:.2f}×"


@dataclass(frozen=True)
class Target:
    """A ratio limit, with the issue (bracket tag) that set it: a target is
    read against the issue that asked for it, so a spec cannot give one
    without the other. `later`: a later issue's limit for the same row (the
    earlier stays, met or missed, as it was set)."""

    limit: float
    issue: str
    later: Optional[Tuple[float, str]] = None

    def judge(self, row: "Row", ratio: Optional[float]) -> "Row":
        """`row` with this target's text, issue and verdicts on `ratio` (None: no data)."""
        row.target = f"≤ {self.limit:g}×"
        row.issue = self.issue
        row.met = None if ratio is None else ratio <= self.limit
        row.measured = ratio
        if self.later is not None:
            limit, tag = self.later
            row.also = (f"≤ {limit:g}× [{tag}]", None if ratio is None else ratio <= limit)
        return row


def fmt_ns(v: Optional[float]) -> str:
    if v is None:
        return "–"
    if v >= 10_000:
        return f"{v / 1000:.1f} µs"
    if v >= 1000:
        return f"{v / 1000:.2f} µs"
    if v >= 100:
        return f"{v:.0f} ns"
    if v >= 10:
        return f"{v:.1f} ns"
    return f"{v:.2f} ns"


def met_text(m: Optional[bool]) -> str:
    return "–" if m is None else ("yes" if m else "**no**")


# ---- Rust: criterion --------------------------------------------------------------


def load_summary_module() -> object:
    path = REPO / "rust" / "core" / "benches" / "summary.py"
    spec = importlib.util.spec_from_file_location("racaffinity_bench_summary", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RUST_LABELS = {
    "pinned_pick/pick": ("`pick()` on a pinned thread", "`thread_local!` read"),
    "tx/begin_end": ("`tx_begin` + `tx_end`", "`Mutex<HashMap>` insert + remove"),
    "session/route_hit": ("`session_route`, known session", "`Mutex<HashMap>` get"),
    "key_route/route_key": ("`route_key`, byte key, 8 nodes", "`hash_bytes`"),
    "key_route/route_key_i64": ("`route_key_i64`, 8 nodes", "`hash_i64`"),
}


def rust_rows(crit: Path) -> Tuple[List[Row], str]:
    s = load_summary_module()
    median: Callable[[Path, str], Optional[float]] = s.median_ns  # type: ignore[attr-defined]
    rows: List[Row] = []
    found = 0
    for bench, base, target in s.PAIRS:  # type: ignore[attr-defined]
        m, b = median(crit, bench), median(crit, base)
        found += m is not None
        if bench in RUST_LABELS:
            label, blabel = RUST_LABELS[bench]
        else:  # unpinned_pick/<policy>/<n>
            _, policy, n = bench.split("/")
            label, blabel = f"unpinned `pick()`, `{policy}`, {n} nodes", "`AtomicU64::fetch_add`"
        row = Row("Rust", label, m, blabel, b)
        if target is not None:
            _unit, limit, row.issue = target
            row.target = f"≤ {limit:g} ns"
            row.met = None if m is None else m <= limit
        rows.append(row)
    scaling = {}
    for kind, _, _ in s.SCALING:  # type: ignore[attr-defined]
        t1, t2 = median(crit, f"threads/{kind}/1"), median(crit, f"threads/{kind}/2")
        found += t1 is not None
        scaling[kind] = (t1, t2, 2 * t1 / t2 if t1 and t2 else None)
    control = scaling["compute"][2]
    for kind, target, issue in s.SCALING:  # type: ignore[attr-defined]
        t1, t2, r = scaling[kind]
        label = {"pinned": "pinned `pick()`", "unpinned": "unpinned `pick()`",
                 "compute": "shared-nothing loop (control)"}[kind]
        tgt, met, note = "–", None, ""
        if target is not None:
            tgt = f"≥ {target:g}× throughput"
            if r is not None:
                if r >= target:
                    met = True
                elif control is not None and control < s.CONTROL_MIN:  # type: ignore[attr-defined]
                    note = f"busy box: control < {s.CONTROL_MIN:g}×"  # type: ignore[attr-defined]
                else:
                    met = False
        rows.append(Row("Rust", f"{label}, 2 threads (ns per 2 ops)", t2, "the same, 1 thread", t1, tgt, met,
                        f"{r:.2f}× throughput" if r else "–", note, issue=issue))
    if not found:
        return [], f"Rust: no criterion results under `{rel(crit)}`"
    return rows, f"Rust: criterion medians, `{rel(crit)}` ({mtime(crit)})"


# ---- C: CBENCH lines ------------------------------------------------------------------


def parse_lines(path: Path, tag: str) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for line in path.read_text(errors="replace").splitlines():
        p = line.split()
        if len(p) >= 3 and p[0] == tag:
            out[p[1]] = p[2:]
    return out


def tagged_values(path: Path, lang: str, tag: str, source: str) -> Tuple[Dict[str, float], str]:
    """The `TAG name value` lines of a benchmark output; when there are none,
    an empty dict and the line the table shows instead (`source`: what writes
    the file)."""
    if not path.is_file():
        return {}, f"{lang}: no `{rel(path)}` ({source})"
    values = {k: float(v[0]) for k, v in parse_lines(path, tag).items()}
    return values, "" if values else f"{lang}: no {tag} lines in `{rel(path)}`"


def c_rows(path: Path) -> Tuple[List[Row], str]:
    c, missing = tagged_values(path, "C", "CBENCH", "tests/c/bench.sh writes it")
    if not c:
        return [], missing
    rows = [
        Row("C", "`racaffinity_version()`: a no-op call into the library", c.get("noop_crossing"),
            "`__thread` read", c.get("tls_read")),
        Row("C", "`racaffinity_cluster_route()` on a pinned thread", c.get("pinned_route"),
            "no-op call", c.get("noop_crossing")),
    ]
    # The C ABI's own cost: the same loop in Rust inside the library, timed in
    # the same process, round by round (tests/c/bench.c); target C − Rust ≤ 3 ns.
    pairs = parse_lines(path, "CBENCH_PAIR")
    for name, label in (
        ("pinned_route", "pinned route"),
        ("key_route", "`racaffinity_key_route()`, 8 nodes"),
        ("key_route_i64", "`racaffinity_key_route_i64()`, 8 nodes"),
    ):
        if name not in pairs:
            continue
        cv, rv, d, dmin, dmax, rat, rmin, rmax = (float(x) for x in pairs[name][:8])
        ratio = f"{rat:.2f}× ({rmin:.2f}–{rmax:.2f}); {d:+.1f} ns ({dmin:+.1f} to {dmax:+.1f})"
        rows.append(Row("C", f"{label} through the C ABI", cv, "the same loop in Rust inside the library", rv,
                        "C − Rust ≤ 3 ns", d <= 3.0, ratio, issue="fast-paths"))
    if "handle_floor" in pairs:
        cv, rv, d, dmin, dmax, rat, rmin, rmax = (float(x) for x in pairs["handle_floor"][:8])
        rows.append(Row("C", "the floor of C − Rust: resolving a handle (`racaffinity_test_cluster_touch`)", cv,
                        "no-op call", rv, "–", None,
                        f"{rat:.2f}× ({rmin:.2f}–{rmax:.2f}); {d:+.1f} ns ({dmin:+.1f} to {dmax:+.1f})"))
    return rows, f"C: `{rel(path)}` ({mtime(path)})"


# ---- Python: PYBENCH lines -----------------------------------------------------------------

PY_ROWS = [  # (name, label, baseline name, baseline label, target ratio)
    ("raw_cffi_node_count", "raw cffi: a trivial call on the handle", "noop_call", "no-op cffi call", None),
    ("raw_cffi_pick_release", "raw cffi: `cluster_pick` + `lease_release`", "noop_call", "no-op cffi call", None),
    ("pick_release", "`Cluster.pick().release()`, unpinned", "noop_call", "no-op cffi call", Target(3.0, "fast-paths")),
    ("pick_with", "`with Cluster.pick():`, unpinned", "noop_call", "no-op cffi call", None),
    ("pinned_pick_release", "`Cluster.pick().release()` in a pin", "noop_call", "no-op cffi call", Target(2.0, "fast-paths")),
    ("pinned_route", "`Cluster.route()` in a pin (cached)", "noop_call", "no-op cffi call", Target(1.0, "fast-paths")),
    ("pinned_route_floor", "the route floor: the context's pin found and its route returned, no check, no count",
     "noop_call", "no-op cffi call", None),
    ("pinned_floor_lease", "the floor: cached route + a bare Python lease object (with its finalizer)", "noop_call", "no-op cffi call",
     None),
    ("unpinned_floor", "the unpinned floor: one raw cffi pick + a bare Python lease object (with its finalizer)", "noop_call",
     "no-op cffi call", None),
    ("pools_connection_pinned", "`NodePools.connection()` in a pin", "bare_pool_connection",
     "psycopg_pool `connection()`", None),
    ("pools_connection_key", "`NodePools.connection(key=…)`", "bare_pool_connection",
     "psycopg_pool `connection()`", None),
    ("pools_connection_balanced", "`NodePools.connection()`, balanced", "bare_pool_connection",
     "psycopg_pool `connection()`", None),
    ("bare_pool_getconn_putconn", "psycopg_pool `getconn`/`putconn` (what NodePools calls)",
     "bare_pool_connection", "psycopg_pool `connection()`", None),
]


def judged(row: Row, target: Optional[Target], ratio: Optional[float]) -> Row:
    """`row` judged against `target` (None: a row without one) on `ratio`."""
    return row if target is None else target.judge(row, ratio)


def ratio_rows(lang: str, values: Dict[str, float], spec: List[Tuple]) -> List[Row]:
    rows = []
    for name, label, base, blabel, target in spec:
        if name not in values:
            continue
        v, b = values[name], values.get(base)
        rows.append(judged(Row(lang, label, v, blabel, b), target, v / b if b else None))
    return rows


def python_rows(path: Path) -> Tuple[List[Row], str]:
    values, missing = tagged_values(path, "Python", "PYBENCH", "python/bench.py's output")
    if not values:
        return [], missing
    rows = ratio_rows("Python", values, PY_ROWS)
    # Per-round ratios (bench.py interleaves the cases): median with min–max.
    spread = parse_lines(path, "PYBENCH_RATIO")
    for row, (name, *_rest) in zip(rows, [r for r in PY_ROWS if r[0] in values]):
        if name in spread and row.base_value == values.get("noop_call"):
            med, lo, hi = (float(x) for x in spread[name][:3])
            row.ratio_text = f"{med:.2f}× ({lo:.2f}–{hi:.2f})"
            judged(row, next(t for n, _l, _b, _bl, t in PY_ROWS if n == name), med)
    rows += python_versus_rows(path)
    return rows, f"Python: `{rel(path)}` ({mtime(path)})"


PY_VERSUS_ROWS = [  # (subject, baseline, label, baseline label, target): PYBENCH_VS lines, per-round ratios
    ("pools_connection_pinned", "bare_pool_getconn_putconn", "`NodePools.connection()` in a pin",
     "psycopg_pool `getconn` + `with conn` + `putconn` (same rounds)", Target(1.35, "fast-paths-2")),
    ("pools_connection_balanced", "bare_pool_getconn_putconn", "`NodePools.connection()`, unpinned",
     "psycopg_pool `getconn` + `with conn` + `putconn` (same rounds)", Target(1.6, "fast-paths-2")),
    ("pool_wrapper_floor", "bare_pool_getconn_putconn", "the floor: a bare context manager around those",
     "psycopg_pool `getconn` + `with conn` + `putconn` (same rounds)", None),
    ("pools_connection_pinned_no_check", "bare_pool_getconn_putconn",
     "floor of the pinned target: in a pin, node pools without the alive check (the anchor has none)",
     "psycopg_pool `getconn` + `with conn` + `putconn` (same rounds)", None),
    ("pools_connection_balanced_one_node", "bare_pool_getconn_putconn",
     "floor of the unpinned target: unpinned on a one-node cluster (one pool, as the anchor)",
     "psycopg_pool `getconn` + `with conn` + `putconn` (same rounds)", None),
    ("pools_connection_pinned", "bare_pool_connection", "`NodePools.connection()` in a pin",
     "psycopg_pool `pool.connection()` (same rounds)", None),
    ("pools_connection_balanced", "bare_pool_connection", "`NodePools.connection()`, unpinned",
     "psycopg_pool `pool.connection()` (same rounds)", None),
    ("sqlalchemy_engine_pinned", "sqlalchemy_plain_connect", "SQLAlchemy engine `connect()` + close, in a pin",
     "plain SQLAlchemy engine, `QueuePool` (same rounds)", Target(1.15, "fast-paths-2")),
    ("sqlalchemy_engine_balanced", "sqlalchemy_plain_connect", "SQLAlchemy engine `connect()` + close, unpinned",
     "plain SQLAlchemy engine, `QueuePool` (same rounds)", None),
]


def python_versus_rows(path: Path) -> List[Row]:
    """PYBENCH_VS lines: `subject baseline median min max subject_ns baseline_ns`."""
    vs: Dict[Tuple[str, str], List[float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        p = line.split()
        if len(p) == 8 and p[0] == "PYBENCH_VS":
            vs[(p[1], p[2])] = [float(x) for x in p[3:]]
    rows = []
    for subject, base, label, blabel, target in PY_VERSUS_ROWS:
        if (subject, base) not in vs:
            continue
        med, lo, hi, v, b = vs[(subject, base)]
        row = Row("Python", f"{label} (interleaved)", v, blabel, b, ratio_text=f"{med:.2f}× ({lo:.2f}–{hi:.2f})")
        rows.append(judged(row, target, med))
    return rows


# ---- Java: JMH json -------------------------------------------------------------------------

JAVA_ROWS = [  # mirrors java/run_bench.sh
    ("pinnedRoute", "`Cluster.route()` on a pinned thread", "noop", "no-op JNI call", Target(2.0, "java")),
    ("nativePinnedRoute", "raw `Native.contextRoute`", "noop", "no-op JNI call", None),
    ("pinnedPickRelease", "`pick()` + `release(OK)`", "noop", "no-op JNI call", None),
    ("affinityPinned", "`AffinityDataSource` get + close", "bareHikari", "bare HikariCP get + close",
     Target(1.15, "java")),
    ("affinityPinnedSelect1", "the same with `SELECT 1`", "bareHikariSelect1", "bare HikariCP with `SELECT 1`",
     None),
]

UNIT_NS = {"ns/op": 1.0, "us/op": 1e3, "µs/op": 1e3, "ms/op": 1e6, "s/op": 1e9}


INTERLEAVED_ROWS = [  # (JBENCH_PAIR name, label, baseline label, target ratio to that baseline)
    ("pinnedRoute", "`Cluster.route()` on a pinned thread (cached; interleaved)", "no-op JNI call", Target(1.0, "fast-paths")),
    ("routeFloor", "the route floor: this thread's route from a `ThreadLocal`, no check, no count (interleaved)",
     "no-op JNI call", None),
    ("nativePinnedRoute", "raw `Native.contextRoute` (interleaved)", "no-op JNI call", None),
    ("fencedNoop", "no-op JNI call with `Reference.reachabilityFence` in a `finally` (interleaved)", "no-op JNI call",
     None),
    ("pinnedPickRelease", "`pick()` + `release(OK)` on a pinned thread (interleaved)", "no-op JNI call",
     Target(2.0, "fast-paths")),
    ("pinnedPickReleaseKept", "the same, the lease kept in a field (interleaved)", "no-op JNI call", None),
    ("affinityDataSource", "`AffinityDataSource` get + close, pinned (interleaved)", "bare HikariCP get + close",
     Target(1.10, "fast-paths", later=(1.3, "fast-paths-2"))),
    ("wrapperFloor", "the floor: pinned route + a minimal wrapper, no lease (interleaved)",
     "bare HikariCP get + close", None),
    ("leasedWrapperFloor", "the floor with the lease: pinned `pick()` + a minimal wrapper releasing it (interleaved)",
     "bare HikariCP get + close", None),
    ("affinityNoFailover", "`AffinityDataSource` get + close, pinned, failover bookkeeping off (control; interleaved)",
     "bare HikariCP get + close", None),
    ("affinityDataSource/affinityNoFailover", "fast connection failover's bookkeeping: pinned get + close with it"
     " (interleaved)", "the same without it", None),
    ("slotLeasedWrapperFloor/leasedWrapperFloor", "the floor with the lease and a failover slot (interleaved)",
     "the floor with the lease", None),
    ("affinityOneNode/affinityNoFailover", "fast connection failover's bookkeeping, twins built alike (one node"
     " over the same pool): with it (interleaved)", "the same without it", None),
    ("affinityNoFailoverTwin/affinityNoFailover", "the resolution of that pair: two identical data sources without"
     " it (interleaved)", "its twin", None),
    ("ucpPgjdbc", "anchor: Oracle UCP 23.26 over pgjdbc get + close, as it ships (interleaved)",
     "bare HikariCP get + close", None),
    ("ucpLocalValid", "anchor: Oracle UCP over pgjdbc, `isValid()` answered locally (interleaved)",
     "bare HikariCP get + close", None),
    ("affinityUnpinned", "`AffinityDataSource` get + close, unpinned (interleaved)", "bare HikariCP get + close",
     Target(1.6, "fast-paths-2")),
    ("unpinnedLeasedWrapperFloor", "the unpinned floor: unpinned `pick()` (one JNI call, host lease) + a minimal"
     " wrapper releasing it (interleaved)", "bare HikariCP get + close", None),
    ("unpinnedTwoCallFloor", "the unpinned floor as before [fast-paths-2]: `contextPick` + a library lease (cleaner)"
     " + `leaseEnd` (interleaved)", "bare HikariCP get + close", None),
    ("unpinnedPickRelease", "`pick()` + `release(OK)`, unpinned, one JNI call (interleaved)", "no-op JNI call", None),
    ("nativeUnpinnedPick", "raw `Native.contextPick` + `Native.leaseEnd`, unpinned (interleaved)", "no-op JNI call",
     None),
    ("xaTransactionKey", "`Cluster.xaTransactionKey`: an XA call's transaction key, one JNI call, 36-byte gtrid"
     " (interleaved)", "no-op JNI call", None),
    ("xidKeyOf", "`XidKey.of(xid)`: what each XA resource call does to key its Xid (interleaved)", "no-op JNI call",
     None),
    ("xidKeyJavaFloor", "the same key's bytes built in Java, no crossing (floor for scale; interleaved)",
     "no-op JNI call", None),
    ("replayOn/replayOff.wall", "request (connection, `SELECT 1`, COMMIT, close) with replay on, wall (interleaved)",
     "the same request, replay off", Target(1.10, "continuity")),
    ("replayOn/replayOffXid.wall", "the same, replay on: its recording alone, wall (interleaved)",
     "replay off, the application reading the xid as replay does", Target(1.10, "continuity")),
]


def java_interleaved_rows(path: Path) -> Tuple[List[Row], str]:
    """JBENCH_PAIR lines of InterleavedBench: ratios taken round by round in one JVM."""
    if not path.is_file():
        return [], f"Java: no `{rel(path)}` (java/run_bench.sh writes it)"
    pairs = parse_lines(path, "JBENCH_PAIR")
    rows = []
    for name, label, blabel, target in INTERLEAVED_ROWS:
        if name not in pairs:
            continue
        v, b, rat, rmin, rmax = (float(x) for x in pairs[name][:5])
        row = Row("Java", label, v, f"{blabel} (same rounds)", b, ratio_text=f"{rat:.2f}× ({rmin:.2f}–{rmax:.2f})")
        rows.append(judged(row, target, rat))
    return rows, f"Java: InterleavedBench, `{rel(path)}` ({mtime(path)})"


RUST_INTERLEAVED_ROWS = [  # (RBENCH_PAIR name, label, target ratio to one relaxed fetch_add)
    ("pinned_acquire_release", "`acquire()` + `release(Ok)` on a pinned thread (interleaved)",
     Target(3.0, "fast-paths-2")),
    ("two_atomic_adds", "the floor of a lease in a shared word: two relaxed `fetch_add`s + a `thread_local!` read "
     "(interleaved)", None),
    ("least_outstanding_pick", "unpinned `pick()`, `least_outstanding`, 8 nodes (interleaved)", None),
]
RUST_ABSOLUTE_ROWS = [  # (RBENCH_ABS name, label): too small for a ratio; ns with min–max over the rounds
    ("thread_local", "`thread_local!` read (interleaved)"),
    ("atomic_add", "one relaxed `fetch_add` (interleaved)"),
    ("pinned_pick", "`pick()` on a pinned thread (interleaved)"),
]


def rust_interleaved_rows(path: Path) -> Tuple[List[Row], str]:
    """RBENCH_PAIR (ratios to one relaxed fetch_add) and RBENCH_ABS lines of
    rust/core/examples/interleaved.rs."""
    if not path.is_file():
        return [], f"Rust: no `{rel(path)}` (`make bench` writes it)"
    pairs = parse_lines(path, "RBENCH_PAIR")
    absolute = parse_lines(path, "RBENCH_ABS")
    rows = []
    for name, label in RUST_ABSOLUTE_ROWS:
        if name in absolute:
            v, lo, hi = (float(x) for x in absolute[name][:3])
            rows.append(Row("Rust", label, v, "– (absolute)", None, "–", None, f"{lo:.2f}–{hi:.2f} ns"))
    for name, label, target in RUST_INTERLEAVED_ROWS:
        if name not in pairs:
            continue
        v, b, rat, rmin, rmax = (float(x) for x in pairs[name][:5])
        row = Row("Rust", label, v, "one relaxed `fetch_add` (same rounds)", b,
                  ratio_text=f"{rat:.2f}× ({rmin:.2f}–{rmax:.2f})")
        rows.append(judged(row, target, rat))
    return rows, f"Rust: interleaved example, `{rel(path)}` ({mtime(path)})"


def java_rows(path: Path) -> Tuple[List[Row], str]:
    if not path.is_file():
        return [], f"Java: no `{rel(path)}` (java/run_bench.sh writes it)"
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        return [], f"Java: `{rel(path)}` is not JMH JSON ({e})"
    values: Dict[str, float] = {}
    for b in data:
        pm = b.get("primaryMetric", {})
        scale = UNIT_NS.get(pm.get("scoreUnit", "ns/op"))
        if b.get("mode") == "avgt" and scale is not None:
            values[b["benchmark"].rsplit(".", 1)[-1]] = float(pm["score"]) * scale
    if not values:
        return [], f"Java: no average-time results in `{rel(path)}`"
    return ratio_rows("Java", values, JAVA_ROWS), f"Java: JMH, `{rel(path)}` ({mtime(path)})"


# ---- output ------------------------------------------------------------------------------------


def rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p)


SOURCE_TIMES: List[float] = []


def mtime(p: Path) -> str:
    try:
        if p.is_dir():
            files = list(p.glob("*/*/new/estimates.json")) + list(p.glob("*/*/*/new/estimates.json"))
            t = max(f.stat().st_mtime for f in files) if files else p.stat().st_mtime
        else:
            t = p.stat().st_mtime
    except (OSError, ValueError):
        return "?"
    SOURCE_TIMES.append(t)
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def name_issues(rows: List[Row]) -> None:
    """Adds to each target the issue that set it (the row specs give both
    together; a row built with a target and no issue is a spec mistake)."""
    for r in rows:
        if r.target == "–":
            continue
        if not r.issue:
            raise SystemExit(f"perf_table.py: the target of {r.lang} row {r.bench!r} names no issue:"
                             " give its spec a Target(limit, issue)")
        r.target = f"{r.target} [{r.issue}]"


def table(rows: List[Row]) -> List[str]:
    out = [
        "| | bench | value | baseline | baseline value | ratio | target | met? |",
        "|---|---|---:|---|---:|---:|---|---|",
    ]
    for r in rows:
        met = met_text(r.met) + (f" ({r.note})" if r.note else "")
        target = r.target
        if r.also is not None:
            target += f"; {r.also[0]}"
            met += f"; {met_text(r.also[1])}"
        out.append(f"| {r.lang} | {r.bench} | {fmt_ns(r.value)} | {r.baseline} | {fmt_ns(r.base_value)} "
                   f"| {r.ratio()} | {target} | {met} |")
    return out


def render(rows: List[Row], sources: List[str], date: str, machine: str, command: str) -> str:
    name_issues(rows)
    verdicts = [r.met for r in rows] + [r.also[1] for r in rows if r.also is not None]
    targets = [m for m in verdicts if m is not None]
    met = sum(1 for m in targets if m)
    lines = [
        f"Measured {date} on {machine} ({cpu_model()}, {platform.system()} {platform.machine()}), "
        f"with `{command}`: every benchmark in short mode, one after the other, each next to its baseline "
        "in the same run. Read the ratios, not the absolute times.",
        "",
        *table(rows),
        "",
        f"Targets met: {met} of {len(targets)}; each names the issue that set it, in brackets"
        " (a later issue's target for the same row follows the earlier one, which stays as set). "
        "Ratio is value / baseline value; the 2-thread rows give throughput(2 threads) / throughput(1). "
        "Sources: " + "; ".join(sources) + ".",
    ]
    if SOURCE_TIMES and max(SOURCE_TIMES) - min(SOURCE_TIMES) > 2 * 3600:
        lines.append("")
        lines.append("**Warning:** the sources are more than two hours apart: they come from different runs.")
    return "\n".join(lines) + "\n"


def write_readme(path: Path, block: str) -> None:
    text = path.read_text()
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        new = f"{head}{BEGIN}\n{block}{END}{tail}"
    elif re.search(rf"^{PLACEHOLDER}$", text, flags=re.M):
        new = re.sub(rf"^{PLACEHOLDER}$", lambda _m: f"{BEGIN}\n{block}{END}", text, count=1, flags=re.M)
    else:
        raise SystemExit(f"perf_table.py: {path} has neither `{BEGIN}` ... `{END}` nor a line {PLACEHOLDER}")
    if new != text:
        tmp = path.with_name(path.name + ".perf-tmp")
        tmp.write_text(new)
        os.replace(tmp, path)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--criterion", type=Path, default=None,
                    help="criterion directory (default: as the bench resolves it, target/criterion)")
    ap.add_argument("--c", type=Path, default=REPO / "target" / "c-bench" / "bench.out", help="CBENCH lines")
    ap.add_argument("--python", type=Path, default=REPO / "target" / "bench" / "python.out",
                    help="PYBENCH lines (python/bench.py's stdout)")
    ap.add_argument("--jmh", type=Path, default=REPO / "java" / "target" / "jmh-result.json", help="JMH JSON")
    ap.add_argument("--java-interleaved", type=Path, default=REPO / "java" / "target" / "interleaved.out",
                    help="JBENCH_PAIR lines (InterleavedBench)")
    ap.add_argument("--rust-interleaved", type=Path, default=REPO / "target" / "bench" / "rust.out",
                    help="RBENCH_PAIR lines (rust/core/examples/interleaved.rs)")
    ap.add_argument("--machine", default=f"a shared {os.cpu_count()}-core VM",
                    help='machine note (default: "a shared <N>-core VM")')
    ap.add_argument("--command", default=DEFAULT_COMMAND, help="the command that produced the numbers")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    ap.add_argument("--write-readme", type=Path, metavar="README", help="rewrite its Performance block")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target with data is missed")
    args = ap.parse_args(argv[1:])

    crit = args.criterion
    if crit is None:
        crit = Path(load_summary_module().criterion_dir([]))  # type: ignore[attr-defined]
    rows: List[Row] = []
    sources: List[str] = []
    for rs, src in (rust_rows(crit), rust_interleaved_rows(args.rust_interleaved), c_rows(args.c), java_rows(args.jmh),
                    java_interleaved_rows(args.java_interleaved), python_rows(args.python)):
        rows += rs
        sources.append(src)
    if not rows:
        print("perf_table.py: no benchmark results found:\n  " + "\n  ".join(sources), file=sys.stderr)
        return 2
    block = render(rows, sources, args.date, args.machine, args.command)
    print(block, end="")
    if args.write_readme:
        write_readme(args.write_readme, block)
        print(f"\n(wrote the table into {args.write_readme})")
    missed = [r for r in rows if r.met is False or (r.also is not None and r.also[1] is False)]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
