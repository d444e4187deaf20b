"""What demo/run.py and demo/soak.py share: the node harness (tests/cluster/pgnodes, faults), SQL
straight to the nodes from the driver, and SVG text escaping. Not a library: the two scripts only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import psycopg

REPO = Path(__file__).resolve().parent.parent
PGNODES = str(REPO / "tests" / "cluster" / "pgnodes")
FAULTS = str(REPO / "tests" / "cluster" / "faults")
NODES = ["RAC1", "RAC2", "RAC3"]


class SetupError(Exception):
    pass


def run_tool(*args: str, timeout: Optional[float] = None) -> str:
    """Runs a harness tool; its stdout, or SetupError with everything it printed."""
    try:
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise SetupError(f"{' '.join(args)}: no answer within {timeout:.0f} s") from e
    if r.returncode != 0:
        raise SetupError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout.strip()


def tool_ports(tool: str, var: str, timeout: Optional[float] = None) -> Dict[str, int]:
    """Node name -> port, from `tool env` (its `export RACAFF_<var>N_PORT=...` lines)."""
    ports: Dict[str, int] = {}
    for line in run_tool(tool, "env", timeout=timeout).splitlines():
        m = re.match(rf"export RACAFF_{var}([123])_PORT=(\d+)", line)
        if m:
            ports[NODES[int(m.group(1)) - 1]] = int(m.group(2))
    return ports


def start_nodes(timeout: Optional[float] = None) -> Tuple[Dict[str, int], bool]:
    """Starts the three pgnodes nodes: their ports, and whether this call started any (then stop them)."""
    up = sum(1 for line in run_tool(PGNODES, "status", timeout=timeout).splitlines()
             if re.match(r"node[123] up ", line))
    run_tool(PGNODES, "start", "3", timeout=timeout)
    return tool_ports(PGNODES, "NODE", timeout), up < 3


def built_clients(out: Path, make_target: str) -> str:
    """The classpath of the clients demo/build.sh wrote under `out`; a
    SetupError naming the command to run when they are not built."""
    for f in (out / "client_c", out / "java.classpath"):
        if not f.exists():
            raise SetupError(f"{f.relative_to(REPO)} is missing: run demo/build.sh (or `make {make_target}`)")
    return (out / "java.classpath").read_text().strip()


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class NodeSQL:
    """The driver's own autocommit connection per node, straight to the node (never through a proxy).

    The owner sets `ports` (node -> port) and `conn_options` (extra libpq keywords)."""

    ports: Dict[str, int]
    conn_options: str

    def __init__(self) -> None:
        self.conns: Dict[str, psycopg.Connection] = {}

    def conn(self, node: str) -> psycopg.Connection:
        c = self.conns.get(node)
        if c is None or c.closed:
            c = psycopg.connect(f"host=127.0.0.1 port={self.ports[node]} user=postgres dbname=postgres "
                                f"{self.conn_options}", autocommit=True)
            self.conns[node] = c
        return c

    def sql(self, node: str, statement: str, params: Tuple = ()) -> List[Tuple]:
        """Runs a statement on a node; one reconnect if the cached connection died."""
        for attempt in range(2):
            try:
                cur = self.conn(node).execute(statement, params)
                return cur.fetchall() if cur.description else []
            except psycopg.errors.LockNotAvailable:
                raise  # the connection is fine; the lock is someone else's
            except psycopg.OperationalError:
                c = self.conns.pop(node, None)
                if c is not None:
                    try:
                        c.close()
                    except Exception:
                        pass
                if attempt:
                    raise
        return []

    def try_sql(self, node: str, statement: str) -> Optional[str]:
        """None on success, else the error's first line."""
        try:
            self.sql(node, statement)
            return None
        except psycopg.Error as e:
            return first_line(e)

    def close_conns(self) -> None:
        for c in self.conns.values():
            try:
                c.close()
            except Exception:
                pass
        self.conns.clear()
