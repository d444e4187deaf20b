"""Shared fixtures. Tests that need the local PostgreSQL nodes read the
RACAFF_NODE<i>_DSN / _PORT exports of `tests/cluster/pgnodes env` (run_tests.sh
sets them) and kill/restart nodes through the same script."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import psycopg
import pytest

import racaffinity
from racaffinity.tpc import DEFAULT_FORMAT_ID

from faultproxy import FaultProxy

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"
NAMES = ["RAC1", "RAC2", "RAC3"]


class PgNodes:
    """The 3 local nodes: DSNs and ports by node name, kill and restart."""

    def __init__(self) -> None:
        n = int(os.environ.get("RACAFF_NODES", "0"))
        if n < 3:
            pytest.fail("the local PostgreSQL nodes are not running: use python/run_tests.sh")
        self.dsn: Dict[str, str] = {NAMES[i]: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i in range(3)}
        self.port: Dict[str, int] = {NAMES[i]: int(os.environ[f"RACAFF_NODE{i + 1}_PORT"]) for i in range(3)}
        self.script = os.environ.get("RACAFF_PGNODES", str(REPO / "tests" / "cluster" / "pgnodes"))

    def name_of_port(self, port: int) -> str:
        return {p: n for n, p in self.port.items()}[port]

    def _run(self, *args: str) -> None:
        subprocess.run([self.script, *args], check=True, stdout=subprocess.DEVNULL)

    def kill(self, i: int) -> None:
        self._run("kill", str(i))

    def restart(self, i: int) -> None:
        self._run("restart", str(i))

    def smart_stop(self, i: int) -> None:
        """Node i refuses new connections ("the database system is shutting
        down") until its last session ends; then it stops (restart it)."""
        self._run("smart-stop", str(i))


@pytest.fixture(scope="session")
def pg() -> PgNodes:
    return PgNodes()


def proxy_dsns(env: str) -> Dict[str, str]:
    """Instance name -> proxy DSN from the `export` lines of `faults env`."""
    dsn: Dict[str, str] = {}
    for line in env.splitlines():
        for i, name in enumerate(NAMES, 1):
            prefix = f"export RACAFF_PROXY{i}_DSN="
            if line.startswith(prefix):
                dsn[name] = line[len(prefix):].strip("'")
    assert sorted(dsn) == NAMES, dsn
    return dsn


def prepare_directly(dsn: str, gtrid: str, bqual: str, table: str = "py_tpc") -> None:
    """A prepared branch made outside the library (what a crashed TM leaves),
    with one row (gtrid, bqual) in `table`."""
    # not `with conn`: its exit would commit, which a prepared 2PC refuses
    conn = psycopg.connect(dsn, connect_timeout=5)
    try:
        conn.tpc_begin(psycopg.Xid.from_parts(DEFAULT_FORMAT_ID, gtrid, bqual))
        insert = psycopg.sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(psycopg.sql.Identifier(table))
        conn.execute(insert, (gtrid, bqual))
        conn.tpc_prepare()
    finally:
        conn.close()  # the prepared branch outlives the session


class Toxiproxy:
    """tests/cluster/faults: a Toxiproxy "instance" proxy in front of each
    node (or, in RAC mode, all in front of node 1), faults set by instance.
    Started on first use (the tool builds toxiproxy-server once with `go
    install` if target/tools/bin has none), stopped at the end of the run."""

    def __init__(self) -> None:
        self.script = str(REPO / "tests" / "cluster" / "faults")
        self.rac = False
        self._run("start", "3")
        self.dsn = proxy_dsns(self._run("env"))

    def _run(self, *args: str) -> str:
        done = subprocess.run([self.script, *args], check=True, capture_output=True, text=True, timeout=900)
        return done.stdout

    def _fault(self, fault: str, name: str) -> None:
        self._run(fault, str(NAMES.index(name) + 1))

    def blackhole(self, name: str) -> None:
        self._fault("blackhole", name)

    def reset(self, name: str) -> None:
        self._fault("reset", name)

    def refuse(self, name: str) -> None:
        self._fault("refuse", name)

    def heal(self, name: str) -> None:
        self._fault("heal", name)

    def mode(self, rac: bool) -> None:
        """Instances of independent nodes, or (`rac`) of one database."""
        if rac != self.rac:
            self._run("start", "3", *(["--rac"] if rac else []))
            self.rac = rac
        self._run("heal-all")

    def stop(self) -> None:
        self._run("stop")


@pytest.fixture(scope="session")
def toxiproxy(pg: PgNodes):
    tp = Toxiproxy()
    yield tp
    tp.stop()


@pytest.fixture
def toxi(toxiproxy: Toxiproxy) -> Toxiproxy:
    """The Toxiproxy instances, healed, in front of the independent nodes."""
    toxiproxy.mode(rac=False)
    yield toxiproxy
    toxiproxy.mode(rac=False)


@pytest.fixture
def cluster_factory() -> Callable[..., racaffinity.Cluster]:
    made: List[racaffinity.Cluster] = []

    def make(*args, **kwargs) -> racaffinity.Cluster:
        c = racaffinity.Cluster(*args, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def cluster(cluster_factory) -> racaffinity.Cluster:
    return cluster_factory(nodes=NAMES)


@pytest.fixture
def proxies(pg: PgNodes) -> Iterator[Dict[str, FaultProxy]]:
    """One fault proxy in front of each node (python/tests/faultproxy.py)."""
    px = {name: FaultProxy(port) for name, port in pg.port.items()}
    yield px
    for p in px.values():
        p.close()


@pytest.fixture
def restart_after(pg: PgNodes):
    """Node numbers a test killed: restarted when it ends, however it ends."""
    killed: List[int] = []
    yield killed
    for i in killed:
        pg.restart(i)


def port_of(conn) -> int:
    """The port of the server a connection reached (which node it is)."""
    return conn.execute("SELECT inet_server_port()").fetchone()[0]


async def aport_of(conn) -> int:
    cur = await conn.execute("SELECT inet_server_port()")
    return (await cur.fetchone())[0]


async def wait_until_async(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """`wait_until` for asyncio tests: the loop runs while it waits."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"condition not met within {timeout:.1f}s")
        await asyncio.sleep(step)
    return time.monotonic() - t0


def wait_until(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """Polls `cond` until it holds; returns the seconds it took, or fails."""
    t0 = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"condition not met within {timeout:.1f}s")
        time.sleep(step)


def in_a_forked_child(child: Callable[[], str], timeout: float = 15.0) -> str:
    """Runs `child` in a forked child and returns what it answered ("ok",
    or what went wrong), or "no verdict" for a child that died first. A
    child stuck past `timeout` is killed: it must not hold the run."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        verdict = "no verdict"
        try:
            os.close(read)
            verdict = child()
        except BaseException as e:
            verdict = f"{type(e).__name__}: {e}"
        finally:
            os.write(write, verdict.encode()[:500])
            os._exit(0)  # no atexit handler, no pytest teardown in the child
    os.close(write)
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG)[0] != pid:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    with os.fdopen(read, "rb") as f:
        return f.read().decode() or "no verdict"


def next_xid(pg: PgNodes, node: str) -> int:
    """The next transaction id `node` will assign, read from a session of
    its own without assigning one: a snapshot's xmax is one past the last
    transaction that ended (every request of the caller has ended when it
    is read). The replay tests count the ids their requests took with it."""
    with psycopg.connect(pg.dsn[node], autocommit=True, connect_timeout=5) as admin:
        return admin.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()[0]


def tokens_by_node(c: racaffinity.Cluster) -> Dict[str, str]:
    """A session routing token for every node: the node `route_token` routes it to -> the token."""
    found: Dict[str, str] = {}
    for i in range(200):
        token = c.session_token(f"placed-{i}")
        found.setdefault(c.route_token(token).route.name, token)
        if len(found) == len(NAMES):
            return found
    pytest.fail(f"200 new sessions routed to {sorted(found)} only")


def prepared_xacts(pg: PgNodes) -> Dict[str, List[str]]:
    """The gids in `pg_prepared_xacts` of every node, read by SQL."""
    out = {}
    for name, dsn in pg.dsn.items():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            out[name] = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts ORDER BY gid")]
    return out


def tpc_rows(pg: PgNodes) -> Dict[str, list]:
    """(gtrid, branch) rows of py_tpc on every node, read by SQL."""
    out = {}
    for name, dsn in pg.dsn.items():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            out[name] = sorted(tuple(r) for r in conn.execute("SELECT gtrid, branch FROM py_tpc"))
    return out


@pytest.fixture
def tables(pg: PgNodes):
    """An empty py_tpc on every node; no prepared transaction left behind
    (max_prepared_transactions is 64)."""
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS py_tpc (gtrid text, branch text)")
            conn.execute("TRUNCATE py_tpc")
    yield
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            for (gid,) in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall():
                conn.execute(psycopg.sql.SQL("ROLLBACK PREPARED {}").format(gid))


# The last FAN line's time (seconds since 1970).
_FAN_LAST = [0]


def fan_line(instance: str, status: str, reason: str = "FAILURE", drain_timeout: Optional[int] = None) -> str:
    # Dated now, as ONS dates its events: the core ends a FAN drain at the
    # event's timestamp plus drain_timeout (docs/semantics.md), so a line
    # dated in the past would end its drain at once (hence the next whole
    # second, never before now). And each line at least a second after the
    # last: the core keeps the newest timestamp per node ("Agreement"), so
    # two lines of one second would leave the first status of it in force.
    s = _FAN_LAST[0] = max(int(time.time()) + 1, _FAN_LAST[0] + 1)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s))
    drain = f" drain_timeout={drain_timeout}" if drain_timeout is not None else ""
    return (
        f"SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={instance} host=h "
        f"status={status} reason={reason} card=1 timestamp={stamp}"
        f"{drain}"
    )
