"""The demo's Python client: one application process that runs its own branch
of global transactions (see demo/README.md for the line protocol).

    python demo/client.py CONFIG_FILE
    python demo/client.py --replay LANG CONFIG_FILE   (the soak's replay-enabled client, below)

Reads commands on stdin, answers one line per command on stdout. Routing is
racaffinity's (`import racaffinity`, the cffi binding); SQL goes through
psycopg 3 to the node the core names. The C (client.c) and Java
(DemoClient.java) clients implement the same protocol line for line.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import psycopg

import racaffinity as ra

LANG = "py"
# Every query has a deadline (seconds): past it the connection's socket is shut
# down, so a node that stopped answering (a blackhole) fails the call instead
# of hanging it. New connections: connect_timeout.
TIMEOUT = float(os.environ.get("RACAFF_CLIENT_TIMEOUT", "30"))
PROBE_TIMEOUT = 2.0
# racaffinity_result values, for a language-neutral code in the replies.
CODES = [
    "OK", "NULL_ARGUMENT", "INVALID_HANDLE", "INVALID_UTF8", "INVALID_ARGUMENT", "BUFFER_TOO_SMALL", "PANIC",
    "CONFIG", "UNKNOWN_NODE", "DUPLICATE_NODE", "NO_NODE_AVAILABLE", "STRICT_AFFINITY",
    "PREPARED_NODE_UNAVAILABLE", "UNKNOWN_TRANSACTION", "EVENT_PARSE", "FOREIGN_EVENT", "TOO_MANY_HANDLES",
    "INVALID_LEASE",
]


def code_of(e: ra.Error) -> str:
    name = CODES[e.code] if 0 <= e.code < len(CODES) else str(e.code)
    return f"{name}({type(e).__name__})"


class DeadlineExpired(psycopg.Error):
    """A query passed its deadline (not retried on a fresh connection: the node is silent)."""


def timed(conn: psycopg.Connection, fn, timeout: float = TIMEOUT):  # type: ignore[no-untyped-def]
    """Runs fn() (queries on conn) with a deadline; past it the socket is shut
    down under psycopg, and the call raises DeadlineExpired."""

    fired = []

    def cut() -> None:
        fired.append(True)
        try:
            s = socket.socket(fileno=os.dup(conn.fileno()))
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        except OSError:
            pass

    t = threading.Timer(timeout, cut)
    t.daemon = True
    t.start()
    try:
        return fn()
    except psycopg.Error as e:
        if fired:
            raise DeadlineExpired(f"no answer within {timeout:g} s ({one_line(e)})") from e
        raise
    finally:
        t.cancel()


def one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0].replace("\t", " ")


@dataclass
class Branch:
    """A branch started (BEGIN; INSERT) and not yet prepared."""

    node: int
    conn: psycopg.Connection
    port: int  # the server's own port: where the row really is
    kind: str  # how racaffinity routed it
    lease: Optional[ra.Lease]  # balanced mode: the pick's lease


FEED_REVISION = re.compile(r'"feed":\{[^{}]*?"revision":(\d+)')
FINGERPRINT = re.compile(r'"fingerprint":"([^"]*)"')


class FeedLog(threading.Thread):
    """The soak's feed mode (RACAFF_FEEDLOG_MS): polls this process's metrics
    on a thread of its own and notes when the feed revision or the topology
    fingerprint changed, so the driver learns when this process applied an
    event even while the main thread waits on a silent node."""

    def __init__(self, cluster: ra.Cluster, every_ms: int) -> None:
        super().__init__(name="feedlog", daemon=True)
        self.cluster, self.every = cluster, every_ms / 1000
        self.lock = threading.Lock()
        self.entries: List[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        last = None
        while not self.stopped.wait(self.every):
            try:
                m = self.cluster.metrics_json()
            except ra.Error:
                return  # the cluster is closed
            rev, fp = FEED_REVISION.search(m), FINGERPRINT.search(m)
            cur = (rev.group(1) if rev else "0", fp.group(1) if fp else "-")
            if cur != last:
                last = cur
                with self.lock:
                    self.entries.append(f"{int(time.time() * 1000)},{cur[0]},{cur[1]}")

    def take(self) -> str:
        with self.lock:
            out, self.entries = self.entries, []
        return " ".join(out)


class Client:
    def __init__(self, config: str) -> None:
        self.cluster = ra.Cluster(config)
        self.idle: Dict[int, List[psycopg.Connection]] = {}
        self.open: Dict[str, Branch] = {}
        every = int(os.environ.get("RACAFF_FEEDLOG_MS", "0") or 0)
        self.feedlog = FeedLog(self.cluster, every) if every > 0 else None
        if self.feedlog:
            self.feedlog.start()

    # ---- connections: a tiny per-node pool --------------------------------

    def dsn(self, node: int) -> str:
        host, _, port = (self.cluster.node_address(node) or "").rpartition(":")
        return f"host={host} port={port} user=postgres dbname=postgres connect_timeout=5"

    def checkout(self, node: int) -> Tuple[psycopg.Connection, bool]:
        pool = self.idle.setdefault(node, [])
        if pool:
            return pool.pop(), True
        return psycopg.connect(self.dsn(node), autocommit=True), False

    def checkin(self, node: int, conn: psycopg.Connection) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.discard(conn)
        else:
            self.idle.setdefault(node, []).append(conn)

    @staticmethod
    def discard(conn: psycopg.Connection) -> None:
        try:
            conn.close()
        except Exception:
            pass

    def on_node(self, node: int, fn) -> Tuple[psycopg.Connection, Tuple]:  # type: ignore[no-untyped-def]
        """fn(conn) on a pooled connection to `node`, under the statement timeout: the connection and
        fn's row. A pooled connection that turns out dead (its server restarted) is replaced once by a
        fresh one."""
        for _ in range(2):
            conn, pooled = self.checkout(node)
            try:
                return conn, timed(conn, lambda: fn(conn))
            except psycopg.OperationalError:
                self.discard(conn)
                if not pooled:
                    raise
        raise AssertionError("unreachable")

    def work(self, gtrid: str, node: int) -> Tuple[psycopg.Connection, int]:
        """BEGIN; INSERT on `node` (on_node: a dead pooled connection is replaced once)."""
        def insert(conn: psycopg.Connection) -> Tuple:
            conn.execute("BEGIN")
            return conn.execute(
                "INSERT INTO demo_xa VALUES (%s, %s, current_setting('port')::int) RETURNING port",
                (gtrid, LANG),
            ).fetchone()

        conn, row = self.on_node(node, insert)
        return conn, int(row[0])

    # ---- commands ----------------------------------------------------------

    def start(self, gtrid: str, mode: str, preferred: str = "") -> str:
        lease = None
        try:
            if mode == "affinity" and preferred:
                # The TM placed the transaction and enlists this branch there;
                # in strict mode the core refuses it if this process sees that
                # node unable to take new work (elsewhere would split it).
                route = self.cluster.tx_begin_on(gtrid, preferred)
            elif mode == "affinity":
                route = self.cluster.tx_begin(gtrid)
            else:  # a plain pool: every connection request load-balanced
                lease = self.cluster.pick()
                route = lease
        except ra.Error as e:
            return f"REFUSED\t{gtrid}\t-\t{code_of(e)}\t{one_line(e)}"
        try:
            conn, port = self.work(gtrid, route.node)
        except psycopg.Error as e:
            self.cluster.report_outcome(route.node, False)
            if lease is not None:
                lease.release(ra.Outcome.FAILED)
            self.forget(gtrid)
            return f"FAIL\t{gtrid}\t{route.name}\tSQL\t{one_line(e)}"
        self.open[gtrid] = Branch(route.node, conn, port, route.kind.name.lower(), lease)
        return f"STARTED\t{gtrid}\t{route.name}\t{route.kind.name.lower()}\t{port}"

    def prepare(self, gtrid: str, mode: str) -> str:
        b = self.open.pop(gtrid, None)
        if b is None:
            return f"ERR\tPROTOCOL\tno open branch {gtrid}"
        node, conn, port, kind, lease = b.node, b.conn, b.port, b.kind, b.lease
        if mode == "affinity":
            if self.cluster.node_state(node) == ra.NodeState.DOWN:
                # Its node went down before the branch was prepared: the branch
                # is lost with its connection. Join again: soft affinity
                # re-places the transaction (rendezvous over the nodes that are
                # left, so every process agrees), strict refuses.
                self.discard(conn)
                try:
                    route = self.cluster.tx_begin(gtrid)
                except ra.Error as e:
                    self.forget(gtrid)
                    return f"REFUSED\t{gtrid}\t{self.cluster.node_name(node)}\t{code_of(e)}\t{one_line(e)}"
                node, kind = route.node, route.kind.name.lower()
                try:
                    conn, port = self.work(gtrid, node)
                except psycopg.Error as e:
                    self.forget(gtrid)
                    return f"FAIL\t{gtrid}\t{route.name}\tSQL\t{one_line(e)}"
        name = self.cluster.node_name(node)
        try:
            timed(conn, lambda: conn.execute(f"PREPARE TRANSACTION '{gtrid}.{LANG}'"))
        except psycopg.Error as e:
            self.discard(conn)
            self.cluster.report_outcome(node, False)
            if lease is not None:
                lease.release(ra.Outcome.FAILED)
            self.forget(gtrid)
            return f"FAIL\t{gtrid}\t{name}\tSQL\t{one_line(e)}"
        if mode == "affinity":
            self.cluster.tx_prepared(gtrid)  # from now on it never moves
        if lease is not None:
            lease.release(ra.Outcome.OK)
        self.checkin(node, conn)
        return f"PREPARED\t{gtrid}\t{name}\t{kind}\t{port}"

    def branch(self, gtrid: str, mode: str, preferred: str = "") -> str:
        started = self.start(gtrid, mode, preferred)
        return self.prepare(gtrid, mode) if started.startswith("STARTED") else started

    def rollback(self, gtrid: str) -> str:
        b = self.open.pop(gtrid, None)
        if b is not None:
            try:
                timed(b.conn, lambda: b.conn.execute("ROLLBACK"))
                self.checkin(b.node, b.conn)
            except psycopg.Error:
                self.discard(b.conn)
            if b.lease is not None:
                b.lease.release(ra.Outcome.NEUTRAL)
        self.forget(gtrid)
        return "OK"

    def forget(self, gtrid: str) -> None:
        try:
            self.cluster.tx_complete(gtrid)
        except ra.UnknownTransactionError:
            pass

    def event(self, line: str) -> str:
        try:
            return f"OK\t{self.cluster.apply_event(line)}"
        except ra.Error as e:
            return f"ERR\t{code_of(e)}\t{one_line(e)}"

    def strict(self, on: str) -> str:
        self.cluster.set_strict(ra.Scope.TRANSACTION, on == "1")
        return "OK"

    # ---- soak commands (demo/soak.py): sessions, data keys, pinned work, heartbeats

    def select_port(self, node: int) -> int:
        """One request on `node`: the server's port (on_node: a dead pooled connection is replaced once)."""
        conn, row = self.on_node(node, lambda c: c.execute("SELECT current_setting('port')::int").fetchone())
        self.checkin(node, conn)
        return int(row[0])

    def request(self, what: str, key: str, count: str = "1") -> str:
        """SESSION / KEY / PINNED: route, then one request (PINNED: `count`
        requests inside one pin scope) on the node the core names."""
        try:
            if what == "SESSION":
                routes = [self.cluster.route_session(key)]
            elif what == "KEY":
                routes = [self.cluster.route_key(key)]
            else:
                routes = []
        except ra.Error as e:
            return f"REFUSED\t{key}\t-\t{code_of(e)}\t{one_line(e)}"
        try:
            if what == "PINNED":
                ports = []
                with self.cluster.pin():
                    for _ in range(max(1, int(count))):
                        r = self.cluster.route()
                        routes.append(r)
                        ports.append(self.select_port(r.node))
                        self.cluster.report_outcome(r.node, True)
                port = ports[-1]
            else:
                port = self.select_port(routes[-1].node)
                self.cluster.report_outcome(routes[-1].node, True)
        except ra.Error as e:
            return f"REFUSED\t{key}\t-\t{code_of(e)}\t{one_line(e)}"
        except psycopg.Error as e:
            if routes:
                self.cluster.report_outcome(routes[-1].node, False)
            name = routes[-1].name if routes else "-"
            return f"FAIL\t{key}\t{name}\tSQL\t{one_line(e)}"
        r = routes[-1]
        return f"OK\t{key}\t{r.name}\t{r.kind.name.lower()}\t{port}\t{len({x.node for x in routes})}"

    def heartbeat(self) -> str:
        """Probes every node (connect + SELECT 1, 2 s each) and reports it."""
        oks = []
        for node in range(len(self.cluster.nodes)):
            ok = False
            try:
                with psycopg.connect(self.dsn(node).replace("connect_timeout=5", "connect_timeout=2"),
                                     autocommit=True) as conn:
                    timed(conn, lambda: conn.execute("SELECT 1").fetchone(), PROBE_TIMEOUT)
                    ok = True
            except psycopg.Error:
                pass
            self.cluster.report_probe(node, ok)
            oks.append("1" if ok else "0")
        return "OK\t" + "".join(oks)

    def bye(self) -> str:
        live = self.cluster.metrics()["scopes"]["transaction"]["live"]
        return f"BYE\ttx_live={live}\topen={len(self.open)}"

    def serve(self) -> int:
        versions = f"Python {sys.version.split()[0]}, psycopg {psycopg.__version__}"
        print(f"READY\t{LANG}\tracaffinity {ra.version()} ({versions})", flush=True)
        for raw in sys.stdin:
            cmd, *args = raw.rstrip("\n").split("\t")
            if cmd == "BRANCH":
                out = self.branch(*args)
            elif cmd == "START":
                out = self.start(*args)
            elif cmd in ("SESSION", "KEY", "PINNED"):
                out = self.request(cmd, *args)
            elif cmd == "ENDSESSION":
                self.cluster.end_session(args[0])
                out = "OK"
            elif cmd == "HEARTBEAT":
                out = self.heartbeat()
            elif cmd == "METRICS":
                out = f"METRICS\t{self.cluster.metrics_json()}"
            elif cmd == "FEEDLOG":
                out = f"FEEDLOG\t{self.feedlog.take() if self.feedlog else ''}"
            elif cmd == "PREPARE":
                out = self.prepare(*args)
            elif cmd == "ROLLBACK":
                out = self.rollback(*args)
            elif cmd == "DONE":
                self.forget(args[0])
                out = "OK"
            elif cmd == "EVENT":
                out = self.event(args[0])
            elif cmd == "STRICT":
                out = self.strict(args[0])
            elif cmd == "QUIT":
                print(self.bye(), flush=True)
                break
            else:
                out = f"ERR\tPROTOCOL\tunknown command {cmd!r}"
            print(out, flush=True)
        for pool in self.idle.values():
            for conn in pool:
                self.discard(conn)
        if self.feedlog:
            self.feedlog.stopped.set()
            self.feedlog.join()
        self.cluster.close()
        return 0


class ReplayClient:
    """`client.py --replay LANG CONFIG` (the soak's replay-enabled client):
    an application that runs plain requests, not XA branches, through
    `NodePools(..., replay=True)` and `pools.request()`, so that a request a
    failure interrupted is replayed once elsewhere when its commit outcome
    allows it (docs/continuity.md). One request: INSERT a unique request id,
    SELECT it back (nothing that depends on the node: a replay compares what
    the application read), COMMIT. The pools probe every node on their own
    heartbeat and handle FAN lines themselves (`pools.apply_event`).

    The timeouts come from the soak (RACAFF_REPLAY_* in the environment, see
    demo/soak.py and docs/soak.md): the statement deadline (`call_timeout`),
    the wait for a pooled connection, the heartbeat and its probe timeout,
    and the connections' libpq connect timeout, TCP keepalives and TCP user
    timeout."""

    def __init__(self, lang: str, config: str) -> None:
        from racaffinity.pools import NodePools

        env = os.environ.get
        self.lang = lang
        self.call_timeout = float(env("RACAFF_REPLAY_CALL_TIMEOUT", "1"))
        self.cluster = ra.Cluster(config)
        dsns = {}
        for node in range(len(self.cluster.nodes)):
            host, _, port = (self.cluster.node_address(node) or "").rpartition(":")
            dsns[self.cluster.node_name(node)] = f"host={host} port={port} user=postgres dbname=postgres"
        connect_kwargs = {
            "connect_timeout": int(env("RACAFF_REPLAY_CONNECT_TIMEOUT", "2")),
            "keepalives": 1,
            "keepalives_idle": int(env("RACAFF_REPLAY_KEEPALIVES_IDLE", "1")),
            "keepalives_interval": int(env("RACAFF_REPLAY_KEEPALIVES_INTERVAL", "1")),
            "keepalives_count": int(env("RACAFF_REPLAY_KEEPALIVES_COUNT", "2")),
            "tcp_user_timeout": int(env("RACAFF_REPLAY_TCP_USER_TIMEOUT_MS", "2000")),
        }
        self.pools = NodePools(
            self.cluster, dsns, replay=True, heartbeat=True,
            heartbeat_interval=float(env("RACAFF_REPLAY_HEARTBEAT", "0.5")),
            probe_timeout=float(env("RACAFF_REPLAY_PROBE_TIMEOUT", "0.5")),
            timeout=float(env("RACAFF_REPLAY_POOL_TIMEOUT", "3")),
            min_size=1, max_size=4, connect_kwargs=connect_kwargs,
        )
        # FAN lines are applied on a thread of their own, as an ONS listener
        # delivers them, not between two requests: `pools.apply_event` retires
        # a failed node's pool at once, and that close waits (up to 1 s) for
        # the pool's workers, which may be connecting to a silent node.
        self.events: "queue.Queue[Optional[str]]" = queue.Queue()
        self.event_errors: List[str] = []
        self.fan = threading.Thread(target=self.apply_events, name="fan", daemon=True)
        self.fan.start()

    def apply_events(self) -> None:
        while True:
            line = self.events.get()
            try:
                if line is None:
                    return
                self.pools.apply_event(line)
            except ra.Error as e:
                self.event_errors.append(f"{code_of(e)} {one_line(e)}")
                print(f"EVENT {line!r}: {code_of(e)} {one_line(e)}", file=sys.stderr, flush=True)
            finally:
                self.events.task_done()

    def request(self, rid: str, key: str) -> str:
        """REQUEST: one request routed by the data key `key`. OK with where it
        committed, how many replays and the outcome; FAIL with the typed cause
        (the core's refusal, `results_differ`, or `-` when there is none)."""
        r = self.pools.request(key=key, call_timeout=self.call_timeout)
        try:
            with r as req:
                req.execute("INSERT INTO soak_req (id, lang) VALUES (%s, %s)", (rid, self.lang))
                n = req.execute("SELECT count(*) FROM soak_req WHERE id = %s", (rid,)).fetchone()[0]
                if n != 1:
                    raise AssertionError(f"the request's own row counted {n} times")
        except ra.Error as e:
            return f"REFUSED\t{rid}\t-\t{code_of(e)}\t{one_line(e)}"
        except Exception as e:  # noqa: BLE001 - every failure is reported with its cause
            cause = e.__cause__
            why = cause.reason.upper() if isinstance(cause, ra.ReplayRefused) else "-"
            node = self.cluster.node_name(r._node) if r._node >= 0 else "-"
            return f"FAIL\t{rid}\t{node}\t{why}\t{type(e).__name__}: {one_line(e)}"
        return f"OK\t{rid}\t{r.node}\t{r.replays}\t{r.outcome}"

    def serve(self) -> int:
        versions = f"Python {sys.version.split()[0]}, psycopg {psycopg.__version__}, NodePools replay=True"
        print(f"READY\t{self.lang}\tracaffinity {ra.version()} ({versions})", flush=True)
        for raw in sys.stdin:
            cmd, *args = raw.rstrip("\n").split("\t")
            if cmd == "REQUEST":
                out = self.request(*args)
            elif cmd == "EVENT":
                self.events.put(args[0])
                out = "OK\tqueued"
            elif cmd == "METRICS":
                out = f"METRICS\t{self.cluster.metrics_json()}"
            elif cmd == "FEEDLOG":
                out = "FEEDLOG\t"
            elif cmd == "QUIT":
                self.events.put(None)
                self.fan.join()
                live = self.cluster.metrics()["scopes"]["transaction"]["live"]
                # a FAN line the pools refused is reported here (its EVENT was answered when queued)
                errors = f"\tevent_errors={'; '.join(self.event_errors)}" if self.event_errors else ""
                print(f"BYE\ttx_live={live}\t{'open=0' if not errors else 'open=?'}{errors}", flush=True)
                break
            else:
                out = f"ERR\tPROTOCOL\tunknown command {cmd!r}"
            print(out, flush=True)
        self.pools.close()
        self.cluster.close()
        return 0


if __name__ == "__main__":
    if sys.argv[1] == "--replay":
        sys.exit(ReplayClient(sys.argv[2], Path(sys.argv[3]).read_text()).serve())
    sys.exit(Client(Path(sys.argv[1]).read_text()).serve())
