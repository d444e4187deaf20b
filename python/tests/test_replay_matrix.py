"""The failure matrix's replay dimension ([continuity]), in Python: a fault
at each step of a request x crash / blackhole / reset / refuse x
independent nodes / RAC one database, through `NodePools(replay=True)`,
`AsyncNodePools(replay=True)`, the SQLAlchemy engine
(`create_engine(..., replay=True)`, `request(engine)`) and its asyncio
twin (`create_async_engine`, `async with request(engine)`).

Every cell holds when the request's writes are in the data exactly once if
it returned, at most once if it raised, and a raise carries a typed cause
(`ReplayRefused` with its refusal or reason); a raise whose writes did
commit must say the outcome is unknown, never "not replayed". Each cell is
also run with a mutation that replays without checking the commit in
flight (the core's CHECK_OUTCOME step answered "replay elsewhere"): the
cells where a commit can be in flight must fail then, which shows their
check can fail. The results go to target/failure-matrix/replay-python.json
(docs/continuity.md, "Failure matrix")."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Dict, Iterator, Optional, Tuple

import contextlib

import psycopg
import pytest
import sqlalchemy as sa

import racaffinity as ra
from racaffinity import ReplayAction as A
from racaffinity import ReplayStep
from racaffinity.pools import AsyncNodePools, NodePools
from racaffinity.sqlalchemy import create_async_engine, create_engine, request, route

from conftest import REPO
from faults import key_on

NAMES = ["RAC1", "RAC2", "RAC3"]
STEPS = ["before", "mid", "before_commit", "commit_lost", "after"]
FAULTS = ["crash", "blackhole", "reset", "refuse"]
MODELS = ["node", "database"]
APIS = ["pools", "sqlalchemy", "async_pools", "async_sqlalchemy"]
# A commit can be in flight at these steps: a blind replay commits twice.
IN_FLIGHT = {"commit_lost"}
CALL_TIMEOUT = 1.0
RESULTS: Dict[str, Dict[str, Any]] = {}


@pytest.fixture
def matrix_table(pg):
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            # No key: a write committed twice shows as two rows.
            conn.execute("CREATE TABLE IF NOT EXISTS py_rm (id text)")
            conn.execute("TRUNCATE py_rm")


def copies(pg, model: str, rid: str) -> int:
    """How many times `rid` was committed, over the distinct databases."""
    dsns = [pg.dsn["RAC1"]] if model == "database" else list(pg.dsn.values())
    total = 0
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            total += conn.execute("SELECT count(*) FROM py_rm WHERE id = %s", (rid,)).fetchone()[0]
    return total



class Cell:
    """One fault on RAC1 (the request's node), injected and healed."""

    def __init__(self, pg, proxies, model: str, fault: str, killed) -> None:
        self.pg, self.px, self.model, self.fault, self.killed = pg, proxies["RAC1"], model, fault, killed

    def inject(self, conn_pid: Optional[int] = None) -> None:
        if self.fault == "crash":
            if self.model == "node":
                self.pg.kill(1)
                self.killed.append(1)
            else:
                # An instance of one database crashes: its sessions end (their
                # transactions abort) and it takes no connection until restarted.
                self.px.refuse()
        elif self.fault == "blackhole":
            self.px.blackhole()
        elif self.fault == "reset":
            self.px.reset()
            time.sleep(0.2)  # the proxy's pump sees it within 50 ms
        elif self.fault == "refuse":
            # The node stops accepting connections, then ends its sessions.
            self.px.refuse()

    def at_commit(self) -> None:
        """The COMMIT runs on the server; its answer never comes back."""
        if self.fault == "blackhole":
            self.px.blackhole_after(b"COMMIT")
        elif self.fault == "reset":
            self.px.lose_reply_after(b"COMMIT")
        else:  # crash, refuse: the node is gone after it committed
            self.px.lose_reply_after(b"COMMIT", then_refuse=True)

    def heal(self) -> None:
        self.px.heal()


def blind_replay(real):
    """The mutation: the commit in flight is never checked; the core's
    CHECK_OUTCOME step is answered by a replay on another node."""

    def step(failure):
        s = real(failure)
        if s.action is A.CHECK_OUTCOME:
            other = next(i for i in range(3) if i != failure.node)
            return ReplayStep(A.REPLAY, other, None)
        return s

    return step


class PoolsClient:
    """The request through `NodePools(replay=True)`."""

    def __init__(self, c, dsns, ports) -> None:
        self.pools = NodePools(c, dsns, replay=True, min_size=1, max_size=2, timeout=5.0, connect_kwargs={"connect_timeout": 2})

    def close(self) -> None:
        self.pools.close()

    def request(self, key):
        return self.pools.request(key=key, call_timeout=CALL_TIMEOUT)

    def insert(self, req, rid: str) -> None:
        req.execute("INSERT INTO py_rm VALUES (%s)", (rid,))

    def select(self, req, rid: str) -> None:
        req.execute("SELECT count(*) FROM py_rm WHERE id = %s", (rid,)).fetchone()


class SqlaClient:
    """The same request through the SQLAlchemy engine; a connection of the
    request's node is pooled first, as NodePools' min_size=1 has one."""

    def __init__(self, c, dsns, ports) -> None:
        urls = {n: f"postgresql+psycopg://postgres@127.0.0.1:{p}/postgres" for n, p in ports.items()}
        self.engine = create_engine(
            c, urls, replay=True, pool_size=1, max_overflow=1, pool_timeout=5, connect_args={"connect_timeout": 2}
        )
        with route(key=key_on(c, "RAC1")), self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()

    def request(self, key):
        return request(self.engine, key=key, call_timeout=CALL_TIMEOUT)

    def insert(self, req, rid: str) -> None:
        req.execute(sa.text("INSERT INTO py_rm VALUES (:id)"), {"id": rid})

    def select(self, req, rid: str) -> None:
        req.execute(sa.text("SELECT count(*) FROM py_rm WHERE id = :id"), {"id": rid}).one()


class AsyncPoolsClient:
    """The request through `AsyncNodePools(replay=True)`, in an asyncio
    program (its pool workers and upkeep run while the request waits)."""

    def __init__(self, c, dsns, ports) -> None:
        self.pools = AsyncNodePools(c, dsns, replay=True, min_size=1, max_size=2, timeout=5.0,
                                    connect_kwargs={"connect_timeout": 2})

    async def open(self) -> None:
        await self.pools.open()

    async def close(self) -> None:
        await self.pools.close()

    def request(self, key):
        return self.pools.request(key=key, call_timeout=CALL_TIMEOUT)

    async def insert(self, req, rid: str) -> None:
        await req.execute("INSERT INTO py_rm VALUES (%s)", (rid,))

    async def select(self, req, rid: str) -> None:
        await (await req.execute("SELECT count(*) FROM py_rm WHERE id = %s", (rid,))).fetchone()


class AsyncSqlaClient:
    """The same request through the asyncio SQLAlchemy engine
    (`create_async_engine`, psycopg's async driver), a connection of the
    request's node pooled first as for the sync engine."""

    def __init__(self, c, dsns, ports) -> None:
        urls = {n: f"postgresql+psycopg://postgres@127.0.0.1:{p}/postgres" for n, p in ports.items()}
        self.c = c
        self.engine = create_async_engine(
            c, urls, replay=True, pool_size=1, max_overflow=1, pool_timeout=5, connect_args={"connect_timeout": 2}
        )

    async def open(self) -> None:
        with route(key=key_on(self.c, "RAC1")):
            async with self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()

    def request(self, key):
        return request(self.engine, key=key, call_timeout=CALL_TIMEOUT)

    async def insert(self, req, rid: str) -> None:
        await req.execute(sa.text("INSERT INTO py_rm VALUES (:id)"), {"id": rid})

    async def select(self, req, rid: str) -> None:
        (await req.execute(sa.text("SELECT count(*) FROM py_rm WHERE id = :id"), {"id": rid})).one()


CLIENTS = {"pools": PoolsClient, "sqlalchemy": SqlaClient,
           "async_pools": AsyncPoolsClient, "async_sqlalchemy": AsyncSqlaClient}


def one_request(client, cell, step, key, rid) -> Tuple[Optional[BaseException], int]:
    """The request with the cell's fault at its step: what it raised (None)
    and how many replays it made."""
    if step == "before":
        cell.inject()
    req = None
    try:
        with client.request(key) as req:
            client.insert(req, rid)
            if step == "mid":
                cell.inject()
            client.select(req, rid)
            if step == "before_commit":
                cell.inject()
            elif step == "commit_lost":
                cell.at_commit()
    except Exception as e:  # the cell records it; the checks judge it
        return e, getattr(req, "replays", 0)
    if step == "after":
        cell.inject()
        with client.request(key) as req2:
            client.insert(req2, rid + "-next")
    return None, req.replays


async def one_request_async(client, cell, step, key, rid) -> Tuple[Optional[BaseException], int]:
    """`one_request` in an asyncio program; the fault is injected off the
    loop (it can sleep) while the loop goes on."""
    if step == "before":
        await asyncio.to_thread(cell.inject)
    req = None
    try:
        async with client.request(key) as req:
            await client.insert(req, rid)
            if step == "mid":
                await asyncio.to_thread(cell.inject)
            await client.select(req, rid)
            if step == "before_commit":
                await asyncio.to_thread(cell.inject)
            elif step == "commit_lost":
                cell.at_commit()
    except Exception as e:  # the cell records it; the checks judge it
        return e, getattr(req, "replays", 0)
    if step == "after":
        await asyncio.to_thread(cell.inject)
        async with client.request(key) as req2:
            await client.insert(req2, rid + "-next")
    return None, req.replays


async def run_async(api, c, dsns, ports, cell, step, key, rid) -> Tuple[Optional[BaseException], int]:
    client = CLIENTS[api](c, dsns, ports)
    try:
        await client.open()
        return await one_request_async(client, cell, step, key, rid)
    finally:
        await client.close()


def run_cell(pg, proxies, cluster_factory, killed, model, step, fault, rid, mutate=False, api="pools") -> Dict[str, Any]:
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES, **({"recovery_scope": "database"} if model == "database" else {}))
    if mutate:
        c.replay_step = blind_replay(c.replay_step)
    px = proxies
    if model == "database":
        one = pg.dsn["RAC1"]
        dsns = {"RAC1": px["RAC1"].dsn(one), "RAC2": one, "RAC3": one}
        ports = {"RAC1": px["RAC1"].port, "RAC2": pg.port["RAC1"], "RAC3": pg.port["RAC1"]}
    else:
        dsns = {n: px[n].dsn(pg.dsn[n]) for n in NAMES}
        ports = {n: px[n].port for n in NAMES}
    cell = Cell(pg, px, model, fault, killed)
    key = key_on(c, "RAC1")
    started = time.monotonic()
    try:
        if api.startswith("async_"):
            raised, replays = asyncio.run(run_async(api, c, dsns, ports, cell, step, key, rid))
        else:
            client = CLIENTS[api](c, dsns, ports)
            with contextlib.closing(client):
                raised, replays = one_request(client, cell, step, key, rid)
    finally:
        cell.heal()
        if killed:
            pg.restart(killed.pop())
    n = copies(pg, model, rid)
    cause = raised.__cause__ if raised is not None else None
    typed = isinstance(cause, ra.ReplayRefused) and (cause.refusal is not None or cause.reason == "results_differ")
    refusal = getattr(cause, "refusal", None)
    if raised is None:
        holds = n == 1 and (step != "after" or copies(pg, model, rid + "-next") == 1)
        outcome = f"ok, {replays} replay(s)"
    else:
        unknown = refusal is ra.ReplayRefusal.OUTCOME_UNKNOWN
        holds = typed and n <= 1 and (n == 0 or unknown)
        outcome = f"raised {type(raised).__name__}: {getattr(refusal, 'name', None) or getattr(cause, 'reason', None) or repr(cause)}"
    return {"api": api, "model": model, "step": step, "fault": fault, "holds": bool(holds), "copies": n,
            "replays": replays, "outcome": outcome, "seconds": round(time.monotonic() - started, 2), "mutated": mutate}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("api", APIS)
def test_replay_cell(pg, proxies, cluster_factory, restart_after, matrix_table, api, model, step, fault):
    rid = f"{'' if api == 'pools' else api + '-'}{model}-{step}-{fault}"
    r = run_cell(pg, proxies, cluster_factory, restart_after, model, step, fault, rid, api=api)
    RESULTS[rid] = r
    assert r["holds"], r
    if step in IN_FLIGHT:
        # The same cell with the commit check removed must fail: a committed
        # write replayed elsewhere (two copies), or a raise that hides a commit.
        m = run_cell(pg, proxies, cluster_factory, restart_after, model, step, fault, rid + "-mutant", mutate=True, api=api)
        RESULTS[rid + "-mutant"] = m
        assert not m["holds"], ("the blind-replay mutation passed this cell", m)


@pytest.fixture(scope="module", autouse=True)
def write_results() -> Iterator[None]:
    yield
    out = REPO / "target" / "failure-matrix"
    out.mkdir(parents=True, exist_ok=True)
    cells = [RESULTS[k] for k in sorted(RESULTS)]
    (out / "replay-python.json").write_text(json.dumps({"language": "python", "cells": cells}, indent=1))
