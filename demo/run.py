#!/usr/bin/env python3
"""`make demo`: one global transaction, three languages, four processes.

A C client (libpq), a Java client (JDBC) and a Python client (psycopg) run as
three separate processes. Each executes its own branch of the same global
transactions: BEGIN; INSERT; PREPARE TRANSACTION '<gtrid>.<lang>' on the node
racaffinity routes the gtrid to. This driver is the transaction manager: it
hands out the gtrids over stdin/stdout pipes, and once all three branches are
prepared it sends COMMIT PREPARED to the node its own racaffinity (the Python
binding) routes the gtrid to. All four processes load the same config text and
share nothing else: deterministic rendezvous placement puts every branch of a
transaction on one node.

    target/pyenv/bin/python demo/run.py      (after demo/build.sh; `make demo` does both)

Parts: 1. shared routing; 2. the same workload without affinity (per-connection
load balancing), which splits transactions and misroutes 2PC; 3. failover: RAC2
is killed (`pgnodes kill 2`) with transactions in flight, a FAN event is
broadcast to every process, RAC2 restarts and a recovery pass resolves what it
held prepared.

Writes target/demo/branches.svg (per part the count of split transactions, a
mark above each, and the node of every branch) and target/demo/results.json. Exits 1 if affinity ever splits a
transaction, misroutes a 2PC command or leaves anything in doubt, or if the
contrast run shows no split (then the check would prove nothing); 2 on setup
errors.

Environment: RACAFF_PG_BASE_PORT, RACAFF_PG_DIR (pgnodes: which nodes);
RACAFF_DEMO_TX (transactions per part, default and minimum 60); JAVA (java binary);
RACAFF_DEMO_SKEWED_CLIENT=c|java|py gives that client another topology
(`node.RAC1.weight = 3`), which makes the affinity parts split transactions: the
demo must then fail. (Names spelled in another case no longer do: placement
hashes them upper-cased, racaffinity-hrw-v2.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

try:
    import psycopg

    import racaffinity as ra
    from _harness import NODES, PGNODES, REPO, NodeSQL, SetupError, built_clients, esc, run_tool, start_nodes
except ImportError as e:  # pragma: no cover - setup error
    sys.exit(f"demo/run.py: {e}: run it with target/pyenv/bin/python after demo/build.sh (or `make demo`)")

OUT = REPO / "target" / "demo"
LANGS = ["c", "java", "py"]
LABEL = {"c": "C", "java": "Java", "py": "Python"}
DEAD = "RAC2"
GID_RE = r"^demo[123]-"
TABLE = "demo_xa"
FAN_DOWN = ("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 "
            "status=down reason=FAILURE card=2 timestamp=2026-11-29 08:00:00")
FAN_UP = ("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=127.0.0.1 "
          "status=up reason=BOOT card=3 timestamp=2026-11-29 08:00:09")



def unreachable(err: str) -> bool:
    """Whether a psycopg error line says the node did not answer at all."""
    return any(m in err for m in ("Connection refused", "connection failed", "server closed the connection",
                                  "terminating connection", "could not connect"))

def native(code: str) -> str:
    """"STRICT_AFFINITY(StrictAffinityException)" -> "StrictAffinityException"."""
    return code.split("(", 1)[1].rstrip(")") if "(" in code else code


# ---- records ------------------------------------------------------------------


@dataclass
class Branch:
    lang: str
    status: str  # prepared, committed, recovered, rolled_back, refused, failed, in_doubt
    node: Optional[str] = None  # where the branch really is (from the server's own port)
    claimed: Optional[str] = None  # where the client says racaffinity sent it
    kind: str = ""
    code: str = ""  # refusal or error code
    message: str = ""


@dataclass
class Tx:
    part: int
    index: int
    gtrid: str
    branches: Dict[str, Branch] = field(default_factory=dict)
    outcome: str = ""  # committed, recovered (committed by the recovery pass), rolled_back
    tm_node: Optional[str] = None  # where the driver's own racaffinity routes it
    misrouted: int = 0
    sent: List[str] = field(default_factory=list)  # where each 2PC command went
    errors: List[str] = field(default_factory=list)  # misrouted 2PC commands
    group: str = ""  # failover part: normal, open-strict, open-soft, prepared

    def worked(self) -> List[Branch]:
        """Branches whose work exists (or existed until commit) on a node."""
        return [b for b in self.branches.values()
                if b.status in ("prepared", "committed", "recovered", "in_doubt") and b.node]

    @property
    def split(self) -> bool:
        return len({b.node for b in self.worked()}) > 1

    @property
    def repinned(self) -> bool:
        return any(b.kind == "repinned" for b in self.branches.values())


# ---- the client processes --------------------------------------------------------


class Client:
    def __init__(self, lang: str, argv: List[str]) -> None:
        self.lang = lang
        self.log_path = OUT / f"client-{lang}.log"
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, bufsize=1)
        self.banner = ""

    def send(self, *fields: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write("\t".join(fields) + "\n")
        self.p.stdin.flush()

    def read(self) -> List[str]:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(5)
            tail = self.log_path.read_text()[-2000:]
            raise SetupError(f"the {LABEL[self.lang]} client exited ({self.p.returncode}); its log:\n{tail}")
        return line.rstrip("\n").split("\t")

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.log.close()


# ---- the driver (the transaction manager) ------------------------------------------------


class Demo(NodeSQL):
    def __init__(self, ntx: int) -> None:
        super().__init__()
        # lock_timeout: a foreign prepared transaction can hold a lock
        # forever; the demo reports it instead of waiting (reset_tables).
        lock_timeout = os.environ.get("RACAFF_DEMO_LOCK_TIMEOUT", "10s")
        self.conn_options = f"connect_timeout=5 options='-c lock_timeout={lock_timeout}'"
        self.ntx = ntx
        self.ports: Dict[str, int] = {}
        self.port_node: Dict[int, str] = {}
        self.started_nodes = False
        self.killed = False
        self.clients: Dict[str, Client] = {}
        self.txs: List[Tx] = []
        self.log: Dict[str, str] = {}  # the TM's decision log: gtrid -> commit | rollback
        self.problems: List[str] = []
        self.notes: Dict[int, List[str]] = {1: [], 2: [], 3: []}
        self.times: Dict[int, float] = {}
        self.markers: Dict[str, float] = {}
        self.stats: Dict[int, Dict[str, object]] = {}

    # ---- nodes and config ----------------------------------------------------

    def pgnodes(self, *args: str) -> str:
        return run_tool(PGNODES, *args)

    def start_nodes(self) -> None:
        self.ports, self.started_nodes = start_nodes()
        self.port_node = {p: n for n, p in self.ports.items()}

    def config_text(self) -> str:
        addr = "\n".join(f"node.{n}.address = 127.0.0.1:{self.ports[n]}" for n in NODES)
        return (
            "# written by demo/run.py: the C, Java and Python clients and the driver all load this text\n"
            "name = demo\ndatabase = orcl\nservice = svc\n"
            f"nodes = {', '.join(NODES)}\n{addr}\n"
            "transaction.placement = rendezvous\n"
            "transaction.strict = true\n"
        )

    # ---- SQL from the driver: NodeSQL (conn, sql, try_sql) --------------------------------

    def prepared_gids(self, node: str) -> List[str]:
        return [r[0] for r in self.sql(node, "SELECT gid FROM pg_prepared_xacts WHERE gid ~ %s ORDER BY gid",
                                        (GID_RE,))]

    def in_doubt(self) -> int:
        return sum(len(self.prepared_gids(n)) for n in NODES)

    def reset_tables(self) -> None:
        for n in NODES:
            for gid in self.prepared_gids(n):
                self.sql(n, f"ROLLBACK PREPARED '{gid}'")
            self.sql(n, f"CREATE TABLE IF NOT EXISTS {TABLE} (gtrid text, lang text, port int)")
            # A prepared transaction that is not the demo's (a manual test's)
            # can hold the table forever: give up with its name, never wait.
            try:
                self.sql(n, f"TRUNCATE {TABLE}")
            except psycopg.errors.LockNotAvailable:
                holders = [r[0] for r in self.sql(
                    # A prepared transaction's locks have no pid; its xid
                    # lock shares their virtual transaction.
                    n, "SELECT DISTINCT p.gid FROM pg_locks l "
                       "JOIN pg_locks x ON x.virtualtransaction = l.virtualtransaction "
                       "AND x.locktype = 'transactionid' "
                       "JOIN pg_prepared_xacts p ON p.transaction = x.transactionid "
                       "WHERE l.relation = %s::regclass AND l.pid IS NULL ORDER BY 1", (TABLE,))]
                what = (", ".join(f"prepared transaction '{g}'" for g in holders) if holders
                        else "another session")
                fix = "; ".join(f"ROLLBACK PREPARED '{g}'" for g in holders) or "end that session"
                raise SetupError(f"{TABLE} on {n} (port {self.ports[n]}) is locked by {what}, which is not the "
                                 f"demo's; the demo leaves foreign transactions alone: {fix} (psql on port "
                                 f"{self.ports[n]}), then run it again") from None

    # ---- talking to the clients --------------------------------------------------

    def start_clients(self, conf: Path) -> None:
        java = os.environ.get("JAVA", "java")
        cp = built_clients(OUT, "demo")
        confs = {lang: conf for lang in LANGS}
        odd = os.environ.get("RACAFF_DEMO_SKEWED_CLIENT", "")
        if odd:
            # Break it on purpose: one client sees another topology (a weight
            # the others do not have), so its placements differ.
            if odd not in LANGS:
                raise SetupError(f"RACAFF_DEMO_SKEWED_CLIENT must be one of {', '.join(LANGS)}")
            confs[odd] = OUT / f"cluster-{odd}-skewed.conf"
            confs[odd].write_text(conf.read_text() + f"\nnode.{NODES[0]}.weight = 3\n")
        argv = {
            "c": [str(OUT / "client_c"), str(confs["c"])],
            "java": [java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", cp,
                     "DemoClient", str(confs["java"])],
            "py": [sys.executable, str(REPO / "demo" / "client.py"), str(confs["py"])],
        }
        for lang in LANGS:
            self.clients[lang] = Client(lang, argv[lang])
        for lang in LANGS:
            r = self.clients[lang].read()
            if r[0] != "READY":
                raise SetupError(f"{LABEL[lang]} client: unexpected first line {r}")
            self.clients[lang].banner = r[2]

    def ask(self, *fields: str, langs: Optional[List[str]] = None) -> Dict[str, List[str]]:
        """Sends one command to several clients, which work on it concurrently,
        then collects one reply line from each."""
        langs = LANGS if langs is None else langs
        for lang in langs:
            self.clients[lang].send(*fields)
        return {lang: self.clients[lang].read() for lang in langs}

    def broadcast_event(self, line: str) -> str:
        """A FAN line, applied in every process: the three clients and the driver."""
        changes = {"driver": self.cluster.apply_event(line)}
        for lang, r in self.ask("EVENT", line).items():
            if r[0] != "OK":
                raise SetupError(f"{LABEL[lang]} refused the event: {r}")
            changes[LABEL[lang]] = int(r[1])
        return ", ".join(f"{k} {v}" for k, v in changes.items())

    def record(self, tx: Tx, lang: str, r: List[str]) -> Branch:
        """A client's reply to START / PREPARE / BRANCH."""
        status = r[0]
        if status in ("STARTED", "PREPARED"):
            node = self.port_node.get(int(r[4]))
            b = Branch(lang, "prepared" if status == "PREPARED" else "started", node, r[2], r[3])
            if node is None or node.upper() != r[2].upper():
                self.problems.append(f"{tx.gtrid}: {LABEL[lang]} says {r[2]} but its row is on {node}")
        elif status in ("REFUSED", "FAIL"):
            b = Branch(lang, "refused" if status == "REFUSED" else "failed", None,
                       r[2] if r[2] != "-" else None, "", r[3], r[4] if len(r) > 4 else "")
            if not (status == "REFUSED" and tx.group == "open-strict"):  # the one expected refusal
                self.problems.append(f"{tx.gtrid}: {LABEL[lang]} {status} on {r[2]}: {r[3]} {b.message}")
        else:
            raise SetupError(f"{LABEL[lang]} client: unexpected reply {r}")
        tx.branches[lang] = b
        return b

    def new_tx(self, part: int, i: int, group: str = "normal") -> Tx:
        tx = Tx(part, i, f"demo{part}-{i:03d}", group=group)
        self.txs.append(tx)
        return tx

    # ---- two-phase commit ------------------------------------------------------------

    def tm_route(self, tx: Tx) -> str:
        """Where the driver's racaffinity sends 2PC for tx (not yet prepared
        here). Its node went down before prepare: join again, like the
        clients did; soft affinity re-places it exactly as they did (same
        topology, same rendezvous hash), strict raises StrictAffinityError."""
        route = self.cluster.tx_route(tx.gtrid)
        if self.cluster.node_state(route.node) == ra.NodeState.DOWN:
            return self.cluster.tx_begin(tx.gtrid).name
        return route.name

    def phase_two(self, tx: Tx, affinity: bool) -> None:
        """COMMIT PREPARED (or ROLLBACK PREPARED, per the TM log) of every prepared branch."""
        action = "COMMIT" if self.log[tx.gtrid] == "commit" else "ROLLBACK"
        for b in tx.branches.values():
            if b.status != "prepared":
                continue
            gid = f"{tx.gtrid}.{b.lang}"
            if affinity:
                try:
                    target = self.cluster.tx_route(tx.gtrid).name
                except ra.Error as e:  # never in a correct run: the driver's registry disagrees
                    b.status, b.code, tx.outcome = "in_doubt", native(type(e).__name__), "in_doubt"
                    self.problems.append(f"{gid}: tx_route refused ({type(e).__name__}: {e}); left in doubt")
                    continue
            else:
                with self.cluster.pick() as lease:  # a plain pool: any node
                    target = lease.name
            tx.sent.append(target)
            err = self.try_sql(target, f"{action} PREPARED '{gid}'")
            if affinity and err is not None and unreachable(err):
                # The node that holds the branch did not answer: XA's
                # XAER_RMFAIL. The branch stays in doubt for recovery; it is
                # never sent elsewhere.
                b.status, b.code = "in_doubt", "UNREACHABLE"
                if tx.outcome != "in_doubt":
                    self.notes[tx.part].append(
                        f"prepared: {tx.gtrid} on {b.node}: tx_route still names {target} (2PC never moves); "
                        f"{action} PREPARED there fails ({err}): it stays in doubt for recovery")
                tx.outcome = "in_doubt"
                continue
            if err is not None and "does not exist" in err:
                # The ORA-24756 analogue: the branch is not on that node.
                tx.misrouted += 1
                tx.errors.append(f"{action} PREPARED '{gid}' on {target}: {err}")
                # Clean up on the node that really holds it, so nothing stays prepared.
                err = self.try_sql(b.node, f"{action} PREPARED '{gid}'")
            if err is not None:
                self.problems.append(f"{action} PREPARED '{gid}': {err}")
                continue
            b.status = "committed" if action == "COMMIT" else "rolled_back"
        if not tx.outcome:
            tx.outcome = "committed" if action == "COMMIT" else "rolled_back"

    def finish(self, tx: Tx, affinity: bool) -> None:
        """The TM's decision for a transaction whose branches all answered."""
        if affinity:
            try:
                tx.tm_node = self.tm_route(tx)
            except ra.StrictAffinityError:
                tx.tm_node = None
        ok = all(b.status == "prepared" for b in tx.branches.values()) and (tx.tm_node or not affinity)
        if ok and affinity:
            self.cluster.tx_prepared(tx.gtrid)
        self.log[tx.gtrid] = "commit" if ok else "rollback"
        self.phase_two(tx, affinity)
        if tx.outcome != "in_doubt":
            self.done(tx, affinity)

    def done(self, tx: Tx, affinity: bool) -> None:
        """The transaction is over: every process forgets its gtrid."""
        if affinity:
            try:
                self.cluster.tx_complete(tx.gtrid)
            except ra.UnknownTransactionError:
                pass
            self.ask("DONE", tx.gtrid)

    def check_agreement(self, tx: Tx) -> None:
        if tx.tm_node is None:
            return
        for b in tx.worked():
            if (b.claimed or "").upper() != tx.tm_node.upper():
                self.problems.append(f"{tx.gtrid}: {LABEL[b.lang]} routed to {b.claimed}, the driver to {tx.tm_node}")

    def run_global(self, tx: Tx, affinity: bool) -> Tx:
        """One global transaction: each client runs its branch at the same time."""
        mode = "affinity" if affinity else "balanced"
        if affinity:
            self.cluster.tx_begin(tx.gtrid)  # the TM enlists too: the same placement, computed here
        for lang, r in self.ask("BRANCH", tx.gtrid, mode).items():
            self.record(tx, lang, r)
        self.finish(tx, affinity)
        if affinity:
            self.check_agreement(tx)
        return tx

    # ---- the three parts ------------------------------------------------------------

    def example(self, tx: Tx) -> str:
        where = ", ".join(f"{LABEL[b.lang]} on {b.node}" for b in tx.branches.values())
        sent = ", ".join(tx.sent) if tx.sent else "-"
        return f"e.g. {tx.gtrid}: {where}; COMMIT PREPARED sent to {sent}"

    def part1(self) -> None:
        t0 = time.monotonic()
        for i in range(self.ntx):
            self.run_global(self.new_tx(1, i), affinity=True)
        self.times[1] = time.monotonic() - t0
        self.notes[1].append(self.example(self.txs[-self.ntx]))
        self.report(1, "Part 1. Shared routing: C, Java and Python each run one branch of every global transaction")

    def part2(self) -> None:
        t0 = time.monotonic()
        for i in range(self.ntx):
            self.run_global(self.new_tx(2, i), affinity=False)
        self.times[2] = time.monotonic() - t0
        first_split = next((t for t in self.txs if t.part == 2 and t.split), None)
        if first_split is not None:
            self.notes[2].append(self.example(first_split))
            self.notes[2].extend(first_split.errors)
        misrouted = sum(t.misrouted for t in self.txs if t.part == 2)
        self.notes[2].append(f"cleanup: each of the {misrouted} misrouted COMMIT PREPARED was re-sent to the node "
                             "that really holds the branch, so nothing stays prepared")
        self.report(2, "Part 2. Contrast: the same workload with affinity off (each connection load-balanced)")

    def part3(self) -> None:
        t0 = time.monotonic()
        n = self.ntx
        # 40% before the crash. Then the application keeps 30% in flight, of
        # three kinds in turn: "open-strict" and "open-soft" (every branch
        # started, none prepared) and "prepared" (every branch prepared, COMMIT
        # decided and logged, not sent yet); RAC2 crashes once each kind has a
        # transaction on it (the placements are fixed by the hash: for the
        # default gtrids that is at 30%). Then 15% while RAC2 is down, and the
        # rest after it returned.
        before = (4 * n) // 10
        say = self.notes[3].append

        for i in range(before):
            self.run_global(self.new_tx(3, i), affinity=True)

        kinds = ["open-strict", "open-soft", "prepared"]
        inflight: List[Tx] = []
        prepared: List[Tx] = []
        on_rac2: Counter = Counter()
        i = before
        while (i < before + (3 * n) // 10 or min(on_rac2[k] for k in kinds) < 1) and i < n - 8:
            kind = kinds[(i - before) % 3]
            tx = self.new_tx(3, i, kind)
            on_rac2[kind] += self.cluster.tx_begin(tx.gtrid).name == DEAD
            if kind == "prepared":
                for lang, r in self.ask("BRANCH", tx.gtrid, "affinity").items():
                    self.record(tx, lang, r)
                tx.tm_node = self.tm_route(tx)
                self.cluster.tx_prepared(tx.gtrid)
                self.log[tx.gtrid] = "commit"  # decided and logged; phase two not sent yet
                prepared.append(tx)
            else:
                for lang, r in self.ask("START", tx.gtrid, "affinity").items():
                    self.record(tx, lang, r)
                inflight.append(tx)
            i += 1
        kill_at = i
        down_end = min(n - 4, max(kill_at + 4, kill_at + (15 * n) // 100))
        on_dead = lambda txs: [t.gtrid for t in txs if any(b.node == DEAD for b in t.branches.values())]  # noqa: E731
        say(f"in flight at the crash: {len(inflight)} open and {len(prepared)} prepared transactions; "
            f"{len(on_dead(inflight))} open and {len(on_dead(prepared))} prepared ones have their branches on {DEAD}")

        self.markers["kill"] = kill_at - 0.5
        say(f"pgnodes kill 2: {self.pgnodes('kill', '2')}")
        self.killed = True
        say(f"FAN to all four processes: {FAN_DOWN.split(' timestamp')[0]}")
        say(f"  node state changes: {self.broadcast_event(FAN_DOWN)}")

        # 1. Prepared before the crash: phase two goes where tx_route says.
        for tx in prepared:
            self.phase_two(tx, affinity=True)
            self.check_agreement(tx)
            if tx.outcome != "in_doubt":
                self.done(tx, True)

        # 2. Open branches, strict (transaction.strict = true in the config): typed refusal.
        for tx in [t for t in inflight if t.group == "open-strict"]:
            self.prepare_started(tx)
            self.finish(tx, affinity=True)
            self.check_agreement(tx)
            refused = [b for b in tx.branches.values() if b.status == "refused"]
            if refused:
                say(f"strict: {tx.gtrid} was open on {DEAD}: typed refusals, " + ", ".join(
                    f"{LABEL[b.lang]} {native(b.code)}" for b in refused) + " -> rolled back")

        # 3. The operator switches transaction affinity to soft in every process
        #    (UCP's useStrictXAAffinity = false; racaffinity's set_strict at runtime).
        self.cluster.set_strict(ra.Scope.TRANSACTION, False)
        self.ask("STRICT", "0")
        say("set_strict(transaction, false) in all four processes")
        for tx in [t for t in inflight if t.group == "open-soft"]:
            self.prepare_started(tx)
            self.finish(tx, affinity=True)
            self.check_agreement(tx)
            if tx.repinned:
                nodes = sorted({b.node for b in tx.worked() if b.node})
                say(f"soft: {tx.gtrid} was open on {DEAD}: every process re-pinned it to {'/'.join(nodes)} "
                    f"before prepare, the driver too ({tx.tm_node}) -> {tx.outcome}")

        # 4. New transactions while RAC2 is down: they avoid it.
        self.markers["down_end"] = down_end - 0.5
        for i in range(kill_at, down_end):
            self.run_global(self.new_tx(3, i, "down"), affinity=True)

        # 5. RAC2 returns; a recovery pass resolves what it held prepared.
        say(f"pgnodes restart 2: {self.pgnodes('restart', '2')}")
        self.killed = False
        say(f"FAN to all four processes: {FAN_UP.split(' timestamp')[0]} ({self.broadcast_event(FAN_UP)} changes)")
        self.recover()

        for i in range(down_end, n):
            self.run_global(self.new_tx(3, i, "after"), affinity=True)
        self.cluster.set_strict(ra.Scope.TRANSACTION, True)
        self.ask("STRICT", "1")
        self.times[3] = time.monotonic() - t0
        self.report(3, f"Part 3. Failover: {DEAD} killed with transactions in flight, FAN to every process, "
                       "restart and recovery")

    def prepare_started(self, tx: Tx) -> None:
        """PREPARE for the branches that started; the others stay as they are."""
        started = [lang for lang in LANGS if tx.branches[lang].status == "started"]
        for lang, r in self.ask("PREPARE", tx.gtrid, "affinity", langs=started).items():
            self.record(tx, lang, r)

    def recover(self) -> None:
        """Scan pg_prepared_xacts on every node; tx_recovered; COMMIT or ROLLBACK
        PREPARED (the TM log's decision, presumed abort) where tx_route says."""
        by_gtrid = {t.gtrid: t for t in self.txs}
        resolved: Counter = Counter()
        for node in NODES:
            for gid in self.prepared_gids(node):
                gtrid, lang = gid.rsplit(".", 1)
                try:
                    self.cluster.tx_recovered(gtrid, node)  # a second node with the same gtrid: a split
                    target = self.cluster.tx_route(gtrid).name
                except ra.Error as e:
                    self.problems.append(f"recovery: {gid} on {node}: {type(e).__name__}: {e}")
                    target = node  # the scan says where the branch is
                action = "COMMIT" if self.log.get(gtrid) == "commit" else "ROLLBACK"
                err = self.try_sql(target, f"{action} PREPARED '{gid}'")
                if err is not None:
                    self.problems.append(f"recovery: {action} PREPARED '{gid}' on {target}: {err}")
                    continue
                resolved[(node, action)] += 1
                tx = by_gtrid.get(gtrid)
                if tx is not None and lang in tx.branches:
                    tx.branches[lang].status = "recovered" if action == "COMMIT" else "rolled_back"
        for tx in self.txs:
            if tx.outcome == "in_doubt" and all(b.status != "in_doubt" for b in tx.branches.values()):
                tx.outcome = "recovered"
                self.done(tx, True)
        summary = ", ".join(f"{a} PREPARED x{c} on {n}" for (n, a), c in sorted(resolved.items())) or "nothing"
        self.notes[3].append(f"recovery pass (pg_prepared_xacts on every node, tx_recovered, tx_route): {summary}")

    # ---- reporting ---------------------------------------------------------------------

    def part_stats(self, part: int) -> Dict[str, object]:
        txs = [t for t in self.txs if t.part == part]
        per_node: Counter = Counter(b.node for t in txs for b in t.worked())
        worked = sum(per_node.values())
        st: Dict[str, object] = {
            "transactions": len(txs),
            "committed": sum(t.outcome == "committed" for t in txs),
            "committed_by_recovery": sum(t.outcome == "recovered" for t in txs),
            "rolled_back": sum(t.outcome == "rolled_back" for t in txs),
            "branches": worked,
            "split": sum(t.split for t in txs),
            "misrouted": sum(t.misrouted for t in txs),
            "per_node": {n: per_node.get(n, 0) for n in NODES},
            "failovers": sum(t.repinned for t in txs),
            "refused_strict": sum(any(b.status == "refused" for b in t.branches.values()) for t in txs),
            "in_doubt_at_crash": sum(t.group == "prepared" and t.outcome == "recovered" for t in txs),
            "in_doubt_left": self.in_doubt(),
            "on_dead_while_down": sum(b.node == DEAD for t in txs if t.group == "down" for b in t.worked()),
            "seconds": round(self.times.get(part, 0.0), 2),
            "agree": sum((b.claimed or "").upper() == t.tm_node.upper() for t in txs if t.tm_node for b in t.worked()),
            "agree_of": sum(1 for t in txs if t.tm_node for b in t.worked()),
        }
        self.stats[part] = st
        return st

    def report(self, part: int, title: str) -> None:
        st = self.part_stats(part)
        per = st["per_node"]
        total = max(1, st["branches"])  # type: ignore[arg-type]
        share = "  ".join(f"{n} {per[n]:>3} ({100 * per[n] / total:.0f}%)" for n in NODES)  # type: ignore[index]
        committed = f"{st['committed']} committed"
        if st["committed_by_recovery"]:
            committed += f", {st['committed_by_recovery']} committed by recovery"
        if st["rolled_back"]:
            committed += f", {st['rolled_back']} rolled back"
        rows = [
            ("transactions", st["transactions"], committed),
            ("branches", st["branches"], "prepared by the three clients, one per process per transaction"),
            ("split transactions", st["split"], "branches of one transaction on different nodes"),
            ("misrouted 2PC commands", st["misrouted"], "COMMIT PREPARED sent to a node without the branch"),
            ("per-node share", "", share),
            ("failovers", st["failovers"], "in-flight transactions re-pinned off the dead node before prepare"),
            ("in doubt left", st["in_doubt_left"], "pg_prepared_xacts rows on all nodes after the part"),
        ]
        if part != 2:
            rows.insert(2, ("routed like the driver", f"{st['agree']}/{st['agree_of']}",
                            "branches whose client's racaffinity chose the node the driver's chose"))
        if part == 3:
            rows.insert(7, ("refused (strict)", st["refused_strict"], "typed refusal, rolled back"))
            rows.insert(8, ("in doubt at the crash", st["in_doubt_at_crash"],
                            "prepared on RAC2; committed by the recovery pass"))
            rows.insert(9, ("branches on RAC2 while down", st["on_dead_while_down"], "new transactions after the FAN"))
        print(f"\n{title}  [{st['seconds']} s]")
        for note in self.notes[part]:
            print(f"  . {note}")
        for name, value, what in rows:
            print(f"  {name:<28} {value!s:>7}   {what}")

    def summary(self) -> None:
        s1, s2, s3 = self.stats[1], self.stats[2], self.stats[3]

        def share(st: Dict[str, object]) -> str:
            per, total = st["per_node"], max(1, st["branches"])  # type: ignore[arg-type]
            return " / ".join(f"{100 * per[n] / total:.0f}" for n in NODES) + " %"  # type: ignore[index]

        rows = [
            ("transactions", "transactions"),
            ("branches", "branches"),
            ("split transactions", "split"),
            ("misrouted 2PC commands", "misrouted"),
            ("failovers (re-pinned)", "failovers"),
            ("refused (strict)", "refused_strict"),
            ("in doubt at the crash -> recovered", "in_doubt_at_crash"),
            ("in doubt left", "in_doubt_left"),
        ]
        print("\nSummary")
        print(f"| {'':<36} | {'1 shared routing':>16} | {'2 no affinity':>16} | {'3 failover':>16} |")
        print(f"|{'-' * 38}|{'-' * 17}:|{'-' * 17}:|{'-' * 17}:|")
        for label, key in rows:
            print(f"| {label:<36} | {s1[key]!s:>16} | {s2[key]!s:>16} | {s3[key]!s:>16} |")
        print(f"| {'share RAC1 / RAC2 / RAC3':<36} | {share(s1):>16} | {share(s2):>16} | {share(s3):>16} |")

    # ---- final checks -----------------------------------------------------------------------

    def check_rows(self) -> None:
        rows: Dict[str, Counter] = {}
        for n in NODES:
            for gtrid, _lang in self.sql(n, f"SELECT gtrid, lang FROM {TABLE}"):
                rows.setdefault(gtrid, Counter())[n] += 1
        for tx in self.txs:
            got = rows.get(tx.gtrid, Counter())
            if tx.outcome in ("committed", "recovered"):
                want = Counter(b.node for b in tx.branches.values())
                if got != want or sum(got.values()) != 3:
                    self.problems.append(f"{tx.gtrid}: rows {dict(got)}, expected {dict(want)}")
            elif sum(got.values()):
                self.problems.append(f"{tx.gtrid} ({tx.outcome}): {dict(got)} rows committed")

    def sweep(self) -> int:
        """Whatever is still prepared (only after a failed check): resolve it
        where the scan finds it, per the TM log, so no run leaves locks behind."""
        n = 0
        for node in NODES:
            for gid in self.prepared_gids(node):
                action = "COMMIT" if self.log.get(gid.rsplit(".", 1)[0]) == "commit" else "ROLLBACK"
                n += self.try_sql(node, f"{action} PREPARED '{gid}'") is None
        return n

    def quit_clients(self) -> None:
        """Each client reports what its racaffinity still holds: nothing."""
        for lang, r in self.ask("QUIT").items():
            if r[1:3] != ["tx_live=0", "open=0"]:
                self.problems.append(f"{LABEL[lang]} client left state behind: {r}")
            self.clients[lang].p.wait(10)
            if self.clients[lang].p.returncode != 0:
                self.problems.append(f"{LABEL[lang]} client exited {self.clients[lang].p.returncode}")

    # ---- main -----------------------------------------------------------------------------------

    def run(self) -> int:
        t0 = time.monotonic()
        OUT.mkdir(parents=True, exist_ok=True)
        self.start_nodes()
        conf = OUT / "cluster.conf"
        conf.write_text(self.config_text())
        self.cluster = ra.Cluster(conf.read_text())
        self.reset_tables()
        self.start_clients(conf)
        print(f"racaffinity demo: 3 PostgreSQL nodes stand in for RAC instances "
              f"{', '.join(f'{n} (:{self.ports[n]})' for n in NODES)}")
        print(f"four processes load the same config ({conf.relative_to(REPO)}); rendezvous placement, "
              "transaction.strict = true; nothing else is shared")
        for lang in LANGS:
            c = self.clients[lang]
            print(f"  {LABEL[lang]:<7} pid {c.p.pid:<7} {c.banner}")
        print(f"  driver  pid {os.getpid():<7} racaffinity {ra.version()} (Python {sys.version.split()[0]}, "
              f"psycopg {psycopg.__version__}): hands out gtrids, commits with 2PC")
        print("each transaction: the C, Java and Python clients each BEGIN; INSERT; PREPARE TRANSACTION "
              "'<gtrid>.<c|java|py>' on the node racaffinity routes the gtrid to; the driver then sends "
              "COMMIT PREPARED where its own racaffinity routes it")

        self.part1()
        self.part2()
        self.part3()
        self.quit_clients()
        self.check_rows()
        self.summary()
        svg = OUT / "branches.svg"
        svg.write_text(render_svg(self))
        elapsed = time.monotonic() - t0
        s1, s2, s3 = self.stats[1], self.stats[2], self.stats[3]
        if s2["split"] == 0 or s2["misrouted"] == 0:
            self.problems.append("the contrast run found no split or no misrouted 2PC: the checks would prove nothing")
        for part, st in ((1, s1), (3, s3)):
            if st["split"] or st["misrouted"]:
                self.problems.append(f"part {part}: affinity split {st['split']} transactions, "
                                     f"misrouted {st['misrouted']} 2PC commands")
        if s3["on_dead_while_down"]:
            self.problems.append(f"{s3['on_dead_while_down']} branches went to {DEAD} after its FAN down")
        if s3["failovers"] == 0 or s3["refused_strict"] == 0 or s3["in_doubt_at_crash"] == 0:
            self.problems.append("the failover part did not catch a re-pin, a strict refusal and an in-doubt "
                                 "transaction on the dead node")
        left = self.in_doubt()
        if left:
            self.problems.append(f"{left} prepared transactions left in doubt (resolved now by a sweep: "
                                 f"{self.sweep()})")
        (OUT / "results.json").write_text(json.dumps({
            "parts": {str(k): v for k, v in self.stats.items()},
            "seconds": round(elapsed, 1),
            "problems": self.problems,
            "transactions": [
                {"part": t.part, "index": t.index, "gtrid": t.gtrid, "group": t.group, "outcome": t.outcome,
                 "tm_node": t.tm_node, "misrouted": t.misrouted,
                 "branches": {l: vars(b) for l, b in t.branches.items()}} for t in self.txs
            ],
        }, indent=1))
        print(f"\nchart: {svg.relative_to(REPO)} (split transactions, and the node of every branch); "
              f"details: {(OUT / 'results.json').relative_to(REPO)}")
        print(f"demo ran in {elapsed:.1f} s")
        if self.problems:
            print("\nDEMO FAILED:")
            for p in self.problems[:20]:
                print(f"  - {p}")
            if len(self.problems) > 20:
                print(f"  ... and {len(self.problems) - 20} more (target/demo/results.json)")
            return 1
        print("\nOK: with affinity 0 split transactions and 0 misrouted 2PC commands across three languages "
              "and four processes; without it "
              f"{s2['split']} of {s2['transactions']} split and {s2['misrouted']} commits missed; "
              "after the crash nothing is left in doubt.")
        return 0

    def cleanup(self) -> None:
        for c in self.clients.values():
            c.close()
        self.close_conns()
        if self.killed:
            subprocess.run([PGNODES, "restart", "2"], capture_output=True)
        if self.started_nodes:
            subprocess.run([PGNODES, "stop"], capture_output=True)


# ---- the chart (hand-written SVG) -----------------------------------------------------------------

COLORS = {"RAC1": "#4477aa", "RAC2": "#ee7733", "RAC3": "#228833"}
SPLIT = "#cc0000"


def render_svg(demo: Demo) -> str:
    """Per part: how many transactions split, a red mark above each one that did,
    and one column per transaction, its three branch cells (C, Java, Python)
    coloured by the node that holds them. Splits are the point of the demo, so
    they are what the eye meets first: a count in each panel's corner and a mark
    per split column (class "split"; tests/demo/chart_test.py counts them)."""
    W, left, right = 990, 84, 20
    plot_w = W - left - right
    strip_h, cells_h, gap, head = 14, 54, 34, 30
    panel_h = head + strip_h + 4 + cells_h + gap
    titles = {
        1: "1. shared routing (affinity): every column one colour",
        2: "2. no affinity: branches of one transaction on different nodes",
        3: "3. failover: RAC2 killed (FAN down), restarted (FAN up) and recovered",
    }
    H = 40 + 3 * panel_h + 30
    o: List[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="11">',
        "<defs><pattern id=\"hatch\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"4\" fill=\"#fff\" fill-opacity=\"0.6\"/>"
        "</pattern></defs>",
        f'<rect width="{W}" height="{H}" fill="#fff"/>',
        f'<text x="{left}" y="20" font-size="14" font-weight="bold">racaffinity demo: split transactions, '
        "and the node of every branch (C, Java, Python in three processes)</text>",
    ]
    lx = left
    for n, c in COLORS.items():
        o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{c}"/><text x="{lx + 14}" y="37">{n}</text>')
        lx += 60
    o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{SPLIT}"/><text x="{lx + 14}" y="37">split</text>')
    lx += 50
    o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="#ccc"/>'
             f'<text x="{lx + 14}" y="37">refused / rolled back</text>')
    lx += 140
    o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{COLORS["RAC2"]}"/>'
             f'<rect x="{lx}" y="28" width="10" height="10" fill="url(#hatch)"/>'
             f'<text x="{lx + 14}" y="37">in doubt, committed by recovery</text>')
    lx += 215
    o.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{COLORS["RAC3"]}" stroke="#000"/>'
             f'<text x="{lx + 14}" y="37">re-pinned before prepare (soft)</text>')
    for p in (1, 2, 3):
        txs = sorted((t for t in demo.txs if t.part == p), key=lambda t: t.index)
        n = max(1, len(txs))
        cw = plot_w / n
        y0 = 40 + (p - 1) * panel_h + 12
        o.append(f'<text x="{left}" y="{y0 + 14}" font-size="12" font-weight="bold">{esc(titles[p])}</text>')
        splits = sum(t.split for t in txs)
        misrouted = sum(t.misrouted for t in txs)
        color = SPLIT if splits or misrouted else "#070"
        o.append(f'<text class="headline" x="{left + plot_w}" y="{y0 + 16}" text-anchor="end" font-size="16" '
                 f'font-weight="bold" fill="{color}">{splits} of {len(txs)} split, '
                 f'{misrouted} misrouted commits</text>')
        ya = y0 + head
        yc = ya + strip_h + 4
        o.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{ya + strip_h}" y2="{ya + strip_h}" stroke="#ddd"/>')
        o.append(f'<text x="{left - 4}" y="{ya + strip_h - 3}" text-anchor="end" font-size="9" '
                 f'fill="{SPLIT}" font-weight="bold">split</text>')
        for i, t in enumerate(txs):
            if t.split:
                nodes = ", ".join(sorted({b.node for b in t.worked() if b.node}))
                o.append(f'<rect class="split" x="{left + i * cw:.1f}" y="{ya}" width="{max(cw - 0.6, 0.5):.1f}" '
                         f'height="{strip_h}" fill="{SPLIT}"><title>{esc(t.gtrid)}: split over {esc(nodes)}'
                         '</title></rect>')
        # one column per transaction: C bottom, Java middle, Python top
        ch = cells_h / 3
        for i, t in enumerate(txs):
            for row, lang in enumerate(LANGS):
                b = t.branches.get(lang)
                x, y = left + i * cw, yc + cells_h - (row + 1) * ch
                if b is None or not b.node or b.status in ("refused", "failed", "rolled_back"):
                    fill = "#ccc"
                else:
                    fill = COLORS.get(b.node, "#000")
                o.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(cw - 0.6, 0.5):.1f}" height="{ch - 0.6:.1f}" '
                         f'fill="{fill}"><title>{esc(t.gtrid)}.{lang}: {esc(str(b.node if b else "-"))} '
                         f'{esc(b.status if b else "")}</title></rect>')
                if b is not None and b.kind == "repinned" and b.node:
                    o.append(f'<rect x="{x + 0.5:.1f}" y="{y + 0.5:.1f}" width="{max(cw - 1.6, 0.5):.1f}" '
                             f'height="{ch - 1.6:.1f}" fill="none" stroke="#000" stroke-width="1"/>')
                if b is not None and b.status == "recovered":
                    o.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(cw - 0.6, 0.5):.1f}" '
                             f'height="{ch - 0.6:.1f}" fill="url(#hatch)"/>')
        for row, lang in enumerate(LANGS):
            o.append(f'<text x="{left - 4}" y="{yc + cells_h - row * ch - ch / 2 + 4:.1f}" text-anchor="end" '
                     f'font-size="9">{LABEL[lang]}</text>')
        # x axis
        for i in range(0, n, 10):
            o.append(f'<text x="{left + (i + 0.5) * cw:.1f}" y="{yc + cells_h + 12:.1f}" text-anchor="middle" '
                     f'font-size="9" fill="#555">{i}</text>')
        if p == 3:
            strict = [t.index for t in txs if t.group.startswith("open") or t.group == "prepared"]
            if strict:
                x0, x1 = left + min(strict) * cw, left + (max(strict) + 1) * cw
                o.append(f'<rect x="{x0:.1f}" y="{ya}" width="{x1 - x0:.1f}" height="{yc + cells_h - ya}" '
                         'fill="none" stroke="#555" stroke-dasharray="3,2"/>')
                o.append(f'<text x="{x0 + 3:.1f}" y="{ya - 3}" font-size="9">in flight at the kill</text>')
            for key, label, color, anchor in (("kill", "kill -9 RAC2, FAN down", "#c00", "end"),
                                              ("down_end", "restart, FAN up, recovery", "#070", "start")):
                if key in demo.markers:
                    x = left + (demo.markers[key] + 0.5) * cw
                    o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{ya - 12}" y2="{yc + cells_h + 2}" '
                             f'stroke="{color}" stroke-width="2"/>')
                    dx = -3 if anchor == "end" else 3
                    o.append(f'<text x="{x + dx:.1f}" y="{ya - 3}" fill="{color}" font-size="10" '
                             f'text-anchor="{anchor}" font-weight="bold">{label}</text>')
    o.append(f'<text x="{left + plot_w / 2}" y="{H - 8}" text-anchor="middle" fill="#555">'
             "transaction index (each column: the C, Java and Python branch of one global transaction)</text>")
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main() -> int:
    ntx = int(os.environ.get("RACAFF_DEMO_TX", "60"))
    if ntx < 60:
        print("RACAFF_DEMO_TX must be at least 60", file=sys.stderr)
        return 2
    def too_long(*_: object) -> None:
        raise SetupError("the demo took over 10 minutes (a client or node hangs?)")

    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(600)
    demo = Demo(ntx)
    try:
        return demo.run()
    except (SetupError, psycopg.OperationalError) as e:
        print(f"demo/run.py: {e}", file=sys.stderr)
        return 2
    finally:
        demo.cleanup()


if __name__ == "__main__":
    sys.exit(main())
