"""Helpers the fault tests share: metrics read-outs, gtrids and keys placed
on a chosen node, a backend ended from outside, a table's rows counted on
every node by SQL, and a hard deadline around a client call."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict

import psycopg
import pytest

import racaffinity as ra


def node_metrics(cluster: ra.Cluster, name: str) -> Dict[str, Any]:
    return next(n for n in cluster.metrics()["nodes"] if n["name"] == name)


def live(cluster: ra.Cluster) -> int:
    """Live entries of the core's transaction registry."""
    return cluster.metrics()["scopes"]["transaction"]["live"]


def in_flight(cluster: ra.Cluster) -> int:
    """Leases in flight over every node."""
    return sum(n["in_flight"] for n in cluster.metrics()["nodes"])


def gtrid_on(cluster: ra.Cluster, name: str, prefix: str) -> str:
    """A gtrid whose global transaction (`racaffinity.tpc`'s default format
    id) the core places on node `name` (probed with tx_begin/tx_end)."""
    from racaffinity.tpc import transaction_key  # needs the postgres extra, as its callers do

    for i in range(10_000):
        g = f"{prefix}-{i}"
        placed = cluster.tx_begin(transaction_key(g)).name
        cluster.tx_end(transaction_key(g))
        if placed == name:
            return g
    raise AssertionError(f"no gtrid lands on {name}")


def key_on(cluster: ra.Cluster, name: str) -> int:
    return next(k for k in range(10_000) if cluster.route_key(k).name == name)


def terminate(pg: Any, node: str, pid: int) -> None:
    """Ends backend `pid` of `node` from a session of its own (57P01 to its
    client), as an operator or a crash of that session would."""
    with psycopg.connect(pg.dsn[node], autocommit=True, connect_timeout=5) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]


def rows_of(pg: Any, rid: str, table: str) -> Dict[str, int]:
    """node name -> how many times id `rid` is in `table` there (by SQL)."""
    out = {}
    for name, dsn in pg.dsn.items():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            out[name] = conn.execute(f"SELECT count(*) FROM {table} WHERE id = %s", (rid,)).fetchone()[0]
    return out


def within(seconds: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Runs `fn` on a daemon thread and fails the test if it has not returned
    within `seconds` (a hung client call must not hang the test)."""
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, name=f"within-{getattr(fn, '__name__', 'call')}", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__qualname__', fn)} still running after {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")
