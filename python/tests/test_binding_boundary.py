"""Boundary defects of issue 13 [chaos-fuzz] on the Python side: auto-pin is
per context (item 4), `route()` inside a shared pin sees a concurrent release
(item 5), and a lease's exit and outcome argument give the library's typed
answers (item 7)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import time

import pytest

import racaffinity as ra
from racaffinity import _cluster

from conftest import NAMES


def live_pins(c: ra.Cluster) -> int:
    return c.metrics()["scopes"]["thread"]["live"]


@pytest.fixture
def auto(cluster_factory):
    # round_robin: consecutive new pins land on different nodes, so a pin
    # shared by mistake is visible.
    return cluster_factory(nodes=NAMES, policy="round_robin", thread_auto_pin=True)


@pytest.fixture
def rr(cluster_factory):
    return cluster_factory(nodes=NAMES, policy="round_robin")


# ---------------------------------------------------------------------------
# item 4: thread_auto_pin=True pins the context (asyncio task), not the OS thread


@pytest.mark.asyncio
async def test_auto_pin_gives_each_asyncio_task_its_own_pin(auto):
    first = {}
    errors = []

    async def task(i):
        await asyncio.sleep(0)
        with auto.pick() as lease:
            first[i] = lease.node
        for _ in range(10):
            await asyncio.sleep(0)  # interleave with the other tasks
            with auto.pick() as lease:
                if lease.node != first[i]:
                    errors.append((i, first[i], lease.node))

    await asyncio.gather(*(task(i) for i in range(6)))
    assert errors == []
    # round_robin placement: 6 independent auto-pins are spread, not one shared pin
    assert len(set(first.values())) == 3, f"every task got node {set(first.values())}: one shared OS-thread pin"


def test_auto_pin_shows_in_pinned_and_unpin_all_releases_it(auto):
    assert not auto.pinned()
    lease = auto.pick()
    lease.release()
    assert auto.pinned(), "pick() auto-pinned the context but pinned() says False"
    assert auto.route().node == lease.node
    assert live_pins(auto) == 1
    assert auto.unpin_all() is True
    assert not auto.pinned()
    assert live_pins(auto) == 0
    assert auto.unpin_all() is False  # nothing left


def test_auto_pin_by_route_pins_the_context_not_the_thread(auto):
    a, b = contextvars.copy_context(), contextvars.copy_context()
    na = a.run(lambda: auto.route().node)
    nb = b.run(lambda: auto.route().node)
    assert na != nb, "two contexts on one thread shared one auto-pin"
    assert a.run(auto.pinned) and b.run(auto.pinned) and not auto.pinned()
    assert [a.run(lambda: auto.route().node) for _ in range(5)] == [na] * 5
    assert live_pins(auto) == 2
    a.run(auto.unpin_all)
    b.run(auto.unpin_all)
    assert live_pins(auto) == 0


@pytest.mark.asyncio
async def test_auto_pin_of_a_finished_task_is_released(auto):
    async def task():
        auto.pick().release()

    await asyncio.gather(*(task() for _ in range(5)))
    # each task's context goes once the loop has run its done callbacks, and
    # with it its auto-pin
    deadline = time.monotonic() + 5
    while live_pins(auto) != 0:
        assert time.monotonic() < deadline, f"{live_pins(auto)} auto-pins of finished tasks still live"
        gc.collect()
        await asyncio.sleep(0.01)


def test_pin_scope_inside_an_auto_pin_deepens_it(auto):
    node = auto.route().node
    with auto.pin() as route:
        assert route.node == node and live_pins(auto) == 1
    assert auto.pinned() and auto.route().node == node  # the auto-pin outlives the scope
    auto.unpin_all()
    assert live_pins(auto) == 0


def test_picks_outside_a_pin_ignore_an_os_thread_pin(rr):
    """Python pins contexts, never OS threads: an OS-thread pin that other
    code (a C extension) holds on this thread must not steer its picks."""
    out = _cluster.ffi.new("racaffinity_route *")
    assert _cluster.lib.racaffinity_thread_pin(rr._h, out) == 0
    try:
        nodes = set()
        for _ in range(6):
            with rr.pick() as lease:
                nodes.add(lease.node)
            nodes.add(rr.route().node)
        assert len(nodes) > 1, f"every pick followed the OS-thread pin to node {out.node}"
        assert not rr.pinned()
    finally:
        _cluster.lib.racaffinity_thread_unpin(rr._h, _cluster.ffi.NULL)


# ---------------------------------------------------------------------------
# item 5: route() inside a shared pin sees a release that happens during the call


class _Hooked:
    """`_cluster.lib` with a hook after the first pin-context call that
    `Cluster.route()` makes (context_pin before the fix, context_route after,
    context_route_cacheable since routes are cached)."""

    def __init__(self, real, hook):
        self._real = real
        self._hook = hook

    def _wrap(self, fn):
        def call(*args):
            rc = fn(*args)
            hook, self._hook = self._hook, None
            if hook is not None:
                hook()
            return rc

        return call

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if name in ("racaffinity_context_pin", "racaffinity_context_route", "racaffinity_context_route_cacheable"):
            return self._wrap(fn)
        return fn


def test_route_in_a_shared_pin_sees_the_owner_release_it_concurrently(rr, monkeypatch):
    owner, owner_ctx = rr.pin(), contextvars.copy_context()
    route = owner_ctx.run(owner.__enter__)
    worker = owner_ctx.run(contextvars.copy_context)  # nested in the owner's scope: shares its pin
    assert worker.run(rr.pinned)
    # The owner's scope exits (in its own context) while the worker's route()
    # is inside the library.
    exit_owner = lambda: owner_ctx.run(owner.__exit__, None, None, None)  # noqa: E731
    monkeypatch.setattr(_cluster, "lib", _Hooked(_cluster.lib, exit_owner))
    got = worker.run(rr.route)
    monkeypatch.undo()
    assert got.node == route.node  # routed through the pin while it still held
    assert live_pins(rr) == 0
    assert worker.run(rr.pinned) is False, "pinned() says True but the core holds no pin"
    nodes = {worker.run(lambda: rr.pick().node) for _ in range(6)}
    assert len(nodes) > 1  # unpinned: balanced again, and says so


# ---------------------------------------------------------------------------
# item 7: Lease.__exit__ after close() and the outcome argument


def test_lease_exit_after_close_keeps_the_body_exception(cluster_factory):
    c = cluster_factory(nodes=NAMES)
    lease = c.pick()
    with pytest.raises(KeyError, match="from the body"):
        with lease:
            c.close()
            raise KeyError("from the body")


def test_lease_exit_after_close_is_quiet_like_pin_scopes(cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with c.pick():
        c.close()
    # an explicit release after close() still says so
    c = cluster_factory(nodes=NAMES)
    lease = c.pick()
    c.close()
    with pytest.raises(ra.ClosedError):
        lease.release()


def test_release_takes_outcome_names(cluster):
    for name in ("ok", "failed", "neutral", "OK"):
        lease = cluster.pick()
        lease.release(name)
        assert lease.released


def test_release_refuses_bad_outcomes_with_typed_errors(cluster):
    lease = cluster.pick()
    with pytest.raises(ra.InvalidArgumentError):
        lease.release(-1)
    with pytest.raises(ra.InvalidArgumentError, match="not one of ok, failed, neutral"):
        lease.release("bogus")
    with pytest.raises(ra.InvalidArgumentError):
        lease.release(99)
    with pytest.raises(TypeError):
        lease.release(1.5)
    assert not lease.released  # a refused outcome releases nothing
    lease.release(ra.Outcome.OK)
    assert lease.released
