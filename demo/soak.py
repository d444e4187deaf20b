#!/usr/bin/env python3
"""`make soak`: the chaos soak. The demo's C, Java and Python clients (one
process each, demo/client.c, demo/DemoClient.java, demo/client.py, same line
protocol) plus this driver (the transaction manager, a fourth process with its
own racaffinity) run a mixed workload for a set time over 3 local PostgreSQL
nodes behind the fault proxies (tests/cluster/faults), while a seeded chaos
schedule injects faults:

- node kill -9 and restart (pgnodes kill / restart), then FAN down / up;
- blackhole (faults blackhole), FAN down after 1 s, heal, FAN up;
- planned drain: FAN down reason=USER, later FAN up; half the drains go down
  (FAN down reason=FAILURE) 1-2 s into the drain;
- flap: FAN down, up, down, up 1-2 s apart while the proxy resets the node's
  connections in its down phases;
- latency (faults latency) and connection resets (faults reset);
- RLB advisories (percent and aff flags);
- heartbeats: every client probes every node every few seconds (report_probe).

Every FAN / RLB line reaches each process (C, Java, Python, driver) after its
own delay of 0-3.5 s, longer than the gap between a flap's events, so the
processes get one node's events in different orders (each pair of a flap's
events reaches at least one process reversed); every delay stays below
transaction.settle (5 s), the deployment's promise the core's guard relies
on. Each FAN line's `timestamp=` is its publication time (one-second
resolution; a node's next line waits for the next second), which the core
reads as the event's version. The report counts the reorderings.

Workload: global transactions with one branch in each client process, committed
by the driver with 2PC; web sessions, data keys and pinned work (SESSION / KEY
/ PINNED requests, each client on its own). Transaction mode alternates with
the fault episodes: strict (the driver places the transaction and every branch
is enlisted there with tx_begin_on; the core of a process that sees that node
unable to take new work refuses the branch instead of splitting the
transaction) and
soft (every process places the gtrid itself by rendezvous, as the demo does:
processes that disagree on the topology may split it; splits are counted).

Beside them, two replay-enabled clients run plain requests: "Python replay"
(demo/client.py --replay, the binding's NodePools(replay=True)) and "Java
replay" (DemoClient --replay, AffinityDataSource replay=true over HikariCP):
INSERT a unique request id, SELECT it back, COMMIT; a request a failure
interrupted is replayed once elsewhere when its commit outcome allows it
(docs/continuity.md). Each gets the FAN lines when the XA client of its
language does, and probes every node on its own heartbeat. The report counts
their requests per fault kind apart: ok, replayed, failed (with the typed
cause), refused. SOAK_REPLAY=0 leaves them out.

Checked continuously and at the end (exit 1 on any violation):
- strict mode: 0 split transactions, 0 misrouted 2PC commands;
- the deliveries did reorder: a run with a flap or a drain that goes down
  applied some node's FAN lines against publication order in some process;
- after the final recovery: 0 prepared transactions on every node, every
  committed branch's row exactly once (SQL against the driver's log, which is
  also written to target/soak/tm-log.jsonl), no row of a rolled-back one;
- every replay-enabled request exactly once: an answered one's row once, on
  the node the client named; a failed one's at most once, and only with
  the cause OUTCOME_UNKNOWN; no row of a request no client answered;
- no client crash or hang, no PANIC result code, every registry back to 0
  (scopes' live counts and in-flight leases from each process's metrics JSON),
  resident memory growth of each process under 20 MB (VmRSS, after warm-up).

Feed mode (SOAK_FEED=etcd): the driver delivers no event. It starts a
3-member etcd (tests/cluster/etcdnodes) and two `racaffinity-feed monitor`
processes (kind postgres, over the proxies the clients use; they elect one
writer), and every process (C, Java, Python, driver) subscribes with
`topology.feed`. Crashes, blackholes, resets and slow nodes are found and
published by the monitor; planned drains go through `racaffinity-feed drain`
(then `down`, `up`); flaps and RLB advisories are relayed FAN lines
(`racaffinity-feed fan`). Each client notes, on a thread of its own every
20 ms, when its feed revision and fingerprint changed (RACAFF_FEEDLOG_MS,
the FEEDLOG command); the report gives, per kind of event, the time from the
fault to the record's write and to the last process applying it.

Measured: failover as users feel it, per language (from each crash, blackhole
and drain to the last failed request and to the first success elsewhere);
how long the processes' topology fingerprints disagreed after each event;
soft-mode splits. Writes target/soak/table.md, soak.svg, results.json.

    target/pyenv/bin/python demo/soak.py       (after demo/build.sh; `make soak` does both)

Environment: SOAK_SECONDS (default 600), SOAK_SEED (default: from the clock;
printed, so any run can be replayed), RACAFF_PG_BASE_PORT / RACAFF_PG_DIR
(pgnodes), RACAFF_PROXY_BASE_PORT (faults), JAVA, SOAK_CLIENT_TIMEOUT (seconds
per client query, default 6), SOAK_RSS_LIMIT_MB (default 20). Strict
transactions alternate: even ones are enlisted at the TM's node, odd ones
are placed by every process itself by rendezvous (as the demo does), where
only the core's `transaction.settle` (a node's change is acted on once every
process has seen it; meanwhile gtrids it owns are refused) keeps processes
that disagree for a moment from splitting them. SOAK_NO_GUARD=1 places every
strict transaction the second way. SOAK_FEED=etcd: the feed mode above;
RACAFF_ETCD_BASE_PORT / RACAFF_ETCD_DIR (etcdnodes; defaults of its own, so
the soak's etcd is never another test's). SOAK_SETTLE: transaction.settle in
seconds (default 5; 1 in the feed mode, see docs/soak.md). SOAK_FEED_TIMEOUT:
topology.feed_timeout (default: the core's).
Exit status: 0 all invariants held, 1 a violation, 2 setup error.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import json
import math
import os
import queue
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    import psycopg

    import racaffinity as ra
    from _harness import (FAULTS, NODES, PGNODES, REPO, NodeSQL, SetupError, built_clients, esc, run_tool, start_nodes,
                          tool_ports)
    import re
except ImportError as e:  # pragma: no cover - setup error
    sys.exit(f"demo/soak.py: {e}: run it with target/pyenv/bin/python after demo/build.sh (or `make soak`)")

OUT = REPO / "target" / "soak"
DEMO = REPO / "target" / "demo"
LANGS = ["c", "java", "py"]
PROCS = LANGS + ["tm"]
# The replay-enabled clients: plain requests (no XA) through the binding's
# pools with request replay on, each getting the FAN lines at the moments its
# language's XA client does (the schedule's draws stay what they were).
# SOAK_REPLAY=0 leaves them out.
RLANGS = [] if os.environ.get("SOAK_REPLAY", "1") == "0" else ["pyr", "javar"]
BASE_LANG = {"pyr": "py", "javar": "java"}
CLIENTS = LANGS + RLANGS
LABEL = {"c": "C", "java": "Java", "py": "Python", "tm": "driver", "pyr": "Python replay", "javar": "Java replay"}
TABLE = "demo_xa"  # the clients insert here (demo/README.md)
REQ_TABLE = "soak_req"  # the replay-enabled clients' requests insert here
# The replay-enabled clients' timeouts (docs/soak.md, "Replay-enabled
# clients"): what bounds the time from a blackhole to the first success
# elsewhere. Through the fault proxy (a user-space TCP proxy on this host) the
# kernel acknowledges every segment and answers every keepalive, so TCP's own
# timeouts never fire on a blackhole here: the statement deadline, the pool's
# wait and the heartbeat do. They are set all the same, as a deployment would.
REPLAY_SETTINGS = {
    "RACAFF_REPLAY_CALL_TIMEOUT": "1",  # seconds: a statement or COMMIT without an answer fails (replayed)
    "RACAFF_REPLAY_POOL_TIMEOUT": "3",  # seconds: the wait for a pooled connection (the heartbeat ends it sooner)
    "RACAFF_REPLAY_HEARTBEAT": "0.5",  # seconds between probes of every node (3 misses: Down)
    "RACAFF_REPLAY_PROBE_TIMEOUT": "0.5",  # seconds: a probe without an answer is a miss
    "RACAFF_REPLAY_CONNECT_TIMEOUT": "2",  # libpq connect_timeout, seconds (its floor)
    "RACAFF_REPLAY_KEEPALIVES_IDLE": "1",
    "RACAFF_REPLAY_KEEPALIVES_INTERVAL": "1",
    "RACAFF_REPLAY_KEEPALIVES_COUNT": "2",
    "RACAFF_REPLAY_TCP_USER_TIMEOUT_MS": "2000",
}
REQ_GAP_S = 0.05  # a replay-enabled client sends its next request this long after the last answer
PREFIX = "soak-"
HANG_S = 75.0  # a client that does not answer within this is hung (its own timeouts are far shorter)
# Every FAN / RLB line reaches each process after its own delay in 0..MAX_DELAY_S,
# longer than the 1-2 s between a flap's events, so processes get them in
# different orders. The guard is only promised to hold while every process gets
# each input within transaction.settle of every other (docs/semantics.md,
# "Agreement across processes"): the delays stay below it, with a margin for
# the driver's own scheduling.
FEED = os.environ.get("SOAK_FEED", "")  # "" (the driver delivers each line) or "etcd"
# With the feed every process applies the same records in revision order
# within a fraction of a second of each other (measured: the report's feed
# table), so the promise transaction.settle stands for is kept with a far
# shorter settle time; a longer one only prolongs the refusals after a change.
SETTLE_S = float(os.environ.get("SOAK_SETTLE") or (1.0 if FEED else 5.0))  # transaction.settle in the config
MAX_DELAY_S = 3.5
FLAP_GAP_S = (1.0, 2.0)  # between consecutive events about one node in a flap or a drain that goes down
assert MAX_DELAY_S > FLAP_GAP_S[1] + 0.4
FEED_TOOL = REPO / "target" / "release" / "racaffinity-feed"
ETCDNODES = str(REPO / "tests" / "cluster" / "etcdnodes")
# The monitors: a crashed node (connection refused) is published within
# misses x interval, a silent one within that plus the probe timeout.
MON_INTERVAL_S, MON_PROBE_TIMEOUT_S, MON_MISSES, MON_LEASE_TTL = 0.5, 1.0, 2, "3s"
FEEDLOG_MS = 20  # how often each client notes its feed revision and fingerprint
KINDS = ["crash", "blackhole", "drain", "latency", "reset", "rlb", "flap"]
FAILOVER_KINDS = ["crash", "blackhole", "drain"]


class Violation(Exception):
    pass


def now() -> float:
    return time.monotonic()


def pct(xs: List[float], p: float) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def replay(seed: int, seconds: float) -> str:
    return f"SOAK_SEED={seed} SOAK_SECONDS={seconds:.0f} make {'soak-feed' if FEED else 'soak'}"


def fmt_s(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def fan(node: str, status: str, reason: str, ts_s: int) -> str:
    """A FAN line whose `timestamp=` is `ts_s` (seconds since 1970, UTC, one
    second resolution as Oracle sends): the event's publication time, which
    the core reads as its version."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts_s))
    return (f"SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} host=127.0.0.1 "
            f"status={status} reason={reason} card=3 timestamp={ts}")


def rlb(percents: Dict[str, int], aff: Dict[str, bool]) -> str:
    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    body = "".join(f"{{instance={n} percent={percents[n]} flag=GOOD aff={'TRUE' if aff[n] else 'FALSE'}}}"
                   for n in NODES)
    return f"VERSION=1.0 database=orcl service=svc {{ {body} }} timestamp={ts}"


# ---- records ---------------------------------------------------------------------------------


@dataclass
class Req:
    """One user request a client ran (a transaction branch, a session, a data
    key or a pinned unit of work), as the driver saw it."""

    lang: str
    op: str
    key: str
    home: Optional[str]  # the node it belongs to when every node is up
    sent: float
    done: float
    status: str  # ok, fail, refused
    node: Optional[str]  # where it ran (the server's own port)
    why: str = ""  # a failure's node and code, e.g. "RAC2 SQL server closed the connection"
    replays: int = 0  # a replay-enabled request: how many times it was replayed
    refusal: str = ""  # a replay-enabled request that failed: the typed cause ("-": none)


@dataclass
class Branch:
    lang: str
    status: str  # prepared, refused, failed, committed, rolled_back, in_doubt, recovered
    node: Optional[str] = None  # where it really is (server port)
    claimed: Optional[str] = None
    code: str = ""


@dataclass
class Tx:
    gtrid: str
    mode: str  # strict | soft
    t: float
    tm_node: Optional[str] = None
    branches: Dict[str, Branch] = field(default_factory=dict)
    decision: str = ""  # commit | rollback
    misrouted: int = 0
    in_doubt: bool = False

    def worked(self) -> List[Branch]:
        return [b for b in self.branches.values() if b.node and b.status not in ("refused", "failed")]

    @property
    def split(self) -> bool:
        return len({b.node for b in self.worked()}) > 1


@dataclass
class FeedWrite:
    """A record written to the feed (feed mode): by the operator tool or a monitor."""

    t: float  # when the driver saw it written (run clock)
    rev: int
    key: str
    value: str
    source: str  # operator, relay, monitor-1, monitor-2
    kind: str = ""  # e.g. "crash down", filled in by the analysis
    t_fault: Optional[float] = None  # the fault or the operator's command it answers


@dataclass
class Episode:
    idx: int
    kind: str
    node: str
    start: float  # seconds after the load started
    duration: float
    mode: str
    at: List[float]  # when each FAN / RLB line of the episode is published, seconds after t0 (planned)
    delays: List[Dict[str, float]]  # per line, each process's delivery delay
    arg: int = 0  # latency ms
    then_down: bool = False  # drain: the node goes down (FAN down FAILURE) 1-2 s into its drain
    t0: Optional[float] = None  # when the fault was injected (run clock)
    t_end: Optional[float] = None  # when it was healed / restarted / up
    notes: List[str] = field(default_factory=list)

    def describe(self) -> str:
        extra = {"latency": f" {self.arg} ms", "flap": " down/up/down/up",
                 "drain": " then down" if self.then_down else ""}.get(self.kind, "")
        if FEED:
            return (f"#{self.idx:02d} t={self.start:6.1f}s {self.kind:<9} {self.node}{extra} for {self.duration:.1f}s "
                    f"[{self.mode}]")
        lines = "; ".join(f"+{a:.1f}s: " + "/".join(f"{d[p]:.1f}" for p in PROCS)
                          for a, d in zip(self.at, self.delays))
        return (f"#{self.idx:02d} t={self.start:6.1f}s {self.kind:<9} {self.node}{extra} for {self.duration:.1f}s "
                f"[{self.mode}]" + (f" delivery delays (C/Java/Python/driver) {lines}" if lines else ""))


def draw_delays(rng: random.Random, at: List[float]) -> List[Dict[str, float]]:
    """Each process's own delay (0..MAX_DELAY_S) for each line published at
    the offsets `at`. For each pair of consecutive lines closer together than
    that, one process (not the one of the pair before) gets the later line
    at once and the earlier one after the gap plus 0.8 s or more, so every
    flap reaches some process out of order whatever the other draws say."""
    ds = [{p: round(rng.uniform(0, MAX_DELAY_S), 3) for p in PROCS} for _ in at]
    prev = None
    for k in range(len(at) - 1):
        gap = at[k + 1] - at[k]
        if gap + 0.8 > MAX_DELAY_S:
            continue
        p = rng.choice([q for q in PROCS if q != prev])
        ds[k + 1][p] = round(rng.uniform(0, 0.2), 3)
        ds[k][p] = round(rng.uniform(gap + 0.8, MAX_DELAY_S), 3)
        prev = p
    return ds


def make_schedule(seed: int, seconds: float) -> Tuple[List[Episode], float, float]:
    """The chaos schedule: a function of the seed and the duration only."""
    rng = random.Random(seed)
    warmup = min(20.0, max(8.0, seconds * 0.1))
    tail = min(30.0, max(12.0, seconds * 0.08))
    eps: List[Episode] = []
    t = warmup
    bag: List[str] = []
    i = 0
    while True:
        if not bag:
            # The flap first: it is what reorders deliveries, and a 90 s run
            # has no room for every kind.
            bag = [k for k in KINDS if k != "flap"]
            rng.shuffle(bag)
            bag.append("flap")
        kind = bag.pop()
        then_down = False
        if kind == "flap":
            at = [0.0]
            for _ in range(3):
                at.append(round(at[-1] + rng.uniform(*FLAP_GAP_S), 2))
            dur = at[-1]
        else:
            dur = {"crash": rng.uniform(5, 9), "blackhole": rng.uniform(9, 14), "drain": rng.uniform(5, 8),
                   "latency": rng.uniform(4, 7), "reset": rng.uniform(1.5, 3), "rlb": rng.uniform(4, 6)}[kind]
            at = {"crash": [0.2, dur], "blackhole": [1.0, dur], "drain": [0.0, dur], "rlb": [0.0, dur]}.get(kind, [])
            if kind == "drain" and rng.random() < 0.5:
                then_down = True
                at = [0.0, round(rng.uniform(*FLAP_GAP_S), 2), dur]
        if t + dur + 3 > seconds - tail:
            break
        ep = Episode(i, kind, rng.choice(NODES), round(t, 2), round(dur, 2), "strict" if i % 2 == 0 else "soft",
                     at, draw_delays(rng, at), arg=rng.choice([150, 300, 600, 1200]) if kind == "latency" else 0,
                     then_down=then_down)
        eps.append(ep)
        t += dur + rng.uniform(3, 6)
        i += 1
    return eps, warmup, tail


# ---- the client processes ----------------------------------------------------------------------


class ClientDied(Exception):
    pass


class Worker(threading.Thread):
    """Owns one client process: sends it one command at a time and reads the
    reply with a deadline. Between the driver's work items it delivers due
    FAN / RLB lines, runs heartbeats, samples metrics and memory, and keeps
    the client busy with sessions, data keys and pinned work."""

    def __init__(self, soak: "Soak", lang: str, argv: List[str], env: Dict[str, str]) -> None:
        super().__init__(name=f"worker-{lang}", daemon=True)
        self.soak = soak
        self.lang = lang
        self.log_path = OUT / f"client-{lang}.log"
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=env)
        self.fd = self.p.stdout.fileno()  # type: ignore[union-attr]
        self.buf = b""
        self.events: List[Tuple[float, int, str, str]] = []  # heap: (due, seq, line, label)
        self.lock = threading.Lock()
        self.work: "queue.Queue[Tuple[List[str], Future]]" = queue.Queue()
        self.rng = random.Random(soak.seed * 31 + CLIENTS.index(lang))
        self.banner = ""
        self.error: Optional[str] = None
        self.next_hb = 0.0
        self.next_metrics = 0.0
        self.last_op = 0.0
        self.calls = 0

    # ---- the wire

    def readline(self, timeout: float) -> List[str]:
        end = now() + timeout
        while b"\n" not in self.buf:
            left = end - now()
            if left <= 0:
                raise ClientDied(f"the {LABEL[self.lang]} client did not answer within {timeout:.0f} s (hang)")
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    self.p.wait(5)
                    raise ClientDied(f"the {LABEL[self.lang]} client exited ({self.p.returncode}); "
                                     f"its log: {self.log_path}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").split("\t")

    def call(self, *fields: str) -> List[str]:
        assert self.p.stdin is not None
        try:
            self.p.stdin.write(("\t".join(fields) + "\n").encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ClientDied(f"the {LABEL[self.lang]} client's stdin: {e}") from e
        r = self.readline(HANG_S)
        self.calls += 1
        if any("PANIC" in f for f in r):
            self.soak.violation(f"{LABEL[self.lang]}: PANIC result: {' '.join(r)[:300]}")
        return r

    # ---- scheduling

    def deliver_at(self, due: float, line: str, label: str) -> None:
        with self.lock:
            heapq.heappush(self.events, (due, next(self.soak.seq), line, label))

    def due_event(self) -> Optional[Tuple[float, int, str, str]]:
        with self.lock:
            if self.events and self.events[0][0] <= now():
                return heapq.heappop(self.events)
        return None

    def submit(self, *fields: str) -> Future:
        f: Future = Future()
        if self.error:
            f.set_exception(ClientDied(self.error))
        else:
            self.work.put((list(fields), f))
        return f

    def run(self) -> None:
        try:
            r = self.readline(120)
            if r[0] != "READY":
                raise ClientDied(f"{LABEL[self.lang]} client: unexpected first line {r}")
            self.banner = r[2] if len(r) > 2 else ""
            self.soak.ready.release()
            while True:
                ev = self.due_event()
                if ev is not None:
                    self.apply(ev)
                    continue
                if self.background():
                    continue
                try:
                    fields, fut = self.work.get(timeout=0.01)
                except queue.Empty:
                    continue
                try:
                    r = self.call(*fields)
                except ClientDied as e:
                    fut.set_exception(e)
                    raise
                fut.t_reply = self.soak.clock()  # type: ignore[attr-defined]
                fut.set_result(r)
                if fields[0] == "QUIT":
                    return
        except ClientDied as e:
            self.error = str(e)
            self.soak.violation(str(e))
            self.soak.ready.release()
            while True:  # fail whatever is queued
                try:
                    _, fut = self.work.get_nowait()
                    if not fut.done():
                        fut.set_exception(ClientDied(self.error))
                except queue.Empty:
                    break
        except Exception as e:  # a bug in the driver: stop the run, do not hang it
            self.error = f"worker {self.lang}: {type(e).__name__}: {e}"
            self.soak.violation(self.error)

    def apply(self, ev: Tuple[float, int, str, str]) -> None:
        due, _, line, label = ev
        r = self.call("EVENT", line)
        t = self.soak.clock()
        if r[0] != "OK":
            self.soak.violation(f"{LABEL[self.lang]} refused {label}: {r}")
        if self.lang in PROCS:
            self.soak.record_delivery(label, self.lang, t, t - (due - self.soak.t0))
        self.sample_metrics()

    def sample_metrics(self) -> None:
        r = self.call("METRICS")
        t = self.soak.clock()
        if r[0] != "METRICS":
            self.soak.violation(f"{LABEL[self.lang]}: METRICS answered {r[:3]}")
            return
        m = json.loads(r[1])
        if self.lang in PROCS:  # the agreement is measured among the XA processes
            self.soak.record_fp(self.lang, t, m["fingerprint"])
        self.soak.last_metrics[self.lang] = m
        rss = self.soak.rss(self.p.pid)
        if rss is not None:
            self.soak.rss_samples[self.lang].append((t, rss))
        if FEED and self.lang in PROCS:
            self.take_feedlog()
        self.next_metrics = now() + 1.0

    def take_feedlog(self) -> None:
        """The client's notes of when its feed revision or fingerprint
        changed, each stamped with its own wall clock when it happened."""
        r = self.call("FEEDLOG")
        if r[0] != "FEEDLOG":
            self.soak.violation(f"{LABEL[self.lang]}: FEEDLOG answered {r[:3]}")
            return
        for entry in (r[1] if len(r) > 1 else "").split():
            ms, rev, fp = entry.split(",", 2)
            t = int(ms) / 1000 - self.soak.wall0
            self.soak.record_fp(self.lang, t, fp)
            self.soak.record_rev(self.lang, t, int(rev))

    def background(self) -> bool:
        """Between the driver's work items: metrics (every second), a heartbeat
        (every 3 s) and one mixed request (at most every 50 ms) when due.
        Whether it ran one."""
        s = self.soak
        t = now()
        if t >= self.next_metrics:
            self.sample_metrics()
            return True
        if not s.load_on:
            return False
        if self.lang in RLANGS:
            return self.replay_request(t)
        if t >= self.next_hb:
            r = self.call("HEARTBEAT")
            self.next_hb = now() + 3.0 + self.rng.uniform(0, 0.5)
            if r[0] != "OK":
                s.violation(f"{LABEL[self.lang]}: HEARTBEAT answered {r[:3]}")
            self.sample_metrics()
            return True
        if t - self.last_op < 0.05:
            return False
        x = self.rng.random()
        if x < 0.4:
            op, key, args = "SESSION", f"s{self.rng.randrange(48):03d}", []
            s.sessions[self.lang].add(key)
        elif x < 0.8:
            op, key, args = "KEY", f"k{self.rng.randrange(1000):04d}", []
        else:
            op, key, args = "PINNED", f"p{self.lang}{self.calls}", ["3"]
        sent = s.clock()
        r = self.call(op, key, *args)
        self.last_op = now()
        s.record_request(self.lang, op, key, sent, r)
        return True

    def replay_request(self, t: float) -> bool:
        """A replay-enabled client: one request (a unique id, routed by a
        data key) when due; its pools run their own heartbeat."""
        if t - self.last_op < REQ_GAP_S:
            return False
        s = self.soak
        rid = f"{PREFIX}{self.lang}-{self.calls:07d}"
        key = f"k{self.rng.randrange(1000):04d}"
        sent = s.clock()
        r = self.call("REQUEST", rid, key)
        self.last_op = now()
        s.record_replay_request(self.lang, rid, key, sent, r)
        return True


# ---- the driver ----------------------------------------------------------------------------------


class Soak(NodeSQL):
    conn_options = "connect_timeout=4 options='-c statement_timeout=15000'"

    def __init__(self, seconds: float, seed: int) -> None:
        super().__init__()
        self.seconds = seconds
        self.seed = seed
        self.seq = itertools.count()
        self.t0 = now()
        self.ports: Dict[str, int] = {}  # node -> server port
        self.proxy_ports: Dict[str, int] = {}
        self.port_node: Dict[int, str] = {}
        self.started_nodes = False
        self.started_faults = False
        self.killed: set = set()
        self.workers: Dict[str, Worker] = {}
        self.ready = threading.Semaphore(0)
        self.problems: List[str] = []
        self.plock = threading.Lock()
        self.notes: List[str] = []
        self.txs: List[Tx] = []
        self.reqs: List[Req] = []
        self.rlock = threading.Lock()
        self.fps: Dict[str, List[Tuple[float, str]]] = {p: [] for p in PROCS}
        self.rids: Dict[str, Req] = {}  # a replay-enabled request's id -> the request
        self.deliveries: Dict[str, Dict[str, float]] = defaultdict(dict)  # label -> proc -> applied at
        self.delivery_lag: List[float] = []
        self.label_kind: Dict[str, str] = {}
        self.label_t: Dict[str, float] = {}
        self.fan_pub: Dict[str, Tuple[int, str]] = {}  # label of a FAN line -> (publication order, node)
        self.applied: Dict[str, List[str]] = {p: [] for p in PROCS}  # labels in the order each process applied them
        self.last_ts: Dict[str, int] = {}  # node -> timestamp= of the last FAN line published about it
        self.pub_seq = itertools.count()
        self.rss_samples: Dict[str, List[Tuple[float, int]]] = {l: [] for l in CLIENTS}
        self.last_metrics: Dict[str, dict] = {}
        self.sessions: Dict[str, set] = {l: set() for l in LANGS}
        self.home_cache: Dict[Tuple[str, str], Optional[str]] = {}
        self.load_on = False
        self.mode = "strict"
        self.want_mode = "strict"
        self.recovery_due = False
        self.stop = threading.Event()
        self.recovered: Counter = Counter()
        self.recovery_passes = 0
        self.episodes: List[Episode] = []
        self.tmlog = None
        self.decisions: Dict[str, str] = {}
        self.inflight: set = set()
        self.wall0 = time.time()  # the wall clock at t0: the clients stamp their feed notes with it
        self.feed_url = ""
        self.started_etcd = False
        self.monitors: List[subprocess.Popen] = []
        self.mon_logs: List = []
        self.writes: List[FeedWrite] = []
        self.revs: Dict[str, List[Tuple[float, int]]] = {p: [] for p in PROCS}
        self.fault_marks: List[Tuple[float, str, str]] = []  # (when, node, "down" | "up"): a fault in, a repair
        self.final_rev = 0

    def clock(self) -> float:
        return now() - self.t0

    def violation(self, msg: str) -> None:
        with self.plock:
            if len(self.problems) < 500:
                self.problems.append(f"t={self.clock():.1f}s {msg}")
        print(f"  ! {msg}", flush=True)

    def say(self, msg: str) -> None:
        print(f"[{self.clock():7.1f}s] {msg}", flush=True)

    @staticmethod
    def rss(pid: int) -> Optional[int]:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    # ---- nodes, proxies, config

    def run_tool(self, *args: str, timeout: float = 120) -> str:
        return run_tool(*args, timeout=timeout)

    def start_infra(self) -> None:
        self.ports, self.started_nodes = start_nodes(timeout=120)
        self.port_node = {p: n for n, p in self.ports.items()}
        self.run_tool(FAULTS, "start", "3", timeout=900)
        self.started_faults = True
        self.proxy_ports = tool_ports(FAULTS, "PROXY", timeout=120)
        if len(self.proxy_ports) != 3 or len(self.ports) != 3:
            raise SetupError(f"nodes {self.ports}, proxies {self.proxy_ports}")
        if FEED:
            self.start_feed()

    def start_feed(self) -> None:
        """A 3-member etcd of the soak's own (destroyed at the end when this
        run started it) and two monitors over the proxies the clients use."""
        if not FEED_TOOL.exists():
            raise SetupError(f"{FEED_TOOL.relative_to(REPO)} is missing: `make feed-tool` (or `make soak-feed`)")
        running = [l for l in self.run_tool(ETCDNODES, "status", timeout=60).splitlines() if " up " in f"{l} "]
        self.started_etcd = not running
        self.run_tool(ETCDNODES, "start", "3", timeout=1900)
        endpoints = ""
        for line in self.run_tool(ETCDNODES, "env", timeout=60).splitlines():
            m = re.match(r"export RACAFF_ETCD_ENDPOINTS=['\"]?([^'\"]+)", line)
            if m:
                endpoints = m.group(1)
        if not endpoints:
            raise SetupError("etcdnodes env: no RACAFF_ETCD_ENDPOINTS")
        # a prefix of this run's own: an etcd left running by another run holds other records
        self.feed_url = f"etcd://{endpoints}/racaffinity/soak-{self.seed}-{os.getpid()}"
        nodes = [a for n in NODES for a in ("--node", f"{n}=127.0.0.1:{self.proxy_ports[n]}")]
        for k in (1, 2):
            log = open(OUT / f"monitor-{k}.log", "w")
            self.mon_logs.append(log)
            p = subprocess.Popen([str(FEED_TOOL), "monitor", "--feed", self.feed_url, "--kind", "postgres", *nodes,
                                  "--interval", f"{int(MON_INTERVAL_S * 1000)}ms",
                                  "--probe-timeout", f"{int(MON_PROBE_TIMEOUT_S * 1000)}ms",
                                  "--misses", str(MON_MISSES), "--lease-ttl", MON_LEASE_TTL, "--id", f"soak-monitor-{k}"],
                                 cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                                 bufsize=1)
            self.monitors.append(p)
            threading.Thread(target=self.read_monitor, args=(k, p, log), name=f"monitor-{k}", daemon=True).start()

    def read_monitor(self, k: int, p: subprocess.Popen, log) -> None:  # type: ignore[no-untyped-def]
        """A monitor's stdout: each record it wrote, when it wrote it."""
        assert p.stdout is not None
        for line in p.stdout:
            t = self.clock()
            try:
                log.write(f"[{t:7.2f}s] {line}")
                log.flush()
            except ValueError:  # closed by the cleanup
                pass
            m = re.match(r"wrote (\S+) = (.*) at revision (\d+)", line.strip())
            if m:
                self.record_write(FeedWrite(t, int(m.group(3)), m.group(1), m.group(2), f"monitor-{k}"))

    def feed_op(self, *args: str, source: str = "operator", kind: str = "") -> FeedWrite:
        """One operator command (`racaffinity-feed drain RAC1 ...`); the record it wrote."""
        t_fault = self.clock()
        out = self.run_tool(str(FEED_TOOL), *args, "--feed", self.feed_url, timeout=30)
        m = re.search(r"wrote (\S+) = (.*) at revision (\d+)", out)
        if m is None:
            raise SetupError(f"racaffinity-feed {args[0]}: unexpected output {out!r}")
        w = FeedWrite(self.clock(), int(m.group(3)), m.group(1), m.group(2), source, kind, t_fault)
        self.record_write(w)
        return w

    def record_write(self, w: FeedWrite) -> None:
        with self.rlock:
            self.writes.append(w)

    def record_rev(self, proc: str, t: float, rev: int) -> None:
        with self.rlock:
            self.revs[proc].append((t, rev))

    def mark(self, node: str, what: str) -> None:
        """A fault injected on `node` ("down") or repaired ("up"): what the monitor's records answer."""
        with self.rlock:
            self.fault_marks.append((self.clock(), node, what))

    def config_text(self, feed: bool = True) -> str:
        addr = "\n".join(f"node.{n}.address = 127.0.0.1:{self.proxy_ports[n]}" for n in NODES)
        return (
            "# written by demo/soak.py: the C, Java and Python clients and the driver all load this text;\n"
            "# the addresses are the fault proxies (tests/cluster/faults) in front of the nodes\n"
            "name = soak\ndatabase = orcl\nservice = svc\n"
            f"nodes = {', '.join(NODES)}\n{addr}\n"
            f"transaction.placement = rendezvous\ntransaction.strict = true\n"
            f"transaction.settle = {int(SETTLE_S * 1000)}ms\n"
            "session.placement = rendezvous\n"
            "heartbeat.interval = 3s\nheartbeat.misses = 3\n"
            + (f"topology.feed = {self.feed_url}\n" if FEED and feed else "")
            + (f"topology.feed_timeout = {os.environ['SOAK_FEED_TIMEOUT']}\n"
               if FEED and feed and os.environ.get("SOAK_FEED_TIMEOUT") else "")
        )

    # ---- SQL from the driver: straight to the nodes (the TM's own links are not faulted)

    def prepared_gids(self, node: str) -> List[str]:
        return [r[0] for r in self.sql(node, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s ORDER BY gid",
                                        (PREFIX + "%",))]

    def reset_tables(self) -> None:
        for n in NODES:
            for gid in self.prepared_gids(n):
                self.sql(n, f"ROLLBACK PREPARED '{gid}'")
            self.sql(n, f"CREATE TABLE IF NOT EXISTS {TABLE} (gtrid text, lang text, port int)")
            self.sql(n, f"DELETE FROM {TABLE} WHERE gtrid LIKE %s", (PREFIX + "%",))
            self.sql(n, f"CREATE TABLE IF NOT EXISTS {REQ_TABLE} (id text, lang text)")
            self.sql(n, f"CREATE INDEX IF NOT EXISTS {REQ_TABLE}_id ON {REQ_TABLE} (id)")
            self.sql(n, f"DELETE FROM {REQ_TABLE} WHERE id LIKE %s", (PREFIX + "%",))

    # ---- clients

    def start_clients(self, conf: Path) -> None:
        java = os.environ.get("JAVA", "java")
        cp = built_clients(DEMO, "soak")
        argv = {
            "c": [str(DEMO / "client_c"), str(conf)],
            "java": [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xms64m", "-Xmx64m",
                     "-XX:+AlwaysPreTouch", "-cp", cp, "DemoClient", str(conf)],
            "py": [sys.executable, str(REPO / "demo" / "client.py"), str(conf)],
            "pyr": [sys.executable, str(REPO / "demo" / "client.py"), "--replay", "pyr", str(conf)],
            "javar": [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xms64m", "-Xmx64m",
                      "-XX:+AlwaysPreTouch", "-cp", cp, "DemoClient", "--replay", "javar", str(conf)],
        }
        env = dict(os.environ, RACAFF_CLIENT_TIMEOUT=os.environ.get("SOAK_CLIENT_TIMEOUT", "6"), **REPLAY_SETTINGS)
        if FEED:
            env["RACAFF_FEEDLOG_MS"] = str(FEEDLOG_MS)
        for lang in CLIENTS:
            self.workers[lang] = Worker(self, lang, argv[lang], env)
        for w in self.workers.values():
            w.start()
        for _ in CLIENTS:
            if not self.ready.acquire(timeout=150):
                raise SetupError("a client did not start within 150 s")
        for w in self.workers.values():
            if w.error:
                raise SetupError(w.error)

    def ask_all(self, *fields: str, langs: Optional[List[str]] = None,
                times: Optional[Dict[str, float]] = None) -> Dict[str, List[str]]:
        """One command to several clients (they work on it concurrently), one
        reply from each; `times` gets when each reply arrived."""
        langs = LANGS if langs is None else langs
        futs = {l: self.workers[l].submit(*fields) for l in langs}
        out = {}
        for l, f in futs.items():
            try:
                out[l] = f.result(timeout=HANG_S + 30)
            except (SetupError, KeyboardInterrupt):  # SIGTERM / SIGALRM while waiting
                raise
            except Exception as e:
                raise Violation(f"{LABEL[l]}: {fields[0]}: {e}") from e
            if times is not None:
                times[l] = getattr(f, "t_reply", self.clock())
        return out

    # ---- observations

    def home(self, op: str, key: str) -> Optional[str]:
        """The node a key belongs to when every node is up (a reference
        cluster that never sees an event)."""
        k = (op, key)
        if k not in self.home_cache:
            with self.rlock:
                if op == "SESSION":
                    h = self.ref.route_session(key).name
                    self.ref.end_session(key)
                elif op in ("KEY", "REQUEST"):
                    h = self.ref.route_key(key).name
                elif op == "BRANCH":
                    h = self.ref.tx_begin(key).name
                    self.ref.tx_complete(key)
                else:
                    h = None
                self.home_cache[k] = h
        return self.home_cache[k]

    def record_request(self, lang: str, op: str, key: str, sent: float, r: List[str],
                       t: Optional[float] = None) -> None:
        t = self.clock() if t is None else t
        status = {"OK": "ok", "PREPARED": "ok", "FAIL": "fail", "REFUSED": "refused"}.get(r[0])
        if status is None:
            self.violation(f"{LABEL[lang]}: {op} {key}: unexpected reply {r[:4]}")
            return
        node = None
        if status == "ok":
            node = self.port_node.get(int(r[4]))
            if node is None or node.upper() != r[2].upper():
                self.violation(f"{LABEL[lang]}: {op} {key}: says {r[2]} but ran on port {r[4]}")
        why = "" if status == "ok" else " ".join(r[2:5])[:160]
        req = Req(lang, op, key, self.home(op, key), sent, t, status, node, why)
        with self.rlock:
            self.reqs.append(req)

    def record_replay_request(self, lang: str, rid: str, key: str, sent: float, r: List[str]) -> None:
        """A replay-enabled client's answer: `OK id node replays outcome`,
        `FAIL id node cause message` or `REFUSED id - code message`."""
        t = self.clock()
        status = {"OK": "ok", "FAIL": "fail", "REFUSED": "refused"}.get(r[0])
        if status is None or len(r) < 4:
            self.violation(f"{LABEL[lang]}: REQUEST {rid}: unexpected reply {r[:5]}")
            return
        node = next((n for n in NODES if n.upper() == r[2].upper()), None)
        req = Req(lang, "REQUEST", key, self.home("REQUEST", key), sent, t, status,
                  node if status == "ok" else None,
                  "" if status == "ok" else " ".join(r[2:5])[:200],
                  replays=int(r[3]) if status == "ok" else 0, refusal="" if status == "ok" else r[3])
        with self.rlock:
            self.reqs.append(req)
            self.rids[rid] = req

    def record_fp(self, proc: str, t: float, fp: str) -> None:
        with self.rlock:
            self.fps[proc].append((t, fp))

    def record_delivery(self, label: str, proc: str, t: float, lag: float) -> None:
        with self.rlock:
            self.deliveries[label][proc] = t
            self.applied[proc].append(label)
            self.delivery_lag.append(lag)

    def tm_fp(self) -> None:
        self.record_fp("tm", self.clock(), self.tm.metrics()["fingerprint"])

    # ---- the chaos schedule

    def fan_line(self, node: str, status: str, reason: str) -> str:
        """A FAN line stamped with its publication time. Each line about a
        node is published in a later second than the one before it (waiting
        for the next second if need be): the core keeps the newest timestamp
        and gives a tie to the more severe status, so an up in the second of
        the down it lifts would leave the node Down."""
        while True:
            t = time.time()
            if int(t) > self.last_ts.get(node, -1):
                break
            time.sleep(int(t) + 1.001 - t)
        self.last_ts[node] = int(t)
        return fan(node, status, reason, int(t))

    def publish_fan(self, ep: Episode, k: int, status: str, reason: str, phase: str) -> None:
        label = self.broadcast(ep, k, self.fan_line(ep.node, status, reason), phase)
        self.fan_pub[label] = (next(self.pub_seq), ep.node)

    def broadcast(self, ep: Episode, k: int, line: str, phase: str) -> str:
        """The episode's k-th line to every process, each after its own
        delay; its label."""
        label = f"#{ep.idx:02d}.{k} {ep.kind} {ep.node} {phase}"
        self.label_kind[label] = f"{ep.kind} {phase}"
        base = now()
        self.label_t[label] = base - self.t0
        for lang in CLIENTS:
            self.workers[lang].deliver_at(base + ep.delays[k][BASE_LANG.get(lang, lang)], line, label)
        self.tm_events.put((base + ep.delays[k]["tm"], line, label))
        return label

    def tm_feed_loop(self) -> None:
        """Feed mode: the driver's racaffinity subscribes like the clients;
        its revision and fingerprint are noted every FEEDLOG_MS."""
        last = None
        while not self.stop.wait(FEEDLOG_MS / 1000):
            m = self.tm.metrics()
            cur = ((m.get("feed") or {}).get("revision", 0), m["fingerprint"])
            if cur != last:
                t = self.clock()
                self.record_rev("tm", t, cur[0])
                self.record_fp("tm", t, cur[1])
                last = cur

    def tm_event_loop(self) -> None:
        """The driver's own racaffinity gets the lines at its own moment too."""
        pending: List[Tuple[float, int, str, str]] = []
        next_sample = 0.0
        while not self.stop.is_set():
            try:
                due, line, label = self.tm_events.get(timeout=0.02)
                heapq.heappush(pending, (due, next(self.seq), line, label))
            except queue.Empty:
                pass
            while pending and pending[0][0] <= now():
                due, _, line, label = heapq.heappop(pending)
                try:
                    self.tm.apply_event(line)
                except ra.Error as e:
                    self.violation(f"driver refused {label}: {e}")
                t = self.clock()
                self.record_delivery(label, "tm", t, t - (due - self.t0))
                self.tm_fp()
            if now() >= next_sample:
                self.tm_fp()
                next_sample = now() + 0.5

    def chaos(self) -> None:
        """Runs the episodes at their times (a thread)."""
        try:
            for ep in self.episodes:
                while self.clock() < ep.start:
                    if self.stop.wait(0.05):
                        return
                self.want_mode = ep.mode
                self.run_episode(ep)
        except Exception as e:
            if not self.stop.is_set():  # not the cleanup pulling the proxies away
                self.violation(f"chaos schedule: {type(e).__name__}: {e}")

    def wait_until(self, t: float) -> bool:
        while self.clock() < t:
            if self.stop.wait(0.05):
                return False
        return True

    def run_episode(self, ep: Episode) -> None:
        if FEED:
            return self.run_feed_episode(ep)
        i = NODES.index(ep.node) + 1
        self.say(f"chaos {ep.describe()}")
        ep.t0 = self.clock()
        end = ep.t0 + ep.duration
        if ep.kind == "crash":
            self.run_tool(PGNODES, "kill", str(i))
            self.killed.add(i)
            time.sleep(0.2)
            self.publish_fan(ep, 0, "down", "FAILURE", "down")
            self.wait_until(end)
            self.run_tool(PGNODES, "restart", str(i))
            self.killed.discard(i)
            ep.t_end = self.clock()
            self.publish_fan(ep, 1, "up", "BOOT", "up")
            self.recovery_due = True
        elif ep.kind == "blackhole":
            self.run_tool(FAULTS, "blackhole", str(i), timeout=30)
            self.wait_until(ep.t0 + ep.at[0])  # the cluster notices
            self.publish_fan(ep, 0, "down", "FAILURE", "down")
            self.wait_until(end)
            self.run_tool(FAULTS, "heal", str(i), timeout=30)
            ep.t_end = self.clock()
            self.publish_fan(ep, 1, "up", "BOOT", "up")
            self.recovery_due = True
        elif ep.kind == "drain":
            self.publish_fan(ep, 0, "down", "USER", "down")
            if ep.then_down:  # planned maintenance whose instance then stops
                self.wait_until(ep.t0 + ep.at[1])
                self.publish_fan(ep, 1, "down", "FAILURE", "then down")
            self.wait_until(end)
            ep.t_end = self.clock()
            self.publish_fan(ep, len(ep.at) - 1, "up", "USER", "up")
        elif ep.kind == "flap":
            # A node that goes down and comes back twice within seconds: the
            # proxy resets its connections while it is down. Each FAN line is
            # published at its planned moment; the proxy follows.
            for k, a in enumerate(ep.at):
                self.wait_until(ep.t0 + a)
                down = k % 2 == 0
                self.publish_fan(ep, k, "down" if down else "up", "FAILURE" if down else "BOOT",
                                 "down" if down else "up")
                self.run_tool(FAULTS, "reset" if down else "heal", str(i), timeout=30)
            ep.t_end = self.clock()
            self.recovery_due = True
        elif ep.kind == "latency":
            self.run_tool(FAULTS, "latency", str(i), str(ep.arg), timeout=30)
            self.wait_until(end)
            self.run_tool(FAULTS, "heal", str(i), timeout=30)
            ep.t_end = self.clock()
        elif ep.kind == "reset":
            self.run_tool(FAULTS, "reset", str(i), timeout=30)
            self.wait_until(end)
            self.run_tool(FAULTS, "heal", str(i), timeout=30)
            ep.t_end = self.clock()
        elif ep.kind == "rlb":
            rng = random.Random(self.seed * 1000 + ep.idx)
            w = {n: rng.randint(5, 80) for n in NODES}
            tot = sum(w.values())
            per = {n: max(1, round(100 * w[n] / tot)) for n in NODES}
            aff = {n: n != ep.node or rng.random() < 0.5 for n in NODES}
            ep.notes.append(f"advisory {per} aff {aff}")
            self.broadcast(ep, 0, rlb(per, aff), "advisory")
            self.wait_until(end)
            ep.t_end = self.clock()
            self.broadcast(ep, 1, rlb({n: 33 for n in NODES}, {n: True for n in NODES}), "neutral")

    def run_feed_episode(self, ep: Episode) -> None:
        """The episode in feed mode: the fault only. The monitor finds and
        publishes what fails; an operator's drain, down and up go through
        racaffinity-feed, a flap's and an advisory's FAN lines through its
        relay (`fan`), as an ONS relay would write them."""
        i = NODES.index(ep.node) + 1
        n = ep.node
        self.say(f"chaos {ep.describe()}")
        ep.t0 = self.clock()
        end = ep.t0 + ep.duration
        if ep.kind == "crash":
            self.mark(n, "down")
            self.run_tool(PGNODES, "kill", str(i))
            self.killed.add(i)
            self.wait_until(end)
            # marked before: the monitor can see the node answer before the tool returns
            self.mark(n, "up")
            self.run_tool(PGNODES, "restart", str(i))
            self.killed.discard(i)
            ep.t_end = self.clock()
            self.recovery_due = True
        elif ep.kind in ("blackhole", "latency", "reset"):
            self.mark(n, "down")
            self.run_tool(FAULTS, ep.kind, str(i), *([str(ep.arg)] if ep.kind == "latency" else []), timeout=30)
            self.wait_until(end)
            self.mark(n, "up")
            self.run_tool(FAULTS, "heal", str(i), timeout=30)
            ep.t_end = self.clock()
            if ep.kind == "blackhole":
                self.recovery_due = True
        elif ep.kind == "drain":
            self.feed_op("drain", n, "--timeout", "30s", kind="drain down")
            if ep.then_down:  # planned maintenance whose instance then stops
                self.wait_until(ep.t0 + ep.at[1])
                self.feed_op("down", n, kind="drain then down")
            self.wait_until(end)
            ep.t_end = self.clock()
            self.feed_op("up", n, kind="drain up")
        elif ep.kind == "flap":
            for k, a in enumerate(ep.at):
                self.wait_until(ep.t0 + a)
                down = k % 2 == 0
                self.mark(n, "down" if down else "up")
                self.feed_op("fan", fan(n, "down" if down else "up", "FAILURE" if down else "BOOT", int(time.time())),
                             source="relay", kind="flap down" if down else "flap up")
                self.run_tool(FAULTS, "reset" if down else "heal", str(i), timeout=30)
            ep.t_end = self.clock()
            self.recovery_due = True
        elif ep.kind == "rlb":
            rng = random.Random(self.seed * 1000 + ep.idx)
            w = {x: rng.randint(5, 80) for x in NODES}
            tot = sum(w.values())
            per = {x: max(1, round(100 * w[x] / tot)) for x in NODES}
            aff = {x: x != n or rng.random() < 0.5 for x in NODES}
            ep.notes.append(f"advisory {per} aff {aff}")
            self.feed_op("fan", rlb(per, aff), source="relay", kind="rlb advisory")
            self.wait_until(end)
            ep.t_end = self.clock()
            self.feed_op("fan", rlb({x: 33 for x in NODES}, {x: True for x in NODES}), source="relay",
                         kind="rlb neutral")

    # ---- global transactions

    def run_tx(self, i: int) -> None:
        gtrid = f"{PREFIX}{i:06d}"
        tx = Tx(gtrid, self.mode, self.clock())
        self.txs.append(tx)
        self.inflight.add(gtrid)
        try:
            route = self.tm.tx_begin(gtrid)
            tx.tm_node = route.name
        except ra.Error as e:
            tx.decision = "rollback"
            tx.branches = {l: Branch(l, "refused", code=type(e).__name__) for l in LANGS}
            self.inflight.discard(gtrid)
            return
        # Strict transactions alternate between the two ways branches find
        # their node: enlisted where the TM placed it (tx_begin_on), and
        # placed by each process itself (tx_begin, as the demo does), which
        # only the core's transaction.settle keeps together.
        guard = tx.mode == "strict" and i % 2 == 0 and not os.environ.get("SOAK_NO_GUARD")
        fields = ["BRANCH", gtrid, "affinity"] + ([tx.tm_node] if guard else [])
        sent = self.clock()
        times: Dict[str, float] = {}
        replies = self.ask_all(*fields, times=times)
        for lang, r in replies.items():
            self.record_request(lang, "BRANCH", gtrid, sent, r, times[lang])
            if r[0] == "PREPARED":
                node = self.port_node.get(int(r[4]))
                tx.branches[lang] = Branch(lang, "prepared", node, r[2])
            elif r[0] in ("REFUSED", "FAIL"):
                tx.branches[lang] = Branch(lang, "refused" if r[0] == "REFUSED" else "failed", None,
                                           r[2] if r[2] != "-" else None, r[3].split("(")[0])
            else:
                raise Violation(f"{LABEL[lang]}: BRANCH {gtrid}: unexpected reply {r[:4]}")
        ok = all(b.status == "prepared" for b in tx.branches.values())
        tx.decision = "commit" if ok else "rollback"
        if ok:
            try:
                self.tm.tx_prepared(gtrid)
            except ra.Error:
                pass
        self.decisions[gtrid] = tx.decision
        self.log_decision(tx)  # logged before phase two: the TM's decision
        self.phase_two(tx)
        try:
            self.tm.tx_complete(gtrid)
        except ra.Error:
            pass
        for lang in LANGS:
            self.workers[lang].submit("DONE", gtrid)  # every process forgets it (answer not awaited)
        self.inflight.discard(gtrid)
        if tx.split and tx.mode == "strict":
            self.violation(f"strict mode: {gtrid} split: " +
                           ", ".join(f"{LABEL[b.lang]} on {b.node}" for b in tx.worked()))

    def log_decision(self, tx: Tx) -> None:
        assert self.tmlog is not None
        self.tmlog.write(json.dumps({"gtrid": tx.gtrid, "decision": tx.decision, "mode": tx.mode,
                                     "tm_node": tx.tm_node,
                                     "branches": {l: [b.status, b.node] for l, b in tx.branches.items()}}) + "\n")
        self.tmlog.flush()

    def phase_two(self, tx: Tx) -> None:
        action = "COMMIT" if tx.decision == "commit" else "ROLLBACK"
        for b in tx.branches.values():
            if b.status != "prepared":
                continue
            gid = f"{tx.gtrid}.{b.lang}"
            if tx.mode == "strict":
                try:
                    target = self.tm.tx_route(tx.gtrid).name
                except ra.Error:
                    b.status, tx.in_doubt = "in_doubt", True
                    continue
            else:  # soft: each branch's 2PC goes to the node its resource manager enlisted it on
                target = b.claimed or b.node
            target = next(n for n in NODES if n.upper() == str(target).upper())
            err = self.try_sql(target, f"{action} PREPARED '{gid}'")
            if err is not None and "does not exist" in err:
                tx.misrouted += 1
                if tx.mode == "strict":
                    self.violation(f"strict mode: {action} PREPARED '{gid}' misrouted to {target} "
                                   f"(the branch is on {b.node})")
                err = self.try_sql(b.node, f"{action} PREPARED '{gid}'") if b.node else err
            if err is not None:
                b.status, tx.in_doubt = "in_doubt", True  # unreachable: recovery resolves it
                continue
            b.status = "committed" if action == "COMMIT" else "rolled_back"

    def recover(self, final: bool = False) -> None:
        """Scans pg_prepared_xacts on every node and resolves each branch per
        the TM log (no decision = rollback), where the scan found it."""
        self.recovery_passes += 1
        for node in NODES:
            try:
                gids = self.prepared_gids(node)
            except psycopg.Error as e:
                if final:
                    self.violation(f"final recovery: {node} unreachable: {e}")
                continue
            for gid in gids:
                gtrid, _ = gid.rsplit(".", 1)
                if gtrid in self.inflight:
                    continue
                action = "COMMIT" if self.decisions.get(gtrid) == "commit" else "ROLLBACK"
                try:
                    self.tm.tx_recovered(gtrid, node)
                    target = self.tm.tx_route(gtrid).name
                    if target.upper() != node.upper():
                        self.notes.append(f"recovery: {gid} found on {node}, tx_route says {target}")
                except ra.Error:
                    pass
                err = self.try_sql(node, f"{action} PREPARED '{gid}'")
                if err is None:
                    self.recovered[action] += 1
                elif final:
                    self.violation(f"final recovery: {action} PREPARED '{gid}' on {node}: {err}")
                for _ in range(8):
                    try:
                        self.tm.tx_complete(gtrid)
                    except ra.Error:
                        break

    # ---- main loop

    def set_mode(self, mode: str) -> None:
        self.tm.set_strict(ra.Scope.TRANSACTION, mode == "strict")
        for lang, r in self.ask_all("STRICT", "1" if mode == "strict" else "0").items():
            if r[0] != "OK":
                raise Violation(f"{LABEL[lang]}: STRICT answered {r}")
        self.mode = mode

    def workload(self, end: float) -> int:
        i = 0
        while self.clock() < end and not self.stop.is_set():
            if self.problems and any("hang" in p or "exited" in p for p in self.problems):
                raise Violation("a client died or hung")
            if self.want_mode != self.mode:
                self.set_mode(self.want_mode)
            if self.recovery_due:
                self.recovery_due = False
                self.recover()
            self.run_tx(i)
            i += 1
        return i

    def settle(self) -> None:
        """After the chaos: every fault healed, every node up in every process
        at once, a neutral advisory; then the final recovery."""
        self.run_tool(FAULTS, "heal-all", timeout=30)
        for i in sorted(self.killed):
            self.run_tool(PGNODES, "restart", str(i))
        self.killed.clear()
        if FEED:
            return self.settle_feed()
        lines = [self.fan_line(n, "up", "BOOT") for n in NODES] + [rlb({n: 33 for n in NODES}, {n: True for n in NODES})]
        for line in lines:
            self.tm.apply_event(line)
            for lang, r in self.ask_all("EVENT", line, langs=CLIENTS).items():
                if r[0] != "OK":
                    self.violation(f"{LABEL[lang]} refused the final event: {r}")
        self.tm_fp()

    def settle_feed(self) -> None:
        """Feed mode: the monitors stop (SIGTERM: each revokes its lease),
        then every node up, every FAN line up and a neutral advisory through
        the tool; every process must reach the last record's revision."""
        self.stop_monitors()
        last = None
        for n in NODES:
            last = self.feed_op("up", n, kind="final up")
            last = self.feed_op("fan", fan(n, "up", "BOOT", int(time.time())), source="relay", kind="final up")
        last = self.feed_op("fan", rlb({n: 33 for n in NODES}, {n: True for n in NODES}), source="relay",
                            kind="final neutral")
        self.final_rev = last.rev
        deadline = now() + 30
        while True:
            # the workers take their client's feed notes every second
            self.record_rev("tm", self.clock(), (self.tm.metrics().get("feed") or {}).get("revision", 0))
            behind = [LABEL[p] for p in PROCS if not self.revs[p] or max(r for _, r in self.revs[p]) < last.rev]
            if not behind:
                break
            if now() > deadline:
                self.violation(f"feed: {', '.join(behind)} did not apply revision {last.rev} within 30 s")
                break
            time.sleep(0.2)
        self.tm_fp()

    def stop_monitors(self) -> None:
        for p in self.monitors:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.monitors:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
                self.violation(f"monitor pid {p.pid} did not stop within 15 s of SIGTERM")

    def final_checks(self, ntx: int) -> None:
        self.recover(final=True)
        left = {n: len(self.prepared_gids(n)) for n in NODES}
        self.in_doubt_left = left
        if sum(left.values()):
            self.violation(f"after the final recovery, prepared transactions left: {left}")
        # every committed branch's row exactly once, on its node; none of a rolled-back one
        rows: Dict[Tuple[str, str], Counter] = defaultdict(Counter)
        for n in NODES:
            for gtrid, lang, cnt in self.sql(n, f"SELECT gtrid, lang, count(*) FROM {TABLE} WHERE gtrid LIKE %s "
                                               "GROUP BY 1, 2", (PREFIX + "%",)):
                rows[(gtrid, lang)][n] += cnt
        bad = 0
        self.rows_expected = 0
        seen = set()
        for tx in self.txs:
            for lang in LANGS:
                got = rows.get((tx.gtrid, lang), Counter())
                seen.add((tx.gtrid, lang))
                if tx.decision == "commit":
                    self.rows_expected += 1
                    want = Counter({tx.branches[lang].node: 1})
                    if got != want:
                        bad += 1
                        self.violation(f"{tx.gtrid}.{lang}: committed, rows {dict(got)}, expected {dict(want)}")
                elif sum(got.values()):
                    bad += 1
                    self.violation(f"{tx.gtrid}.{lang}: rolled back, yet rows {dict(got)}")
        for k, got in rows.items():
            if k not in seen:
                bad += 1
                self.violation(f"{k[0]}.{k[1]}: rows {dict(got)} of a transaction the driver never ran")
        self.rows_bad = bad
        self.check_requests()
        # registries back to 0
        for lang in LANGS:
            for s in sorted(self.sessions[lang]):
                self.workers[lang].submit("ENDSESSION", s)
        self.registries: Dict[str, str] = {}
        for lang, r in self.ask_all("METRICS", langs=CLIENTS).items():
            m = json.loads(r[1])
            self.last_metrics[lang] = m
            if lang in PROCS:
                self.record_fp(lang, self.clock(), m["fingerprint"])
            self.registries[lang] = self.registry_check(LABEL[lang], m)
        self.registries["tm"] = self.registry_check("driver", self.tm.metrics())
        with self.rlock:  # the clients' feed notes arrive after the samples taken since
            for p in PROCS:
                self.fps[p].sort(key=lambda x: x[0])
        fps = {p: self.fps[p][-1][1] for p in PROCS if self.fps[p]}
        self.final_fps = fps
        if len(set(fps.values())) != 1:
            # Not an invariant: passive ejection and heartbeats are each
            # process's own view (a node ejected in one process for a back-off).
            self.notes.append(f"fingerprints differ after the final events: {fps}")
        # memory
        self.rss_growth: Dict[str, Optional[float]] = {}
        warm = self.warmup
        limit = float(os.environ.get("SOAK_RSS_LIMIT_MB", "20"))
        for lang in CLIENTS:
            s = self.rss_samples[lang]
            base = [v for t, v in s if warm <= t <= warm + 10] or [v for _, v in s[:5]]
            last = [v for t, v in s if t >= s[-1][0] - 10] if s else []
            if not base or not last:
                self.rss_growth[lang] = None
                continue
            g = (sorted(last)[len(last) // 2] - sorted(base)[len(base) // 2]) / 2 ** 20
            self.rss_growth[lang] = g
            if g >= limit:
                self.violation(f"{LABEL[lang]}: resident memory grew {g:.1f} MB (limit {limit:.0f} MB)")
        # clean exits
        self.byes = {}
        for lang, r in self.ask_all("QUIT", langs=CLIENTS).items():
            self.byes[lang] = r
            if r[:3] != ["BYE", "tx_live=0", "open=0"]:
                self.violation(f"{LABEL[lang]} client left state behind: {r}")
            w = self.workers[lang]
            try:
                w.p.wait(20)
            except subprocess.TimeoutExpired:
                self.violation(f"{LABEL[lang]} client did not exit after QUIT")
                continue
            if w.p.returncode != 0:
                self.violation(f"{LABEL[lang]} client exited {w.p.returncode}")

    def check_requests(self) -> None:
        """Every replay-enabled request exactly once: an answered one has its
        row once, on the node the client named; a failed or refused one at
        most once, and a failed one whose write did commit must say
        OUTCOME_UNKNOWN (the one refusal that leaves a commit possible);
        no row of a request never sent."""
        rows: Dict[str, Counter] = defaultdict(Counter)
        for n in NODES:
            for rid, cnt in self.sql(n, f"SELECT id, count(*) FROM {REQ_TABLE} WHERE id LIKE %s GROUP BY 1",
                                     (PREFIX + "%",)):
                rows[rid][n] += cnt
        bad = 0
        self.req_committed_failed = 0
        for rid, req in self.rids.items():
            got = rows.get(rid, Counter())
            total = sum(got.values())
            if req.status == "ok":
                # a client that could not tell where it committed names no node: once, anywhere
                ok = got == Counter({req.node: 1}) if req.node else total == 1
            else:
                ok = total == 0 or (total == 1 and req.status == "fail" and req.refusal == "OUTCOME_UNKNOWN")
                self.req_committed_failed += total
            if not ok:
                bad += 1
                self.violation(f"request {rid} ({LABEL[req.lang]}, {req.status}"
                               f"{' on ' + str(req.node) if req.node else ''}{' ' + req.why if req.why else ''}): "
                               f"rows {dict(got)}")
        for rid, got in rows.items():
            if rid not in self.rids:
                bad += 1
                self.violation(f"request {rid}: rows {dict(got)} of a request no client answered")
        self.req_rows_bad = bad
        self.req_rows_expected = sum(1 for r in self.rids.values() if r.status == "ok")

    def registry_check(self, who: str, m: dict) -> str:
        live = {s: v["live"] for s, v in m["scopes"].items()}
        flight = {n["name"]: n["in_flight"] for n in m["nodes"]}
        if any(live.values()) or any(flight.values()):
            self.violation(f"{who}: registries not back to 0: live {live}, in flight {flight}")
            return f"live {live} in_flight {flight}"
        return "0"

    def run(self) -> int:
        OUT.mkdir(parents=True, exist_ok=True)
        self.episodes, self.warmup, tail = make_schedule(self.seed, self.seconds)
        print(f"racaffinity chaos soak{' (feed mode)' if FEED else ''}: {self.seconds:.0f} s, seed {self.seed} "
              f"(replay: {replay(self.seed, self.seconds)})")
        print(f"schedule: warm-up {self.warmup:.0f} s, {len(self.episodes)} fault episodes, quiet tail {tail:.0f} s")
        for ep in self.episodes:
            print(f"  {ep.describe()}")
        self.start_infra()
        conf = OUT / "cluster.conf"
        conf.write_text(self.config_text())
        self.tm = ra.Cluster(conf.read_text())
        self.ref = ra.Cluster(self.config_text(feed=False))  # the homes: a view that never changes
        self.reset_tables()
        self.tmlog = open(OUT / "tm-log.jsonl", "w")
        self.tm_events: "queue.Queue[Tuple[float, str, str]]" = queue.Queue()
        print(f"nodes {', '.join(f'{n} :{self.ports[n]} (proxy :{self.proxy_ports[n]})' for n in NODES)}")
        if FEED:
            print(f"topology feed {self.feed_url}; monitors pid {', '.join(str(p.pid) for p in self.monitors)}")
        self.start_clients(conf)
        for lang in CLIENTS:
            w = self.workers[lang]
            print(f"  {LABEL[lang]:<7} pid {w.p.pid:<7} {w.banner}")
        print(f"  driver  pid {os.getpid():<7} racaffinity {ra.version()}: the TM (2PC), the chaos schedule")
        self.t0 = now()
        self.wall0 = time.time()
        tm_thread = threading.Thread(target=self.tm_feed_loop if FEED else self.tm_event_loop, name="tm-events",
                                     daemon=True)
        tm_thread.start()
        self.load_on = True
        chaos = threading.Thread(target=self.chaos, name="chaos", daemon=True)
        chaos.start()
        ntx = self.workload(self.seconds)
        self.load_on = False
        self.stop.set()
        chaos.join(60)
        if chaos.is_alive():
            self.violation("the chaos schedule did not finish")
        tm_thread.join(10)
        self.say(f"load stopped after {ntx} global transactions; healing, final events, final recovery")
        # drain the clients' queues (DONE, due events) before the checks
        self.ask_all("METRICS", langs=CLIENTS)
        self.settle()
        if self.want_mode != self.mode:
            self.set_mode(self.want_mode)
        self.final_checks(ntx)
        self.elapsed = self.clock()
        return self.report(ntx)

    # ---- analysis and report ------------------------------------------------------------

    def disagreement(self) -> Tuple[List[Tuple[float, float]], Dict[str, List[float]]]:
        """Intervals when the four processes' fingerprints differ, and per
        injected event the disagreement it caused (seconds)."""
        obs = sorted((t, p, fp) for p in PROCS for t, fp in self.fps[p])
        cur: Dict[str, str] = {}
        intervals: List[Tuple[float, float]] = []
        start: Optional[float] = None
        for t, p, fp in obs:
            cur[p] = fp
            agree = len(cur) == len(PROCS) and len(set(cur.values())) == 1
            if not agree and start is None and len(cur) == len(PROCS):
                start = t
            elif agree and start is not None:
                intervals.append((start, t))
                start = None
        if start is not None:
            intervals.append((start, obs[-1][0] if obs else start))
        labels = sorted(self.label_t.items(), key=lambda kv: kv[1])
        per_kind: Dict[str, List[float]] = defaultdict(list)
        for j, (label, t0) in enumerate(labels):
            t1 = labels[j + 1][1] if j + 1 < len(labels) else t0 + 60
            first = min(self.deliveries.get(label, {}).values(), default=t0)
            lo = min(t0, first) - 0.05
            d = sum(max(0.0, min(b, t1) - max(a, lo)) for a, b in intervals)
            per_kind[self.label_kind[label]].append(d)
        return intervals, per_kind

    def reorderings(self) -> Tuple[Dict[str, int], int, int]:
        """Per process, the pairs of FAN lines about one node it applied in
        the opposite order to their publication; the number of episodes
        whose FAN lines did not reach every process in one order; the number
        of episodes whose schedule forces a reordering (a flap, a drain that
        goes down)."""
        per: Dict[str, int] = {}
        orders: Dict[str, Dict[str, List[int]]] = defaultdict(dict)  # episode -> proc -> publication order
        for p in PROCS:
            by_node: Dict[str, List[int]] = defaultdict(list)
            for label in self.applied[p]:
                if label in self.fan_pub:
                    seq, node = self.fan_pub[label]
                    by_node[node].append(seq)
                    orders[label.split(".")[0]].setdefault(p, []).append(seq)
            per[p] = sum(1 for xs in by_node.values() for i, a in enumerate(xs) for b in xs[i + 1:] if a > b)
        differ = sum(1 for o in orders.values() if len({tuple(v) for v in o.values()}) > 1)
        planned = sum(1 for e in self.episodes if e.t0 is not None and (e.kind == "flap" or e.then_down))
        return per, differ, planned

    def failover(self) -> Dict[str, Dict[str, Dict[str, List[float]]]]:
        """kind -> lang -> {"last_fail": [...], "first_ok": [...]} in seconds after each injection."""
        out: Dict[str, Dict[str, Dict[str, List[float]]]] = {k: {l: {"last_fail": [], "first_ok": [], "failed": []} for l in CLIENTS}
                                                             for k in FAILOVER_KINDS}
        by_lang = {l: sorted((r for r in self.reqs if r.lang == l), key=lambda r: r.done) for l in CLIENTS}
        done_at = {l: [r.done for r in by_lang[l]] for l in CLIENTS}
        for ep in self.episodes:
            if ep.kind not in FAILOVER_KINDS or ep.t0 is None:
                continue
            t_end = ep.t_end if ep.t_end is not None else ep.t0 + ep.duration
            for lang in CLIENTS:
                lo, hi = bisect.bisect_left(done_at[lang], ep.t0), bisect.bisect_left(done_at[lang], t_end)
                rs = by_lang[lang][lo:hi]
                bad = [r for r in rs if r.status != "ok"]
                fails = [r.done - ep.t0 for r in bad]
                ep.notes += [f"{LABEL[lang]} +{r.done - ep.t0:.2f}s {r.op} {r.key} {r.status}: {r.why}"
                             for r in bad[-3:]]
                out[ep.kind][lang]["failed"].append(len(bad))
                oks = [r.done - ep.t0 for r in rs if r.status == "ok" and r.home == ep.node and r.node != ep.node
                       and r.done <= t_end]
                out[ep.kind][lang]["last_fail"].append(max(fails) if fails else 0.0)
                if oks:
                    out[ep.kind][lang]["first_ok"].append(min(oks))
        return out

    def kind_at(self, t: float) -> str:
        """The kind of the last episode injected at or before `t` ("none": before the first)."""
        starts = sorted((e.t0, e.kind) for e in self.episodes if e.t0 is not None)
        j = bisect.bisect_right([x for x, _ in starts], t) - 1
        return starts[j][1] if j >= 0 else "none"

    def replay_counts(self) -> Dict[str, Dict[str, Counter]]:
        """The replay-enabled requests per fault kind: lang -> kind -> Counter
        of ok / replayed / fail / refused. A request belongs to the last
        episode injected before it answered (its fault and the gap after
        it, so a fault's after-effects count against it); "none": before the
        first one."""
        out: Dict[str, Dict[str, Counter]] = {l: defaultdict(Counter) for l in RLANGS}
        for r in self.reqs:
            if r.lang not in RLANGS:
                continue
            kind = self.kind_at(r.done)
            out[r.lang][kind]["replayed" if r.status == "ok" and r.replays else r.status] += 1
        return out

    def applied_at(self, proc: str, rev: int) -> Optional[float]:
        """When `proc` first held feed revision `rev` or a later one."""
        for t, r in self._revs_sorted[proc]:
            if r >= rev:
                return t
        return None

    def feed_events(self) -> Dict[Tuple[str, str], Dict]:
        """Feed mode: classifies every record written (the fault it answers:
        the latest fault, for a monitor's `down`, or repair, for its `up`, of
        that node), sets it up as an event for the disagreement analysis, and
        gathers per kind the seconds fault -> written, fault -> applied in
        every process, written -> applied in every process."""
        self._revs_sorted = {p: sorted(self.revs[p]) for p in PROCS}
        marks = sorted(self.fault_marks)
        eps = [e for e in self.episodes if e.t0 is not None]
        out: Dict[Tuple[str, str], Dict] = {}
        for w in sorted(self.writes, key=lambda w: w.rev):
            if w.source.startswith("monitor"):
                parts = w.key.split("/")
                node = parts[1] if len(parts) == 3 else ""
                m = [t for t, n, what in marks if n == node and what == w.value and t <= w.t]
                w.t_fault = m[-1] if m else None
                ep = next((e for e in eps if w.t_fault is not None and e.node == node
                           and e.t0 - 0.01 <= w.t_fault <= (e.t_end if e.t_end is not None else 1e9) + 0.01), None)
                w.kind = f"{ep.kind} {w.value}" if ep else f"no fault injected: {w.value}"
                if ep is None:
                    w.t_fault = None
            src = "monitor" if w.source.startswith("monitor") else w.source
            at = {p: self.applied_at(p, w.rev) for p in PROCS}
            label = f"r{w.rev} {w.key} = {w.value}"
            self.label_t[label] = w.t
            self.label_kind[label] = w.kind
            self.deliveries[label] = {p: t for p, t in at.items() if t is not None}
            d = out.setdefault((w.kind, src), {"n": 0, "det": [], "all": [], "spread": [], "missing": 0,
                                               "by_proc": {p: [] for p in PROCS}})
            d["n"] += 1
            if any(t is None for t in at.values()):
                d["missing"] += 1
                continue
            last = max(at.values())  # type: ignore[type-var]
            d["spread"].append(max(0.0, last - w.t))
            for p in PROCS:
                d["by_proc"][p].append(max(0.0, at[p] - w.t))  # type: ignore[operator]
            if w.t_fault is not None:
                d["det"].append(w.t - w.t_fault)
                d["all"].append(last - w.t_fault)
        return out

    def crash_refusals(self) -> List[Dict]:
        """Per crash episode in strict mode: when the fleet was told (and
        when every process had applied it), and the strict transactions
        refused whose home is the crashed node, while it was down and after
        its restart until the next episode."""
        rows = []
        eps = [e for e in self.episodes if e.t0 is not None]
        for j, e in enumerate(eps):
            if e.kind != "crash" or e.mode != "strict":
                continue
            t_end = e.t_end if e.t_end is not None else e.t0 + e.duration
            nxt = eps[j + 1].t0 if j + 1 < len(eps) else 1e9
            det = every = None
            if FEED:
                states = [w for w in sorted(self.writes, key=lambda w: w.t) if w.key == f"node/{e.node}/state"]
                w = next((w for w in states if w.value == "down" and e.t0 <= w.t <= t_end), None)
                if w is not None:
                    det = w.t - e.t0
                    at = [self.applied_at(p, w.rev) for p in PROCS]
                    every = None if None in at else max(at) - e.t0  # type: ignore[type-var]
                    # The monitor sees the restarted node answer, and writes `up`, before the
                    # restart tool returns: a refusal after that write answers the `up` (the
                    # node changed within the settle), not the crash.
                    up = next((u.t for u in states if u.value == "up" and w.t < u.t <= t_end), None)
                    t_end = up if up is not None else t_end
            else:
                label = next((l for l in self.label_t if l.startswith(f"#{e.idx:02d}.0 ")), None)
                if label is not None:
                    det = self.label_t[label] - e.t0
                    got = self.deliveries.get(label, {})
                    every = max(got.values()) - e.t0 if len(got) == len(PROCS) else None
            mine = [t for t in self.txs if t.mode == "strict" and e.t0 <= t.t < nxt
                    and self.home("BRANCH", t.gtrid) == e.node]
            refused = [t for t in mine if any(b.status == "refused" for b in t.branches.values())]
            during = [t.t - e.t0 for t in refused if t.t < t_end]
            rows.append({"idx": e.idx, "node": e.node, "dur": t_end - e.t0, "det": det, "all": every,
                         "n": len(during), "last": max(during) if during else None,
                         "failed": sum(1 for t in mine if t.t < t_end
                                       and any(b.status == "failed" for b in t.branches.values())),
                         "after": sum(1 for t in refused if t.t >= t_end)})
        return rows

    def report(self, ntx: int) -> int:
        fo = self.failover()
        reordered, eps_differ, eps_planned = self.reorderings()
        feed_rows = self.feed_events() if FEED else {}
        crash_rows = self.crash_refusals()
        intervals, per_kind = self.disagreement()
        if eps_planned and not sum(reordered.values()) and not FEED:
            self.violation(f"{eps_planned} episodes were to reach some process out of order, "
                           "yet every process applied every node's FAN lines in publication order")
        strict = [t for t in self.txs if t.mode == "strict"]
        soft = [t for t in self.txs if t.mode == "soft"]

        def cnt(txs: List[Tx], f) -> int:  # type: ignore[no-untyped-def]
            return sum(1 for t in txs if f(t))

        reqs = Counter((r.lang, r.status) for r in self.reqs)
        ops = Counter(r.op for r in self.reqs)
        guard = cnt(strict, lambda t: any(b.code == "STRICT_AFFINITY" for b in t.branches.values()))
        # the mode of each stretch of time: an episode's mode holds until the next episode starts
        segs = [(e.start, self.episodes[j + 1].start if j + 1 < len(self.episodes) else self.seconds, e.mode)
                for j, e in enumerate(self.episodes)]
        soft_segs = [(a, b) for a, b, m in segs if m == "soft"]
        soft_time = sum(b - a for a, b in soft_segs)
        soft_disagree = sum(max(0.0, min(b, d) - max(a, c)) for a, b in intervals for c, d in soft_segs)
        soft_periods = sum(1 for a, b in intervals if any(c <= a < d for c, d in soft_segs))
        rows: List[Tuple[str, str]] = [
            ("seed / duration", f"{self.seed} / {self.seconds:.0f} s (run {self.elapsed:.0f} s)"),
            ("fault episodes", ", ".join(f"{k} {v}" for k, v in Counter(e.kind for e in self.episodes).items())),
            ("global transactions (strict / soft)", f"{len(strict)} / {len(soft)}"),
            ("committed / rolled back", f"{cnt(self.txs, lambda t: t.decision == 'commit')} / "
                                         f"{cnt(self.txs, lambda t: t.decision == 'rollback')}"),
            ("left in doubt by a fault -> resolved by recovery",
             f"{cnt(self.txs, lambda t: t.in_doubt)} tx; recovery passes {self.recovery_passes}: "
             f"{self.recovered['COMMIT']} committed, {self.recovered['ROLLBACK']} rolled back"),
            ("FAN lines reordered: pairs about one node applied against publication order "
             "(C / Java / Python / driver)",
             " / ".join(str(reordered[p]) for p in PROCS) + f" (total {sum(reordered.values())}; "
             f"{eps_differ} episodes reached the processes in different orders; each delay 0-{MAX_DELAY_S:g} s, "
             f"transaction.settle {SETTLE_S:g} s)") if not FEED else
            ("topology feed (SOAK_FEED=etcd): records written (operator / relay / monitor)",
             " / ".join(str(sum(1 for w in self.writes if w.source.startswith(k)))
                        for k in ("operator", "relay", "monitor"))
             + f"; monitors writing: {', '.join(sorted({w.source for w in self.writes if w.source.startswith('monitor')})) or 'none'}"
             f"; every process applied revision {self.final_rev}; etcd 3 members, 2 monitors (postgres probe every "
             f"{MON_INTERVAL_S:g} s, timeout {MON_PROBE_TIMEOUT_S:g} s, {MON_MISSES} misses); "
             f"transaction.settle {SETTLE_S:g} s; topology.feed_timeout "
             f"{os.environ.get('SOAK_FEED_TIMEOUT') or 'the default'}"),
            ("**strict: split transactions**", f"**{cnt(strict, lambda t: t.split)}**"),
            ("**strict: misrouted 2PC commands**", f"**{sum(t.misrouted for t in strict)}**"),
            ("strict: transactions with a branch refused (STRICT_AFFINITY: the process saw the node "
             "unusable or changed within transaction.settle)", str(guard)),
            ("soft: split transactions (spans)", f"{cnt(soft, lambda t: t.split)} of {len(soft)}"),
            ("soft: misrouted 2PC commands", str(sum(t.misrouted for t in soft))),
            ("soft: processes disagreed (fingerprints)", f"{soft_disagree:.1f} s of {soft_time:.0f} s in soft mode, "
                                                         f"{soft_periods} periods"),
            ("**prepared left after final recovery**", "**" + " / ".join(str(self.in_doubt_left[n]) for n in NODES)
             + f"** ({' / '.join(NODES)})"),
            ("**committed rows exactly once**", f"**{self.rows_expected - min(self.rows_bad, self.rows_expected)}"
                                                f" / {self.rows_expected}** (bad: {self.rows_bad})"),
            ("requests (branch, session, key, pinned; request: replay-enabled)",
             f"{len(self.reqs)}: " + ", ".join(f"{k.lower()} {v}" for k, v in sorted(ops.items()))),
        ]
        for lang in LANGS:
            rows.append((f"{LABEL[lang]}: requests ok / failed / refused",
                         f"{reqs[(lang, 'ok')]} / {reqs[(lang, 'fail')]} / {reqs[(lang, 'refused')]}"))
        replayed = Counter(r.lang for r in self.reqs if r.lang in RLANGS and r.status == "ok" and r.replays)
        for lang in RLANGS:
            rows.append((f"{LABEL[lang]}: requests ok / replayed / failed / refused",
                         f"{reqs[(lang, 'ok')] - replayed[lang]} / {replayed[lang]} / {reqs[(lang, 'fail')]} / "
                         f"{reqs[(lang, 'refused')]}"))
        if RLANGS:
            rows.append(("**replay-enabled requests committed exactly once**",
                         f"**{self.req_rows_expected - min(self.req_rows_bad, self.req_rows_expected)} / "
                         f"{self.req_rows_expected}** answered (bad: {self.req_rows_bad}; failed requests whose write "
                         f"committed, each OUTCOME_UNKNOWN: {self.req_committed_failed})"))
        rows += [
            ("**crashes, hangs, PANIC**", f"**{sum(1 for p in self.problems if 'exited' in p or 'hang' in p)}, "
                                          f"{sum(1 for p in self.problems if 'PANIC' in p)}**"),
            (f"**registries back to 0 ({' / '.join(LABEL[p] for p in PROCS + RLANGS)})**",
             "**" + " / ".join(self.registries.get(p, "?") for p in PROCS + RLANGS) + "**"),
            (f"**RSS growth after warm-up ({' / '.join(LABEL[l] for l in CLIENTS)})**",
             "**" + " / ".join("-" if self.rss_growth.get(l) is None else f"{self.rss_growth[l]:+.1f} MB"
                               for l in CLIENTS) + "** (limit 20 MB)"),
            ("fingerprint disagreement (total)", f"{sum(b - a for a, b in intervals):.1f} s in {len(intervals)} "
                                                 f"periods; final fingerprint {sorted(set(self.final_fps.values()))}"),
            ("event delivery lag (queued behind a busy client) p50 / max",
             f"{fmt_s(pct(self.delivery_lag, 50))} / {fmt_s(pct(self.delivery_lag, 100))} s"
             if not FEED else "- (feed mode: each process's subscriber thread applies the records)"),
        ]
        lines = [f"Chaos soak: seed {self.seed}, {self.seconds:.0f} s, "
                 f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                 "| | |", "|---|---|"]
        lines += [f"| {a} | {b} |" for a, b in rows]
        lines += ["", "Failover as users feel it: seconds from the injected fault to the last failed request "
                      "and to the first success elsewhere of a request whose home node was hit "
                      "(p50 / p99 / max over the episodes; failures counted until the heal, restart or FAN up; "
                      "0.00 = no request failed; a refusal counts as a failure; each client is one "
                      "thread, so a request stuck on a silent node delays its next ones)", "",
                  "| fault | language | episodes | failed or refused requests | last failed request | "
                  "first success elsewhere |",
                  "|---|---|--:|--:|---|---|"]
        for kind in FAILOVER_KINDS:
            for lang in CLIENTS:
                d = fo[kind][lang]
                n = len(d["last_fail"])
                lf = " / ".join(fmt_s(pct(d["last_fail"], p)) for p in (50, 99, 100))
                fs = " / ".join(fmt_s(pct(d["first_ok"], p)) for p in (50, 99, 100))
                lines.append(f"| {kind} | {LABEL[lang]} | {n} | {sum(d['failed'])} | {lf} | {fs} |")
        if RLANGS:
            rc = self.replay_counts()
            st = REPLAY_SETTINGS
            lines += ["", "Replay-enabled clients: requests per fault kind (each request counted against the last "
                          "episode injected before it answered: the fault and the gap after it; \"none\": the "
                          "warm-up). ok: answered without a replay; replayed: answered after a replay on another node "
                          "(or found committed after a lost COMMIT answer); failed: the original error with its typed "
                          "cause (counts per cause); refused: the core routed nowhere. Timeouts: statement and COMMIT "
                          f"deadline (call_timeout) {st['RACAFF_REPLAY_CALL_TIMEOUT']} s, pool wait "
                          f"{st['RACAFF_REPLAY_POOL_TIMEOUT']} s, heartbeat every {st['RACAFF_REPLAY_HEARTBEAT']} s "
                          f"(probe timeout {st['RACAFF_REPLAY_PROBE_TIMEOUT']} s, 3 misses), connect_timeout "
                          f"{st['RACAFF_REPLAY_CONNECT_TIMEOUT']} s, TCP keepalives idle "
                          f"{st['RACAFF_REPLAY_KEEPALIVES_IDLE']} s / interval {st['RACAFF_REPLAY_KEEPALIVES_INTERVAL']}"
                          f" s / count {st['RACAFF_REPLAY_KEEPALIVES_COUNT']}, tcp_user_timeout "
                          f"{st['RACAFF_REPLAY_TCP_USER_TIMEOUT_MS']} ms", "",
                      "| fault | client | ok | replayed | failed | refused | failed by cause |",
                      "|---|---|--:|--:|--:|--:|---|"]
            for lang in RLANGS:
                for kind in ["none"] + KINDS:
                    c = rc[lang].get(kind, Counter())
                    causes = Counter(r.refusal for r in self.reqs if r.lang == lang and r.status == "fail"
                                     and self.kind_at(r.done) == kind)
                    lines.append(f"| {kind} | {LABEL[lang]} | {c['ok']} | {c['replayed']} | {c['fail']} | "
                                 f"{c['refused']} | {', '.join(f'{k} {v}' for k, v in sorted(causes.items())) or '-'} |")
        lines += ["", "Fingerprint disagreement after each injected event (seconds until the four processes' "
                      "topology fingerprints agreed again; p50 / p99 / max)", "",
                  "| event | count | p50 | p99 | max |", "|---|--:|--:|--:|--:|"]
        for k in sorted(per_kind):
            v = per_kind[k]
            lines.append(f"| {k} | {len(v)} | {fmt_s(pct(v, 50))} | {fmt_s(pct(v, 99))} | {fmt_s(pct(v, 100))} |")
        if FEED:
            lines += ["", "Topology feed: per kind of record, seconds from the fault (or the operator's command) "
                          "to the record's write and to the last of the four processes applying it, and from the "
                          "write to that last application (p50 / p99 / max). Each client notes its feed revision "
                          f"every {FEEDLOG_MS} ms on a thread of its own (the driver likewise); a process applied "
                          "a record when its revision first reached the record's.", "",
                      "| record | source | count | fault -> written | fault -> applied in every process | "
                      "written -> applied in every process |", "|---|---|--:|---|---|---|"]
            for (kind, src), d in sorted(feed_rows.items()):
                lines.append(f"| {kind} | {src} | {d['n']} | " + " | ".join(
                    " / ".join(fmt_s(pct(d[c], q)) for q in (50, 99, 100)) for c in ("det", "all", "spread")) + " |")
            per_proc = {p: [x for (k, _), d in feed_rows.items() for x in d["by_proc"][p]] for p in PROCS}
            lines += ["", "Written -> applied, per process (p50 / p99 / max, every record): " + "; ".join(
                f"{LABEL[p]} {' / '.join(fmt_s(pct(per_proc[p], q)) for q in (50, 99, 100))}" for p in PROCS)]
        lines += ["", "Strict refusals per crash episode in strict mode (gtrids whose home is the crashed node, "
                      "refused by the driver or a client): the fleet learns of the crash when "
                      + ("the monitor writes `down`" if FEED else "the driver publishes FAN down (0.2 s after "
                                                                  "the kill; each process gets it 0-3.5 s later)")
                      + f"; transaction.settle {SETTLE_S:g} s", "",
                  "| episode | node | down for | published | applied everywhere | refused while down | "
                  "last refusal | last refusal - published | failed while down | refused after restart |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in crash_rows:
            lines.append(f"| #{r['idx']:02d} | {r['node']} | {r['dur']:.1f} | {fmt_s(r['det'])} | "
                         f"{fmt_s(r['all'])} | {r['n']} | {fmt_s(r['last'])} | "
                         f"{fmt_s(None if r['last'] is None or r['det'] is None else r['last'] - r['det'])} | "
                         f"{r['failed']} | {r['after']} |")
        if not crash_rows:
            lines.append("| (no crash in strict mode) | | | | | | | | | |")
        verdict = "all invariants held" if not self.problems else f"{len(self.problems)} VIOLATIONS"
        lines += ["", f"Result: {verdict}. Chart: target/soak/soak.svg; details: target/soak/results.json; "
                      "the TM log: target/soak/tm-log.jsonl."]
        table = "\n".join(lines) + "\n"
        (OUT / "table.md").write_text(table)
        print()
        print(table)
        (OUT / "soak.svg").write_text(render_svg(self, intervals))
        (OUT / "results.json").write_text(json.dumps({
            "seed": self.seed, "seconds": self.seconds, "elapsed": round(self.elapsed, 1), "problems": self.problems,
            "notes": self.notes[:200],
            "episodes": [vars(e) for e in self.episodes],
            "disagreement_intervals": intervals,
            "disagreement_by_event": per_kind,
            "failover": fo,
            "replay_settings": REPLAY_SETTINGS if RLANGS else None,
            # every replay-enabled request: lang, key, home, sent, answered, status, node, replays, cause
            "replay_requests": [[r.lang, r.key, r.home, round(r.sent, 3), round(r.done, 3), r.status, r.node,
                                 r.replays, r.why] for r in self.reqs if r.lang in RLANGS],
            "rss_growth_mb": self.rss_growth,
            "reorderings": {"per_process": reordered, "episodes_in_different_orders": eps_differ,
                            "episodes_planned_to_reorder": eps_planned, "max_delay_s": MAX_DELAY_S,
                            "settle_s": SETTLE_S},
            "applied_order": self.applied,
            "feed": {"url": self.feed_url, "writes": [vars(w) for w in self.writes], "by_kind": feed_rows and
                     {f"{k} ({s})": v for (k, s), v in feed_rows.items()}, "final_revision": self.final_rev,
                     "settle_s": SETTLE_S} if FEED else None,
            "crash_refusals": crash_rows,
            "transactions": [{"gtrid": t.gtrid, "t": round(t.t, 3), "mode": t.mode, "tm_node": t.tm_node, "decision": t.decision,
                              "split": t.split, "misrouted": t.misrouted,
                              "branches": {l: vars(b) for l, b in t.branches.items()}} for t in self.txs],
        }, indent=1, default=str))
        if self.problems:
            print(f"SOAK FAILED (seed {self.seed}; replay: {replay(self.seed, self.seconds)}):")
            for p in self.problems[:30]:
                print(f"  - {p}")
            return 1
        print(f"OK: soak of {self.seconds:.0f} s, seed {self.seed}: every invariant held")
        return 0

    def cleanup(self) -> None:
        self.stop.set()
        for w in self.workers.values():
            if w.p.poll() is None:
                w.p.kill()
                try:
                    w.p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            w.log.close()
        self.close_conns()
        if self.tmlog is not None:
            self.tmlog.close()
        for p in self.monitors:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for log in self.mon_logs:
            log.close()
        if self.started_etcd:
            subprocess.run([ETCDNODES, "destroy"], capture_output=True, timeout=120)
        if self.started_faults:
            subprocess.run([FAULTS, "stop"], capture_output=True, timeout=60)
        for i in sorted(self.killed):
            subprocess.run([PGNODES, "restart", str(i)], capture_output=True, timeout=120)
        if self.started_nodes:
            subprocess.run([PGNODES, "stop"], capture_output=True, timeout=120)


# ---- the chart (hand-written SVG) ---------------------------------------------------------------

EP_COLORS = {"crash": "#cc3311", "blackhole": "#332288", "drain": "#ee7733", "latency": "#999933",
             "reset": "#aa4499", "rlb": "#44aa99", "flap": "#882255"}
LANG_COLORS = {"c": "#4477aa", "java": "#ee6677", "py": "#228833", "tm": "#555555", "pyr": "#117733",
               "javar": "#aa3377"}


def render_svg(s: Soak, intervals: List[Tuple[float, float]]) -> str:
    """Over time: the fault episodes; each process's topology fingerprint (one
    colour per fingerprint) and when they disagreed; per language the failed
    requests per second; each client's resident memory."""
    W, left, right = 1000, 90, 20
    pw = W - left - right
    T = max(s.elapsed, 1.0)
    X = lambda t: left + pw * max(0.0, min(t, T)) / T  # noqa: E731
    o: List[str] = []
    y = 44

    def heading(text: str) -> None:
        nonlocal y
        o.append(f'<text x="{left}" y="{y}" font-weight="bold">{text}</text>')
        y += 8

    def row_label(dy: float, text: str, size: int = 10) -> None:
        """`text` right-aligned in the margin, `dy` below the row's top."""
        o.append(f'<text x="{left - 4}" y="{y + dy}" text-anchor="end" font-size="{size}">{text}</text>')

    fps_all = sorted({fp for p in PROCS for _, fp in s.fps[p]})
    palette = ["#4477aa", "#66ccee", "#228833", "#ccbb44", "#ee6677", "#aa3377", "#bbbbbb", "#332288",
               "#117733", "#882255", "#44aa99", "#999933", "#dd7700", "#000000"]
    fpc = {fp: palette[i % len(palette)] for i, fp in enumerate(fps_all)}
    # episodes
    heading("fault episodes ([strict] / [soft] transaction mode)")
    for e in s.episodes:
        if e.t0 is None:
            continue
        x0, x1 = X(e.t0), X(e.t_end if e.t_end is not None else e.t0 + e.duration)
        o.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="22" fill="{EP_COLORS[e.kind]}" '
                 f'fill-opacity="{0.85 if e.mode == "strict" else 0.45}"><title>{esc(e.describe())}</title></rect>')
        o.append(f'<text x="{x0 + 2:.1f}" y="{y + 14}" font-size="9" fill="#fff">{e.kind[:5]} {e.node[-1]}</text>')
    y += 36
    # fingerprints
    heading("topology fingerprint per process (colour = fingerprint); red: the processes disagree")
    for p in PROCS:
        obs = s.fps[p]
        for j, (t, fp) in enumerate(obs):
            t1 = obs[j + 1][0] if j + 1 < len(obs) else T
            o.append(f'<rect x="{X(t):.1f}" y="{y}" width="{max(X(t1) - X(t), 0.3):.1f}" height="12" '
                     f'fill="{fpc[fp]}"/>')
        row_label(10, LABEL[p])
        y += 14
    for a, b in intervals:
        o.append(f'<rect x="{X(a):.1f}" y="{y}" width="{max(X(b) - X(a), 0.8):.1f}" height="10" fill="#cc0000">'
                 f'<title>disagree {a:.2f}-{b:.2f}s</title></rect>')
    row_label(9, "disagree")
    y += 30
    # failures per second per language
    heading("requests per second per language: ok (light) and failed or refused (dark)")
    nb = int(T) + 1
    for lang in CLIENTS:
        okc, bad = [0] * nb, [0] * nb
        for r in s.reqs:
            if r.lang == lang:
                b = min(nb - 1, int(r.done))
                (okc if r.status == "ok" else bad)[b] += 1
        h = 34
        mx = max(max(okc[i] + bad[i] for i in range(nb)), 1)
        for i in range(nb):
            x = X(i)
            w = max(pw / T - 0.3, 0.3)
            ho, hb = h * okc[i] / mx, h * bad[i] / mx
            if ho:
                o.append(f'<rect x="{x:.1f}" y="{y + h - ho - hb:.1f}" width="{w:.1f}" height="{ho:.1f}" '
                         f'fill="{LANG_COLORS[lang]}" fill-opacity="0.35"/>')
            if hb:
                o.append(f'<rect x="{x:.1f}" y="{y + h - hb:.1f}" width="{w:.1f}" height="{hb:.1f}" '
                         f'fill="{LANG_COLORS[lang]}"/>')
        row_label(h / 2 + 4, LABEL[lang])
        o.append(f'<line x1="{left}" x2="{left + pw}" y1="{y + h}" y2="{y + h}" stroke="#ccc"/>')
        y += h + 6
    y += 18
    # RSS
    heading("resident memory per client (MB)")
    h = 80
    vals = [v / 2 ** 20 for l in CLIENTS for _, v in s.rss_samples[l]]
    lo, hi = (min(vals), max(vals)) if vals else (0, 1)
    hi = max(hi, lo + 1)
    for lang in CLIENTS:
        pts = " ".join(f"{X(t):.1f},{y + h - h * (v / 2 ** 20 - lo) / (hi - lo):.1f}" for t, v in s.rss_samples[lang])
        if pts:
            o.append(f'<polyline fill="none" stroke="{LANG_COLORS[lang]}" stroke-width="1.5" points="{pts}"/>')
    row_label(8, f"{hi:.0f}", 9)
    row_label(h, f"{lo:.0f}", 9)
    lx = left
    for lang in CLIENTS:
        o.append(f'<rect x="{lx}" y="{y + h + 8}" width="10" height="10" fill="{LANG_COLORS[lang]}"/>'
                 f'<text x="{lx + 14}" y="{y + h + 17}" font-size="10">{LABEL[lang]}</text>')
        lx += 110
    y += h + 30
    for t in range(0, int(T) + 1, max(10, int(T / 10) // 10 * 10 or 10)):
        o.append(f'<text x="{X(t):.1f}" y="{y}" text-anchor="middle" font-size="9" fill="#555">{t}s</text>')
    H = y + 12
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
            'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{H}" fill="#fff"/>',
            f'<text x="{left}" y="20" font-size="14" font-weight="bold">racaffinity chaos soak: seed {s.seed}, '
            f'{s.seconds:.0f} s, C + Java + Python clients and the driver</text>']
    lx = left
    for k, c in EP_COLORS.items():
        head.append(f'<rect x="{lx}" y="27" width="10" height="10" fill="{c}"/>'
                    f'<text x="{lx + 13}" y="36" font-size="10">{k}</text>')
        lx += 85
    return "\n".join(head + o + ["</svg>"]) + "\n"


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "600"))
    seed = int(os.environ.get("SOAK_SEED") or (int(time.time() * 1000) % 1_000_000))
    if seconds < 60:
        print("SOAK_SECONDS must be at least 60", file=sys.stderr)
        return 2
    if FEED not in ("", "etcd"):
        print(f"SOAK_FEED must be empty or 'etcd' (got {FEED!r})", file=sys.stderr)
        return 2
    if not FEED and MAX_DELAY_S >= SETTLE_S:
        print(f"SOAK_SETTLE must exceed the delivery delays ({MAX_DELAY_S:g} s) without a feed", file=sys.stderr)
        return 2
    if FEED:
        # the soak's etcd is its own: another suite's cluster keeps its data root and ports
        # (make clean-nodes finds /tmp/racaffinity-etcd-*-<checkout hash>)
        os.environ.setdefault("RACAFF_ETCD_DIR", "/tmp/racaffinity-etcd-soak-"
                              + hashlib.sha1(str(REPO).encode()).hexdigest()[:8])
        os.environ.setdefault("RACAFF_ETCD_BASE_PORT", "24390")
    soak = Soak(seconds, seed)

    def too_long(*_: object) -> None:
        raise SetupError(f"the soak took over {seconds + 600:.0f} s (something hangs)")

    def terminated(signum: int, _frame: object) -> None:
        raise SetupError(f"terminated by signal {signum}")

    signal.signal(signal.SIGALRM, too_long)
    signal.signal(signal.SIGTERM, terminated)
    signal.alarm(int(seconds) + 600)
    try:
        return soak.run()
    except Violation as e:
        soak.violation(str(e))
        print(f"SOAK FAILED (seed {seed}; replay: {replay(seed, seconds)}):")
        for p in soak.problems[:30]:
            print(f"  - {p}")
        return 1
    except (SetupError, psycopg.OperationalError) as e:
        print(f"demo/soak.py: {e} (seed {seed})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("demo/soak.py: interrupted", file=sys.stderr)
        return 2
    finally:
        signal.alarm(0)
        soak.cleanup()


if __name__ == "__main__":
    sys.exit(main())
