"""Context pins: correct for threads and for asyncio tasks sharing a thread;
nothing leaks (the core's live thread-scope count returns to 0)."""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import racaffinity as ra

from conftest import NAMES


def live_pins(c: ra.Cluster) -> int:
    return c.metrics()["scopes"]["thread"]["live"]


@pytest.fixture
def rr(cluster_factory):
    # round_robin: consecutive new pins land on different nodes, so a pin
    # shared by mistake is visible.
    return cluster_factory(nodes=NAMES, policy="round_robin")


def test_pin_keeps_every_pick_on_one_node(rr):
    with rr.pin() as route:
        assert route.kind == ra.RouteKind.PLACED
        for _ in range(20):
            with rr.pick() as lease:
                assert lease.node == route.node and lease.kind == ra.RouteKind.AFFINITY
    assert live_pins(rr) == 0
    assert len({rr.pick().node for _ in range(6)}) > 1  # unpinned again


def test_nested_scopes_deepen_one_pin(rr):
    with rr.pin() as outer:
        with rr.pin() as inner:
            assert inner.node == outer.node and inner.kind == ra.RouteKind.AFFINITY
            assert live_pins(rr) == 1
        assert rr.pinned() and rr.pick().node == outer.node
    assert not rr.pinned() and live_pins(rr) == 0


def test_pin_scope_object_is_single_use_at_a_time(rr):
    scope = rr.pin()
    with scope:
        with pytest.raises(RuntimeError):
            scope.__enter__()
    with scope:  # reusable after exit
        pass
    assert live_pins(rr) == 0


def test_pin_released_on_exception(rr):
    with pytest.raises(KeyError):
        with rr.pin():
            raise KeyError("x")
    assert live_pins(rr) == 0


def test_pins_of_two_clusters_are_independent(cluster_factory):
    a = cluster_factory(nodes=NAMES, policy="round_robin")
    b = cluster_factory(nodes=NAMES, policy="round_robin")
    with a.pin() as pa:
        assert not b.pinned()
        with b.pin() as pb:
            assert a.pick().node == pa.node and b.pick().node == pb.node
        assert not b.pinned() and a.pinned()
    assert live_pins(a) == live_pins(b) == 0


def test_many_threads_each_keep_their_own_pin(rr):
    errors = []
    barrier = threading.Barrier(16)

    def worker(i):
        try:
            barrier.wait()
            for _ in range(30):
                with rr.pin() as route:
                    seen = set()
                    for _ in range(20):
                        with rr.pick() as lease:
                            seen.add(lease.node)
                    if seen != {route.node}:
                        errors.append((i, route.node, seen))
                    assert rr.pinned()
                if rr.pinned():
                    errors.append((i, "still pinned"))
                # an unpinned pick in between must not reuse anything
                rr.pick().release()
        except Exception as e:  # pragma: no cover - reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert live_pins(rr) == 0
    assert sum(n["in_flight"] for n in rr.metrics()["nodes"]) == 0


def test_a_thread_does_not_inherit_the_pin_of_its_creator(rr):
    with rr.pin():
        seen = []
        t = threading.Thread(target=lambda: seen.append(rr.pinned()))
        t.start()
        t.join()
        pool_seen = ThreadPoolExecutor(2).submit(rr.pinned).result()
    assert seen == [False] and pool_seen is False


def test_copied_context_in_a_thread_shares_the_scope_it_was_copied_in(rr):
    with rr.pin() as route:
        ctx = contextvars.copy_context()
        with ThreadPoolExecutor(1) as ex:
            assert ex.submit(ctx.run, lambda: rr.pick().node).result() == route.node
    # the scope ended: the copied context stops using the pin
    assert ctx.run(rr.pinned) is False
    assert live_pins(rr) == 0


@pytest.mark.asyncio
async def test_concurrent_tasks_on_one_thread_keep_separate_pins(rr):
    nodes_by_task = {}
    errors = []

    async def task(i):
        await asyncio.sleep(random.random() / 100)
        with rr.pin() as route:
            nodes_by_task[i] = route.node
            for _ in range(10):
                await asyncio.sleep(0)  # interleave with the other tasks
                n = rr.pick()
                n.release()
                if n.node != route.node:
                    errors.append((i, route.node, n.node))
        if rr.pinned():
            errors.append((i, "still pinned"))

    await asyncio.gather(*(task(i) for i in range(60)))
    assert errors == []
    # round_robin placement: 60 independent pins are spread, not shared
    assert len(set(nodes_by_task.values())) == 3
    assert live_pins(rr) == 0


async def child_outliving_parent_scope(rr, child, ready, release):
    """Runs `child` as a task started inside a pin scope of its parent; the parent leaves its
    scope once `ready` is set, then sets `release` and waits for the child. Returns the parent's
    route."""
    with rr.pin() as parent_route:
        t = asyncio.create_task(child())
        await ready.wait()
    release.set()
    await t
    return parent_route


@pytest.mark.asyncio
async def test_a_task_created_inside_a_pin_scope_shares_it_until_the_scope_ends(rr):
    """A child task is nested in its creator's scope, so it shares the pin;
    once the last scope holding it exits, the child stops using it (and
    a new scope in the child pins anew instead of reviving the old key)."""
    release_parent = asyncio.Event()
    child_checked = asyncio.Event()
    results = {}

    async def child():
        results["inherited"] = rr.pick().node
        child_checked.set()
        await release_parent.wait()
        await asyncio.sleep(0)
        results["after_parent_exit_pinned"] = rr.pinned()
        with rr.pin() as own:
            results["own"] = own
            results["own_live"] = live_pins(rr)

    parent_route = await child_outliving_parent_scope(rr, child, child_checked, release_parent)
    assert results["inherited"] == parent_route.node
    assert results["after_parent_exit_pinned"] is False
    assert results["own"].kind == ra.RouteKind.PLACED  # a new pin, not the parent's
    assert results["own_live"] == 1
    assert live_pins(rr) == 0


@pytest.mark.asyncio
async def test_a_child_that_nests_its_own_scope_keeps_the_shared_pin_alive(rr):
    inside = asyncio.Event()
    go = asyncio.Event()
    out = {}

    async def child():
        with rr.pin() as r:  # nested in the parent's scope: deepens the same pin
            out["child"] = r
            inside.set()
            await go.wait()
            out["after_parent"] = rr.pick().node  # parent exited; still pinned here
            out["live"] = live_pins(rr)

    parent_route = await child_outliving_parent_scope(rr, child, inside, go)
    assert out["child"].node == parent_route.node
    assert out["after_parent"] == parent_route.node and out["live"] == 1
    assert live_pins(rr) == 0


@pytest.mark.asyncio
async def test_tasks_started_outside_a_scope_never_share(rr):
    async def pinned_node():
        with rr.pin() as r:
            await asyncio.sleep(0.001)
            return r.node, rr.pick().node

    with rr.pin():
        pass  # a finished scope leaves nothing behind for tasks
    pairs = await asyncio.gather(*(pinned_node() for _ in range(9)))
    assert all(a == b for a, b in pairs)
    assert sorted(a for a, _ in pairs) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert live_pins(rr) == 0


def test_threads_and_tasks_together_never_leak(rr):
    # A thread's exception (a failed assert in a task included) never reaches
    # the test by itself: each thread reports how its loop ended.
    errors = []
    finished = []

    async def tasks():
        async def one():
            for _ in range(5):
                with rr.pin() as r:
                    await asyncio.sleep(0)
                    assert rr.pick().node == r.node
        await asyncio.gather(*(one() for _ in range(20)))

    def run() -> None:
        try:
            asyncio.run(tasks())
            finished.append(True)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(finished) == 6, errors
    assert live_pins(rr) == 0


def test_pinned_node_going_down_repins(rr):
    with rr.pin() as r:
        rr.set_node_state(r.name, "down")
        lease = rr.pick()
        assert lease.node != r.node and lease.kind == ra.RouteKind.REPINNED
        lease.release()
        assert rr.pick().node == lease.node
    assert live_pins(rr) == 0


def test_strict_pin_refuses_when_its_node_is_down(cluster_factory):
    c = cluster_factory(nodes=NAMES, thread_strict=True)
    with c.pin() as r:
        c.set_node_state(r.name, "down")
        with pytest.raises(ra.StrictAffinityError):
            c.pick()
    assert live_pins(c) == 0
