"""The failure matrix of issue 11 ("What must hold, measured"), Python half:
`racaffinity.tpc` (global_transaction / recover_all over NodePools) under
each 2PC phase x each fault x soft and strict transaction affinity x both
database models, plus application errors. Writes
target/failure-matrix/python.json (tools/failure_matrix.py prints it) and
fails on any cell that does not hold unless it is in ALLOWED below.

The transaction of every cell has two branches on the gtrid's node X, as two
XA resources of one transaction would (branch 2 runs while branch 1 is
still active):

    start b1 -> b1 SQL -> start b2 -> b2 SQL -> end b2 (its PREPARE) -> end b1 (PREPARE) -> commit / rollback

psycopg's `tpc_*` has no separate xa_end: a branch's end is its scope exit,
which sends its PREPARE. So the phases are, each fault injected right before
that call reaches the node:
- start:    b1's start (the first branch connection: `tpc_begin` sends BEGIN);
- work:     b2's SQL (b1 active on X);
- end:      b2's end (its PREPARE), b1 still active;
- prepare:  b1's PREPARE, the last one (b2 already prepared);
- commit / rollback: phase two over both prepared branches;
- recover:  recover_all over two branches a crashed TM left prepared on X.

The fault stays in place until the transaction attempt is over; then every
node is brought back (heal; restart for a crash) and recover_all runs with
the TM's decision log (commit once every branch was prepared, else
rollback). The application retries a branch once after a connection-class
error (OperationalError, PoolTimeout) at its start or in its own SQL, as a
TM re-enlisting a resource would; with `health.eject_after_failures = 1`
the node is Down after one failure, so in soft mode a retried branch 2
spans to another node (counted, WARNING), in strict mode it is refused.

Faults: crash = `pgnodes kill I` + `restart I` (independent nodes); reset,
blackhole, latency, refused = `tests/cluster/faults reset|blackhole|latency|
refuse I`. In the RAC model (three Toxiproxy instances in front of ONE
server, `recovery.scope = database`) killing the server would kill every
instance, so a crash of one instance is its proxy going away (refuse +
reset). The four lanes (model x mode) run at the same time, each on a
Toxiproxy server of its own (ports node base + 110, 120, 130, 140); the
RAC lanes use server 1 only, the independent lanes fault instance 2 (soft)
and 3 (strict), and a crash cell of theirs runs while no other cell of the
independent model does (it kills a server both use).

Application errors (each must count no failure and eject no node, with
`eject_after_failures = 1`): constraint (an immediate unique violation in
b2's SQL), trigger (a deferred constraint trigger raising at b1's PREPARE),
serialization (40001 in b2's SQL under REPEATABLE READ after a concurrent
update; retried once, then committed), password (one user the server
refuses at connect: pgnodes runs `trust` authentication, so a wrong
password cannot fail there; the user is a role that may not log in, the
same FATAL class 28).

This half's own cells (tools/failure_matrix.py OWN_CELLS, issue 27): stall
(prepare) stops b1's backend with SIGSTOP right before its PREPARE and
resumes it once the attempt is over, so the PREPARE may run after the
library gave up on it (a rollback must not conclude "not prepared" while
that backend lives); resolver (recover) has another party commit one of the
two scanned xids before recover_all's own COMMIT PREPARED reaches it (it
must be settled, reported in `resolved_elsewhere`, nothing left on record).

Checks after each cell, by SQL on the servers (never through the proxies)
and on the library's counters: split commits, spans counted and logged,
prepared xacts left after recovery, rows, "rolled back"/"committed"/
"completed" answers the node contradicts after it came back (the Python
analogue of XAER_NOTA while silent), leaks (registry `live`, in-flight
leases, `pools.in_doubt`, connections not returned) and failures counted
against the failed node operations (one per branch whose own call met the
fault, one per recovery scan that did)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import psycopg
import psycopg_pool
import pytest

import racaffinity as ra
from racaffinity._deadline import bounded
from racaffinity.pools import NodePools
from racaffinity.tpc import InDoubtError, transaction_key

from conftest import NAMES, REPO, prepare_directly, prepared_xacts, proxy_dsns, tpc_rows
from faultproxy import FaultProxy
from faults import gtrid_on, in_flight, live, node_metrics, within

OUT = REPO / "target" / "failure-matrix" / "python.json"
FAULTS_TOOL = REPO / "tests" / "cluster" / "faults"
MODELS = ["node", "database"]
MODES = ["soft", "strict"]
PHASES = ["start", "work", "end", "prepare", "commit", "rollback", "recover"]
FAULTS = ["crash", "reset", "blackhole", "latency", "refused"]
# application errors: (fault, phase where it happens)
APP_ERRORS = [("constraint", "work"), ("trigger", "prepare"), ("serialization", "work"), ("password", "start")]
# this half's own cells (tools/failure_matrix.py OWN_CELLS), (fault, phase):
# stall = b1's backend stopped (SIGSTOP) right before its PREPARE, resumed
# (SIGCONT) once the attempt is over, so that PREPARE may run late;
# resolver = another party commits a scanned xid before recover_all's own
# COMMIT PREPARED reaches it
OWN = [("stall", "prepare"), ("resolver", "recover")]

T = 0.75  # every library call to a node (and the pools' getconn)
T_RECOVER = 1.0  # recover_all's per-call timeout
LATENCY_MS = 40
CELL_DEADLINE = 45.0  # a cell that has not finished by then is reported, not waited for

#: Cells that may not hold, each with the reason (keep empty unless a cell
#: truly cannot hold; every entry is reported). Key: (model, mode, phase, fault).
ALLOWED: Dict[Tuple[str, str, str, str], str] = {}

NOLOGIN_ROLE = "mx_nologin"


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (a stall cell's SIGSTOP took effect)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def retryable(e: BaseException) -> bool:
    """The application's retry rule: a connection-class error."""
    return isinstance(e, (psycopg.OperationalError, psycopg_pool.PoolTimeout))


# ---------------------------------------------------------------------------
# the two lanes (database models), each with its own Toxiproxy server


class CrashLock:
    """Crash cells of the independent model kill a server the other node
    lane also uses: they run alone (exclusive, and first in line once
    waiting), other cells side by side."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.shared = 0
        self.exclusive = False
        self.waiting = 0

    @contextlib.contextmanager
    def hold(self, exclusive: bool) -> Iterator[None]:
        with self.cond:
            if exclusive:
                self.waiting += 1
                while self.exclusive or self.shared:
                    self.cond.wait()
                self.waiting -= 1
                self.exclusive = True
            else:
                while self.exclusive or self.waiting:
                    self.cond.wait()
                self.shared += 1
        try:
            yield
        finally:
            with self.cond:
                if exclusive:
                    self.exclusive = False
                else:
                    self.shared -= 1
                self.cond.notify_all()


@dataclass
class Lane:
    """One model and mode: its own Toxiproxy server and three instances."""

    model: str
    mode: str
    proxy_base: int
    pg: Any
    crash_lock: CrashLock
    env: Dict[str, str] = field(default_factory=dict)
    dsn: Dict[str, str] = field(default_factory=dict)

    @property
    def x(self) -> str:
        """The instance every cell's gtrid is placed on and faulted: in the
        independent model each node lane crashes its own server (2 or 3),
        the RAC lanes use server 1 only."""
        if self.model == "database":
            return "RAC1"
        return "RAC2" if self.mode == "soft" else "RAC3"

    @property
    def xi(self) -> int:
        return NAMES.index(self.x) + 1

    def server_dsn(self, name: str) -> str:
        """The server behind instance `name` (direct, not through a proxy)."""
        return self.pg.dsn[name] if self.model == "node" else self.pg.dsn["RAC1"]

    def server_dsn_name(self, name: str) -> str:
        """The server (by node name) behind instance `name`."""
        return name if self.model == "node" else "RAC1"

    def servers(self) -> Dict[str, str]:
        return dict(self.pg.dsn) if self.model == "node" else {"RAC1": self.pg.dsn["RAC1"]}

    def faults(self, *args: str) -> str:
        # sys.executable: the script's `env python3` may be a slow shim (pyenv)
        done = subprocess.run([sys.executable, str(FAULTS_TOOL), *args], env=self.env, check=True, timeout=900,
                              capture_output=True, text=True)
        return done.stdout

    def fault_cmd(self, *args: str) -> None:
        """`faults CMD I ...` run in this process: the same code as the
        command line (tests/cluster/faults loaded as a module, this lane's
        configuration), without a Python start-up per call (about 0.3 s of
        CPU, which four lanes on two cores feel)."""
        mod = self._tool
        mod.COMMANDS[args[0]](self._cfg, mod.Api(self._cfg), list(args[1:]))

    def start(self) -> None:
        self.env = dict(os.environ, RACAFF_PROXY_BASE_PORT=str(self.proxy_base),
                        RACAFF_TOXIPROXY_PORT=str(self.proxy_base - 1))
        if os.environ.get("RACAFF_FAULTS_DIR"):
            # A state dir (its pid file) per lane: in one, each lane's start
            # overwrote the last one's pid, so `faults stop` left three
            # servers running and the next run's start failed on them.
            self.env["RACAFF_FAULTS_DIR"] = f"{os.environ['RACAFF_FAULTS_DIR']}-lane{self.proxy_base}"
        self.faults("start", "3", *(["--rac"] if self.model == "database" else []))
        self._tool = faults_tool()
        saved = dict(os.environ)
        try:  # Config reads the environment (the lanes start one by one)
            os.environ.update(self.env)
            self._cfg = self._tool.Config()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.dsn = proxy_dsns(self.faults("env"))

    def stop(self) -> None:
        try:
            self.faults("stop")
        except Exception:
            pass

    # -- faults on instance X ------------------------------------------------------

    def inject(self, fault: str) -> None:
        i = str(self.xi)
        if fault == "crash":
            if self.model == "node":
                self.pg.kill(self.xi)
            else:  # one instance of one database: its proxy goes away
                self.fault_cmd("refuse", i)
                self.fault_cmd("reset", i)
        elif fault == "refused":
            self.fault_cmd("refuse", i)
        elif fault == "latency":
            self.fault_cmd("latency", i, str(LATENCY_MS))
        else:
            self.fault_cmd(fault, i)

    def heal(self, fault: str) -> None:
        if fault == "crash" and self.model == "node":
            self.pg.restart(self.xi)
        else:
            self.fault_cmd("heal", str(self.xi))


_TOOL: Any = None


def faults_tool() -> Any:
    """tests/cluster/faults as a module (it has no .py suffix)."""
    global _TOOL
    if _TOOL is None:
        import importlib.machinery
        import importlib.util

        loader = importlib.machinery.SourceFileLoader("racaff_faults_tool", str(FAULTS_TOOL))
        spec = importlib.util.spec_from_loader(loader.name, loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        _TOOL = mod
    return _TOOL


# ---------------------------------------------------------------------------
# SQL truth


def sql(dsn: str, query: str, params: Any = None) -> List[tuple]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def prepared(lane: Lane, g: str) -> Dict[str, Set[str]]:
    """server -> gids of `g` in pg_prepared_xacts (psycopg's XA gid text)."""
    out = {}
    for name, dsn in lane.servers().items():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            out[name] = {str(x) for x in conn.tpc_recover() if x.gtrid == g}
    return out


def rows(lane: Lane, g: str) -> List[Tuple[str, str]]:
    """(server, branch) of every committed row of `g`, duplicates kept."""
    out = []
    for name, dsn in lane.servers().items():
        out += [(name, r[0]) for r in sql(dsn, "SELECT branch FROM mx WHERE gtrid = %s", (g,))]
    return sorted(out)


SETUP = """
CREATE TABLE IF NOT EXISTS mx (gtrid text, branch text);
CREATE TABLE IF NOT EXISTS mx_uniq (k int PRIMARY KEY);
INSERT INTO mx_uniq VALUES (1) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS mx_ser (k int PRIMARY KEY, v int);
INSERT INTO mx_ser VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS mx_deferred (k int);
CREATE OR REPLACE FUNCTION mx_refuse() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'refused at commit time'; END $$;
DROP TRIGGER IF EXISTS mx_refuse ON mx_deferred;
CREATE CONSTRAINT TRIGGER mx_refuse AFTER INSERT ON mx_deferred
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION mx_refuse();
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mx_nologin') THEN
        CREATE ROLE mx_nologin NOLOGIN;
    END IF;
END $$;
"""


# ---------------------------------------------------------------------------
# one cell


class Spans(logging.Handler):
    """WARNING records of racaffinity (span warnings), kept for the checks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: List[str] = []
        self.lock_ = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.lock_:
            self.records.append(record.getMessage())

    def logged(self, g: str) -> bool:
        with self.lock_:
            return any(repr(g) in m and "spans" in m for m in self.records)


def failures_expected(model: str, mode: str, phase: str, fault: str) -> int:
    """Failed node operations of the cell: one per branch whose own call met
    the fault, one per recovery scan that did."""
    if fault in ("latency", "resolver") or fault in dict(APP_ERRORS):
        return 0
    if fault == "stall":
        return 1  # b1's PREPARE timed out; its backend is ended, not failed
    if phase == "start":
        return 1  # b1's start; its retry runs on another node
    if phase == "recover":
        return 1  # the scan of X (RAC: X is Up, so tried first)
    # work: b2's SQL, then b1's own PREPARE (soft: b2 re-placed elsewhere)
    #       or b1's own ROLLBACK (strict: b2's retry refused);
    # end: b2's PREPARE, b1's ROLLBACK; prepare: b1's PREPARE, b2's
    # ROLLBACK PREPARED; commit / rollback: both branches' phase two.
    return 2


@dataclass
class Cell:
    model: str
    mode: str
    phase: str
    fault: str
    holds: bool = False
    checks: Dict[str, int] = field(default_factory=dict)
    outcome: str = ""
    seconds: float = 0.0
    note: str = ""
    allowed: bool = False

    def as_json(self) -> Dict[str, Any]:
        d = {"model": self.model, "mode": self.mode, "phase": self.phase, "fault": self.fault,
             "holds": self.holds, "checks": self.checks, "outcome": self.outcome,
             "seconds": round(self.seconds, 2), "note": self.note}
        if self.allowed:
            d["allowed"] = True
        return d


class CellRun:
    def __init__(self, lane: Lane, cell: Cell, run_id: str, spans: Spans) -> None:
        self.lane = lane
        self.cell = cell
        self.spans = spans
        self.notes: List[str] = []
        m = lane.model[0]
        self.prefix = f"mx{run_id}{m}{cell.mode[:2]}-{cell.phase[:4]}-{cell.fault[:5]}"
        self.injected = False
        self.stalled: Optional[int] = None  # the backend pid a stall cell stopped
        self.decision: Optional[str] = None
        self.expected_rows: Set[Tuple[str, str]] = set()
        self.gets = 0
        self.puts = 0
        self.nota = 0

    # -- setup --------------------------------------------------------------------

    def config(self) -> str:
        return "\n".join([
            "nodes = " + ",".join(NAMES),
            f"transaction.strict = {'true' if self.cell.mode == 'strict' else 'false'}",
            f"recovery.scope = {self.lane.model}",
            "health.eject_after_failures = 1",
        ])

    def instrument(self, pools: NodePools) -> None:
        """Counts connections taken from and returned to each pool."""
        lock = threading.Lock()
        for _node, pool in pools.items():
            get, put = pool.getconn, pool.putconn

            def getconn(*a: Any, _get: Callable = get, **k: Any) -> Any:
                conn = _get(*a, **k)
                with lock:
                    self.gets += 1
                return conn

            def putconn(conn: Any, _put: Callable = put) -> None:
                with lock:
                    self.puts += 1
                _put(conn)

            pool.getconn, pool.putconn = getconn, putconn

    def hook(self, phase: str, conn: Optional[psycopg.Connection] = None) -> None:
        if phase == self.cell.phase and not self.injected and self.cell.fault == "stall" and conn is not None:
            self.injected = True
            self.stalled = conn.info.backend_pid
            os.kill(self.stalled, signal.SIGSTOP)
            deadline = time.monotonic() + 5
            while not _stopped(self.stalled) and time.monotonic() < deadline:
                time.sleep(0.005)
            return
        if phase == self.cell.phase and not self.injected and self.cell.fault in FAULTS:
            self.injected = True
            self.lane.inject(self.cell.fault)
            if self.cell.fault == "crash" and self.lane.model == "database":
                self.notes.append("crash = instance proxy refused + reset")

    def heal(self) -> None:
        if self.stalled is not None:
            try:
                os.kill(self.stalled, signal.SIGCONT)
            except ProcessLookupError:
                pass  # ended meanwhile
            self.stalled = None
            self.injected = False
        if self.injected:
            self.lane.heal(self.cell.fault)
            self.injected = False

    # -- the transaction ------------------------------------------------------------

    def run(self) -> None:
        cell, lane = self.cell, self.lane
        kwargs: Dict[str, Any] = {"application_name": "mx"}
        if cell.fault == "password":
            kwargs["user"] = NOLOGIN_ROLE
        self.cluster = ra.Cluster(self.config())
        self.rec_pools: Optional[NodePools] = None
        try:
            self.pools = NodePools(self.cluster, lane.dsn, min_size=1, max_size=4, timeout=T,
                                   connect_kwargs=kwargs)
            if cell.fault == "password":
                # the TM recovers with its own credentials
                self.rec_pools = NodePools(self.cluster, lane.dsn, min_size=0, max_size=1, timeout=T)
            try:
                self.instrument(self.pools)
                if cell.fault != "password":
                    for _n, pool in self.pools.items():
                        pool.wait(timeout=10)
                self.g = self.gtrid()
                try:
                    if cell.phase == "recover":
                        self.recover_cell()
                    else:
                        self.transaction()
                finally:
                    self.heal()
                self.verify()
            finally:
                self.pools.close(timeout=2.0)
                if self.rec_pools is not None:
                    self.rec_pools.close(timeout=2.0)
        finally:
            self.cluster.close()

    def gtrid(self) -> str:
        c = self.cluster
        for i in range(1000):
            g = f"{self.prefix}-{i}"
            placed = c.tx_begin(transaction_key(g)).name
            c.tx_end(transaction_key(g))
            if placed == self.lane.x:
                return g
        raise AssertionError("no gtrid lands on " + self.lane.x)

    def work(self, conn: psycopg.Connection, bqual: str, own: Dict[str, bool]) -> None:
        """A branch's own SQL, bounded (a blackholed node never answers)."""
        try:
            with bounded(conn, T):
                conn.execute("INSERT INTO mx VALUES (%s, %s)", (self.g, bqual))
        except BaseException:
            own["sql_failed"] = True
            raise

    def run_branch(self, gtx: Any, label: str, body: Callable[[psycopg.Connection, str, Dict[str, bool]], None]) -> None:
        """One branch, retried once after a connection-class error at its
        start or in its own SQL."""
        for attempt in (1, 2):
            bqual = f"{label}.{attempt}"
            scope = gtx.branch(bqual)
            try:
                conn = scope.__enter__()
            except Exception as e:
                if attempt == 1 and retryable(e):
                    self.notes.append(f"{label} start retried")
                    continue
                raise
            own: Dict[str, bool] = {}
            try:
                body(conn, bqual, own)
            except BaseException as e:
                scope.__exit__(type(e), e, e.__traceback__)
                if attempt == 1 and own.get("sql_failed") and retryable(e):
                    self.notes.append(f"{label} retried")
                    continue
                raise
            scope.__exit__(None, None, None)
            return

    def transaction(self) -> None:
        cell = self.cell
        gtx = self.gtx = self.pools.global_transaction(self.g, timeout=T)
        concurrent = {"done": False}

        def b2(conn: psycopg.Connection, bqual: str, own: Dict[str, bool]) -> None:
            if cell.fault == "serialization" and not concurrent["done"]:
                try:
                    with bounded(conn, T):
                        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        conn.execute("SELECT v FROM mx_ser WHERE k = 1").fetchall()
                    concurrent["done"] = True
                    sql(self.lane.server_dsn(self.gtx.branches[-1].node_name),
                        "UPDATE mx_ser SET v = v + 1 WHERE k = 1")
                    with bounded(conn, T):
                        conn.execute("UPDATE mx_ser SET v = v + 1 WHERE k = 1")
                except BaseException:
                    own["sql_failed"] = True
                    raise
            self.hook("work")
            if cell.fault == "constraint":
                with bounded(conn, T):
                    conn.execute("INSERT INTO mx_uniq VALUES (1)")
            self.work(conn, bqual, own)
            self.hook("end")

        def b1(conn: psycopg.Connection, bqual: str, own: Dict[str, bool]) -> None:
            self.work(conn, bqual, own)
            if cell.fault == "trigger":
                with bounded(conn, T):
                    conn.execute("INSERT INTO mx_deferred VALUES (1)")
            self.run_branch(gtx, "b2", b2)
            self.hook("prepare", conn)

        try:
            self.hook("start")
            self.run_branch(gtx, "b1", b1)
            # every branch prepared: the TM logs its decision, then phase two
            self.decision = "rollback" if cell.phase == "rollback" else "commit"
            if self.decision == "commit":
                self.expected_rows = {(self.lane.server_dsn_name(b.node_name), b.xid.bqual)
                                      for b in gtx.branches if b.state == "prepared"}
            self.hook(self.decision)
            (gtx.commit if self.decision == "commit" else gtx.rollback)()
        except Exception as e:
            self.notes.append(f"{type(e).__name__}")
            if self.decision is None:
                self.decision = "rollback"
                try:
                    gtx.rollback()
                except InDoubtError:
                    pass
            elif not isinstance(e, InDoubtError):
                raise

    def recover_cell(self) -> None:
        """A TM that crashed after logging "commit" left two branches
        prepared on X; a new TM (this cluster, nothing on record) recovers
        while X has the fault, then again with X back."""
        self.gtx = None
        dsn = self.lane.server_dsn(self.lane.x)
        for bq in ("b1.1", "b2.1"):
            prepare_directly(dsn, self.g, bq, table="mx")
        self.decision = "commit"
        self.expected_rows = {(self.lane.server_dsn_name(self.lane.x), bq) for bq in ("b1.1", "b2.1")}
        self.hook("recover")
        predicate = self.mine
        if self.cell.fault == "resolver":
            raced: List[str] = []

            def predicate(xid: psycopg.Xid) -> bool:  # called after the scan, per xid
                if self.mine(xid) and not raced:
                    raced.append(str(xid))
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as other:
                        other.tpc_commit(xid)  # the other resolver
                return self.mine(xid)

        rep = self.pools.recover_all("commit", timeout=T_RECOVER, predicate=predicate)
        if self.cell.fault == "resolver":
            # the branch the other party completed is settled, not failed
            if rep.failed or [r.gid for r in getattr(rep, "resolved_elsewhere", [])] != raced:
                self.nota += 1
                self.notes.append(f"raced {raced}: failed={[(f.gid, f.error) for f in rep.failed]}")
        silent = self.cell.fault in FAULTS and self.cell.fault != "latency"
        if self.lane.model == "node" and silent:
            # X did not answer: it must be reported unreachable, not ok, and
            # nothing of X's reported done
            if rep.ok or self.lane.x not in rep.unreachable:
                self.nota += 1
            self.nota += sum(1 for r in rep.resolved if r.node_name == self.lane.x)
            self.nota += len(rep.completed)
        self.under_fault_report = rep

    def mine(self, xid: psycopg.Xid) -> bool:
        return xid.gtrid == self.g

    # -- the checks -------------------------------------------------------------------

    def verify(self) -> None:
        cell, lane, c = self.cell, self.lane, self.cluster
        g = self.g
        # every node back: what the library said vs what the nodes hold now
        now = self.wait_prepared_readable()
        held = set().union(*now.values())
        if self.gtx is not None:
            for b in self.gtx.branches:
                if b.state in ("rolled back", "committed") and str(b.xid) in held:
                    self.nota += 1  # reported final while the node still holds it prepared
        if cell.phase == "recover":
            rep = self.under_fault_report
            for r in rep.resolved:
                if r.gid in held:
                    self.nota += 1
        # recovery with every node back, with the decision log
        rec = self.rec_pools or self.pools
        deadline = time.monotonic() + 15
        while True:  # a restarted node may still be starting
            rep = rec.recover_all(self.decision or "rollback", timeout=T_RECOVER, predicate=self.mine)
            if rep.ok or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not rep.ok:
            self.notes.append(f"recovery not ok: {rep.unreachable} {[(f.gid, f.error) for f in rep.failed]}")
        after = prepared(lane, g)
        in_doubt_after = sum(len(v) for v in after.values())
        got = rows(lane, g)
        want = sorted(self.expected_rows) if self.decision == "commit" else []
        rows_wrong = len(set(got) ^ set(want)) + (len(got) - len(set(got)))
        # splits and spans
        committed_on = {s for s, _b in got}
        split = 1 if lane.model == "node" and len(committed_on) > 1 else 0
        m = c.metrics()
        spans_counted = sum(n["tx_spans"] for n in m["nodes"])
        spanned = self.gtx is not None and len({b.node for b in self.gtx.branches}) > 1
        logged = self.spans.logged(g)
        spans_silent = 1 if (spanned or split) and not (spans_counted >= 1 and logged) else 0
        # leaks
        leaks = 0
        live = m["scopes"]["transaction"]["live"]
        in_flight = sum(n["in_flight"] for n in m["nodes"])
        leaks += live + in_flight + len(self.pools.in_doubt) + (self.gets - self.puts)
        if leaks:
            self.notes.append(f"leaks: live={live} in_flight={in_flight} in_doubt={self.pools.in_doubt} "
                              f"out={self.gets - self.puts}")
        failures = sum(n["failures"] for n in m["nodes"])
        ejections = sum(n["ejections"] for n in m["nodes"])
        app = cell.fault in dict(APP_ERRORS)
        exp = failures_expected(lane.model, cell.mode, cell.phase, cell.fault)
        checks = {
            "split_commits": split,
            "spans_counted": spans_counted,
            "spans_silent": spans_silent,
            "in_doubt_after_recovery": in_doubt_after,
            "rows_wrong": rows_wrong,
            "nota_while_silent": self.nota,
            "leaks": leaks,
            "app_error_ejections": ejections if app else 0,
            "failures_counted": failures,
            "failures_expected": exp,
        }
        cell.checks = checks
        holds = (
            (split == 0 or cell.mode == "soft")
            and spans_silent == 0
            and in_doubt_after == 0
            and rows_wrong == 0
            and self.nota == 0
            and leaks == 0
            and checks["app_error_ejections"] == 0
            and failures == exp
        )
        if cell.mode == "strict" and spanned:
            holds = False
            self.notes.append("strict mode spanned")
        cell.holds = holds
        if self.gtx is not None and not self.gtx.branches:
            cell.outcome = "refused"
        else:
            cell.outcome = "committed" if self.decision == "commit" else "rolled_back"
        if spanned:
            self.notes.append("spanned " + "+".join(sorted({b.node_name for b in self.gtx.branches})))
        if not holds:
            self.notes.append(f"rows={got} want={want}")

    def wait_prepared_readable(self) -> Dict[str, Set[str]]:
        """pg_prepared_xacts of every server once each answers (a restarted
        node may still be starting)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                return prepared(self.lane, self.g)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def run_cell(lane: Lane, cell: Cell, run_id: str, spans: Spans) -> Cell:
    """Runs one cell on a thread with a deadline; a cell that hangs or
    raises is reported as not holding (and the lane goes on)."""
    r = CellRun(lane, cell, run_id, spans)
    with lane.crash_lock.hold(cell.fault == "crash" and lane.model == "node"):
        _run_cell(lane, cell, r, time.monotonic())
    return cell


def _run_cell(lane: Lane, cell: Cell, r: "CellRun", t0: float) -> None:
    box: Dict[str, BaseException] = {}

    def go() -> None:
        try:
            r.run()
        except BaseException as e:  # reported in the cell
            box["error"] = e

    t = threading.Thread(target=go, name=f"cell-{cell.model}-{cell.mode}-{cell.phase}-{cell.fault}", daemon=True)
    t.start()
    t.join(CELL_DEADLINE)
    cell.seconds = time.monotonic() - t0
    if t.is_alive():
        cell.holds = False
        r.notes.append(f"did not finish within {CELL_DEADLINE:g}s")
        try:
            lane.heal(cell.fault) if cell.fault in FAULTS else r.heal()
        except Exception:
            pass
    elif "error" in box:
        cell.holds = False
        e = box["error"]
        r.notes.append(f"cell raised {type(e).__name__}: {e}")
    key = (cell.model, cell.mode, cell.phase, cell.fault)
    if not cell.holds and key in ALLOWED:
        cell.allowed = True
        r.notes.append("allowed: " + ALLOWED[key])
    cell.note = "; ".join(r.notes)


def cells_of(model: str, mode: str) -> List[Cell]:
    out = [Cell(model, mode, phase, fault) for phase in PHASES for fault in FAULTS]
    return out + [Cell(model, mode, phase, fault) for fault, phase in APP_ERRORS + OWN]


def selected(model: str, mode: str) -> List[Cell]:
    """RACAFF_MATRIX_ONLY=model/mode/phase/fault (parts may be '*') narrows
    the run while iterating."""
    only = os.environ.get("RACAFF_MATRIX_ONLY", "")
    cells = cells_of(model, mode)
    if not only:
        return cells
    keep = []
    for spec in only.split(","):
        parts = (spec.split("/") + ["*"] * 4)[:4]
        for c in cells:
            if all(p in ("*", v) for p, v in zip(parts, (c.model, c.mode, c.phase, c.fault))) and c not in keep:
                keep.append(c)
    return keep


@pytest.fixture(scope="module")
def lanes(pg):
    base = pg.port["RAC1"]
    lock = CrashLock()
    made = [Lane(model, mode, base + 110 + 10 * i, pg, lock)
            for i, (model, mode) in enumerate((m, o) for m in MODELS for o in MODES)]
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(SETUP)
    try:
        for lane in made:
            lane.start()
        yield made
    finally:
        for lane in made:
            lane.stop()


@pytest.mark.timeout(420)
def test_failure_matrix(lanes, capsys):
    run_id = uuid.uuid4().hex[:4]
    # A run that fails or is interrupted leaves no file, rather than the last
    # run's for tools/failure_matrix.py to read as this one's.
    OUT.unlink(missing_ok=True)
    spans = Spans()
    logger = logging.getLogger("racaffinity")
    logger.addHandler(spans)
    results: Dict[Tuple[str, str], List[Cell]] = {}
    t0 = time.monotonic()

    def lane_run(lane: Lane) -> None:
        results[(lane.model, lane.mode)] = [run_cell(lane, c, run_id, spans) for c in selected(lane.model, lane.mode)]

    threads = [threading.Thread(target=lane_run, args=(lane,), name=f"lane-{lane.model}-{lane.mode}")
               for lane in lanes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        logger.removeHandler(spans)
    total = time.monotonic() - t0
    # nothing of this run is left prepared anywhere (every cell checked its own gtrid)
    left = {}
    for name, dsn in lanes[0].pg.dsn.items():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            left[name] = [x.gtrid for x in conn.tpc_recover() if x.gtrid.startswith(f"mx{run_id}")]
    cells = [c for lane in lanes for c in results.get((lane.model, lane.mode), [])]
    narrowed = bool(os.environ.get("RACAFF_MATRIX_ONLY"))
    doc = {"language": "python", "tm": "racaffinity.tpc", "seconds": round(total, 1),
           "cells": [c.as_json() for c in cells]}
    if narrowed:  # tools/failure_matrix.py refuses it as the matrix's verdict
        doc["narrowed"] = True
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    table = subprocess.run([sys.executable, str(REPO / "tools" / "failure_matrix.py"), "--language", "python",
                            *(["--allow-partial"] if narrowed else []), str(OUT.parent)],
                           capture_output=True, text=True, timeout=60)
    with capsys.disabled():  # make test prints the table
        print("\n" + table.stdout + table.stderr, flush=True)
    bad = [c for c in cells if not c.holds and not c.allowed]
    assert left == {n: [] for n in NAMES}
    assert table.returncode == (1 if bad else 0), table.stderr
    assert not bad, "cells that do not hold:\n" + "\n".join(
        f"{c.model}/{c.mode}/{c.phase}/{c.fault}: {c.checks} {c.note}" for c in bad)


# ---------------------------------------------------------------------------
# regressions the matrix found, each on its own (fast, the test's own proxy)


def test_recover_all_keeps_on_record_an_in_doubt_gtrid_its_predicate_skipped(pg, cluster_factory, tables):
    """A gtrid left in doubt whose branch is still prepared, but skipped by
    `predicate`, is not "completed" (that answer would let a TM forget a
    prepared branch): it stays on record until a scan resolves it."""
    c = cluster_factory(nodes=NAMES)
    with FaultProxy(pg.port["RAC1"]) as px:
        dsns = dict(pg.dsn, RAC1=px.dsn(pg.dsn["RAC1"]))
        with NodePools(c, dsns, min_size=1, max_size=2, timeout=2.0) as pools:
            g = gtrid_on(c, "RAC1", "skipped")
            gtx = pools.global_transaction(g, timeout=2.0)
            with gtx.branch() as conn:
                conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
            px.refuse()
            with pytest.raises(InDoubtError):
                within(20, gtx.commit)
            px.heal()
            report = within(30, pools.recover_all, "commit", timeout=2.0, predicate=lambda xid: False)
            assert report.completed == [] and report.resolved == []
            assert pools.in_doubt == {g: [str(gtx.branches[0].xid)]} and live(c) == 1
            assert len(prepared_xacts(pg)["RAC1"]) == 1
            report = within(30, pools.recover_all, "commit", timeout=2.0)
            assert [r.gtrid for r in report.resolved] == [g]
            assert pools.in_doubt == {} and live(c) == 0 and in_flight(c) == 0
            assert tpc_rows(pg)["RAC1"] == [(g, "b0")] and prepared_xacts(pg) == {n: [] for n in NAMES}


def test_a_branch_failing_on_another_node_is_not_charged_to_the_healthy_node_of_another_branch(
    pg, cluster_factory, tables
):
    """Soft mode spans: branch 0 on RAC2, branch 1 re-placed on another node
    that then fails. One failed node operation, one failure, on that node;
    branch 0's rollback succeeds on RAC2, which is charged nothing."""
    c = cluster_factory(nodes=NAMES)
    g = gtrid_on(c, "RAC2", "charge")
    px = {n: FaultProxy(pg.port[n]) for n in NAMES}
    try:
        dsns = {n: px[n].dsn(pg.dsn[n]) for n in NAMES}
        with NodePools(c, dsns, min_size=1, max_size=2, timeout=2.0) as pools:
            gtx = pools.global_transaction(g, timeout=2.0)
            with pytest.raises(psycopg.OperationalError):
                with gtx.branch() as c0:
                    c0.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
                    c.set_node_state("RAC2", "down")
                    with gtx.branch() as c1:
                        other = gtx.branches[1].node_name
                        assert other != "RAC2"
                        px[other].refuse()
                        with bounded(c1, 2.0):
                            c1.execute("INSERT INTO py_tpc VALUES (%s, 'b1')", (g,))
            assert [b.state for b in gtx.branches] == ["rolled back", "rolled back"]
            assert node_metrics(c, other)["failures"] == 1
            assert node_metrics(c, "RAC2")["failures"] == 0
            assert live(c) == 0 and in_flight(c) == 0
            assert prepared_xacts(pg) == {n: [] for n in NAMES} and all(v == [] for v in tpc_rows(pg).values())
    finally:
        for p in px.values():
            p.close()
