"""`Cluster.route()` serves a pinned context's route from its pin's cache
while the library's routing epoch is unchanged. Held to the library's
answers: no cached route outlives a Down, a removal or an ejection (threads
and asyncio tasks), strict scopes refuse and soft scopes re-pin at once,
every hit is counted, and closing a cluster under cached pins is safe."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import sys
import threading
import time
from typing import Callable, Dict, List, Tuple

import pytest

import racaffinity as ra
from racaffinity._lib import ffi, lib
from racaffinity._routes import HostLease

NODES = [f"n{i}" for i in range(6)]


def thread_counter(c: ra.Cluster, field: str) -> int:
    return c.metrics()["scopes"]["thread"][field]


def test_hits_served_by_the_cache_are_counted_in_json_and_prometheus(cluster_factory):
    c = cluster_factory(nodes=NODES, name="cache")
    with c.pin() as pinned:
        for _ in range(1000):
            assert c.route().node == pinned.node
    node = next(n for n in c.metrics()["nodes"] if n["name"] == pinned.name)
    assert (node["picks"], node["affinity_hits"]) == (1001, 1000)
    assert thread_counter(c, "hits") == 1000
    assert f'racaffinity_node_affinity_hits_total{{cluster="cache",node="{pinned.name}"}} 1000' in c.metrics_prometheus()


def test_soft_repins_and_strict_refuses_at_once_after_down(cluster_factory):
    c = cluster_factory(nodes=NODES)
    with c.pin() as pinned:
        c.route()
        c.route()
        c.set_node_state(pinned.name, "down")
        r = c.route()
        assert r.node != pinned.node and r.kind == ra.RouteKind.REPINNED
    c = cluster_factory(nodes=NODES, thread_strict=True)
    with c.pin() as pinned:
        c.route()
        c.route()
        c.set_node_state(pinned.name, "down")
        with pytest.raises(ra.StrictAffinityError):
            c.route()


def test_leaving_the_pin_scope_ends_the_cached_pin(cluster_factory):
    c = cluster_factory(nodes=NODES, policy="round_robin")
    with c.pin():
        c.route()
        c.route()
    assert c.route().kind == ra.RouteKind.BALANCED


def test_a_pin_ended_under_a_cached_route_is_never_served_from_the_cache(cluster_factory):
    """Every way a pin ends stops its cache at once: `unpin_all()` in the
    context, and the scope's exit seen from a context copied inside it (a
    task or `copy_context().run` that still holds the pin object)."""
    import contextvars

    c = cluster_factory(nodes=NODES, policy="round_robin")
    with c.pin():
        c.route()
        assert c.route().kind == ra.RouteKind.AFFINITY
        hits = thread_counter(c, "hits")
        assert c.unpin_all()
        routes = [c.route() for _ in range(6)]
        assert {r.kind for r in routes} == {ra.RouteKind.BALANCED}, routes
        assert len({r.node for r in routes}) > 1, "balanced, not the old pin's node"
        assert thread_counter(c, "hits") == hits, "no hit counted for an ended pin"

    with c.pin():
        c.route()
        inside = contextvars.copy_context()  # holds the pin object
        assert inside.run(c.route).kind == ra.RouteKind.AFFINITY
    routes = [inside.run(c.route) for _ in range(6)]
    assert {r.kind for r in routes} == {ra.RouteKind.BALANCED}, routes


def test_a_pin_ended_while_its_route_is_being_cached_stays_uncached(cluster_factory):
    """Two threads sharing a pin (a context copied into a thread): one ends
    it while the other, past its `active` check, caches the route it got.
    The ended pin must not start serving that route from the cache."""
    c = cluster_factory(nodes=NODES, policy="round_robin")
    with c.pin():
        c.route()
        pin = c._pin_var.get()
        route, epoch = pin.route, pin.epoch
        assert epoch != 0
        pin.end()  # the other thread, between this one's check and its cache
        pin.cache(c._h, route, epoch)
        assert pin.epoch == 0
        assert c.route().kind == ra.RouteKind.BALANCED


class Flipper:
    """Marks nodes down and up, ejects, advises, adds and removes nodes (n0
    never changes, so a soft re-pin always has somewhere to go), logging each
    change between two ticks of a shared clock."""

    def __init__(self, c: ra.Cluster, grow: bool = True) -> None:
        self.c = c
        self.grow = grow  # False: no nodes added (node pools need a DSN per node)
        self.clock = itertools.count(1)
        self.now = 0  # the last tick handed out (read by routers)
        self.log: Dict[int, List[Tuple[int, int, bool]]] = {}
        self.stop = threading.Event()
        self.changes = 0
        self._dones: Dict[int, List[int]] = {}

    def tick(self) -> int:
        self.now = next(self.clock)
        return self.now

    def run(self) -> None:
        rnd = random.Random(0x5EED)
        added = 0
        c = self.c
        while not self.stop.is_set():
            live = [n.id for n in c.nodes if n.id != 0]
            node = rnd.choice(live)
            name = c.node_name(node)
            began = self.tick()
            op = rnd.randrange(10)
            unavailable = None
            if op <= 2:
                c.set_node_state(name, "down")
                unavailable = True
            elif op <= 5:
                c.set_node_state(name, "up")
                unavailable = False
            elif op == 6:
                for _ in range(3):
                    c.report_outcome(node, False)
                unavailable = True if c.node_state(node) == ra.NodeState.DOWN else None
            elif op == 7:
                aff = rnd.choice(["TRUE", "FALSE"])
                c.apply_event(
                    f"VERSION=1.0 database=orcl service=svc {{ {{instance={name} percent=30 flag=GOOD aff={aff}}} }} "
                    "timestamp=x"
                )
            elif op == 8 and len(live) > 3:
                c.remove_node(name)
                unavailable = True
            elif self.grow:
                added += 1
                c.add_node(f"m{added}")
            else:
                c.set_node_state(name, "up")
                unavailable = False
            done = self.tick()
            if unavailable is not None:
                self.log.setdefault(node, []).append((began, done, unavailable))
            self.changes += 1

    def down_throughout(self, node: int, begin: int, end: int) -> bool:
        """Whether `node` was unavailable for a whole route that read the clock
        as `begin` before and `end` after (ticks are handed out before a change
        starts and after it is done). Asked only once the flipper stopped."""
        log = self.log.get(node, [])
        # The change-end ticks, listed once per node: listing them per route
        # made a check of 100,000 routes against a long log quadratic (minutes).
        dones = self._dones.get(node)
        if dones is None or len(dones) != len(log):
            dones = self._dones[node] = [done for _, done, _ in log]
        i = bisect.bisect_right(dones, begin)
        return i > 0 and log[i - 1][2] and (i == len(log) or log[i][0] > end)


def check(f: Flipper, seen: List[Tuple[int, int, int]]) -> None:
    bad = [s for s in seen if f.down_throughout(s[2], s[0], s[1])]
    assert not bad, f"{len(bad)} routes returned an unavailable node, e.g. {bad[:3]}; log {f.log.get(bad[0][2])}"


# Routes go on past their count until the flipper made this many changes
# (a loaded machine may starve the flipper of the GIL), within a deadline.
MIN_CHANGES = 25
DEADLINE_S = 120.0


def keep_routing(f: "Flipper", done: int, routes: int, deadline: float) -> bool:
    if done < routes:
        return True
    if f.changes >= MIN_CHANGES or time.monotonic() >= deadline:
        return False
    # Past its count a router only waits for the flipper: at full speed it
    # would hold the GIL (its routes in a pin are pure Python) and record
    # millions of routes whose garbage collection starves the flipper further,
    # until the deadline. A short sleep hands the GIL over.
    time.sleep(0.0002)
    return True


def stress_cluster(cluster_factory) -> ra.Cluster:
    return cluster_factory(
        nodes=NODES,
        health_eject_after_failures=3,
        health_eject_backoff="1h",
        health_eject_backoff_max="1h",
    )


Step = Callable[[ra.Cluster, int], int]  # the i-th call of a router; returns the node it got


def just_route(c: ra.Cluster, i: int) -> int:
    return c.route().node


def stress_threads(c: ra.Cluster, step: Step) -> None:
    f = Flipper(c)
    routes, routers = 20_000, 4
    seen: List[Tuple[int, int, int]] = []
    errors: List[BaseException] = []
    deadline = time.monotonic() + DEADLINE_S

    def router() -> None:
        try:
            mine = []
            with c.pin():
                while keep_routing(f, len(mine), routes, deadline):
                    begin = f.now
                    node = step(c, len(mine))
                    mine.append((begin, f.now, node))
            seen.extend(mine)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    flipper = threading.Thread(target=f.run)
    flipper.start()
    threads = [threading.Thread(target=router) for _ in range(routers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    f.stop.set()
    flipper.join()
    assert not errors, errors
    assert f.changes >= MIN_CHANGES, f"the flipper made only {f.changes} changes in {DEADLINE_S} s"
    check(f, seen)
    m = c.metrics()["scopes"]["thread"]
    # Every route counted once, plus each router's pin.
    assert m["hits"] + m["placements"] + m["repins"] + m["panics"] == len(seen) + routers


def stress_tasks(c: ra.Cluster, step: Step) -> None:
    f = Flipper(c)
    routes, tasks = 5_000, 32
    seen: List[Tuple[int, int, int]] = []
    deadline = time.monotonic() + DEADLINE_S

    async def router() -> None:
        with c.pin():
            i = 0
            while keep_routing(f, i, routes, deadline):
                begin = f.now
                node = step(c, i)
                i += 1
                seen.append((begin, f.now, node))
                if i % 50 == 0:
                    await asyncio.sleep(0)  # let the other tasks route in between

    async def main() -> None:
        await asyncio.gather(*(router() for _ in range(tasks)))

    flipper = threading.Thread(target=f.run)
    flipper.start()
    try:
        asyncio.run(main())
    finally:
        f.stop.set()
        flipper.join()
    assert f.changes >= MIN_CHANGES, f"the flipper made only {f.changes} changes in {DEADLINE_S} s"
    check(f, seen)
    m = c.metrics()["scopes"]["thread"]
    assert m["hits"] + m["placements"] + m["repins"] + m["panics"] == len(seen) + tasks


def test_cached_pins_never_outlive_a_down_removal_or_ejection_threads(cluster_factory):
    stress_threads(stress_cluster(cluster_factory), just_route)


def test_cached_pins_never_outlive_a_down_removal_or_ejection_asyncio(cluster_factory):
    stress_tasks(stress_cluster(cluster_factory), just_route)


def test_closing_a_cluster_under_cached_pins_is_safe():
    for _ in range(10):
        c = ra.Cluster(nodes=NODES)
        closed = threading.Event()
        ready = threading.Barrier(5)
        wrong: List[str] = []

        def router(c: ra.Cluster) -> None:
            with c.pin():
                ready.wait()
                try:
                    while True:
                        was_closed = closed.is_set()
                        c.route()
                        if was_closed:
                            wrong.append("a route succeeded after close")
                            return
                except ra.ClosedError:
                    pass

        threads = [threading.Thread(target=router, args=(c,)) for _ in range(4)]
        for t in threads:
            t.start()
        ready.wait()
        c.close()
        closed.set()
        for t in threads:
            t.join()
        assert not wrong
        del c  # the epoch page goes with the last reference


OKS_LOCK = threading.Lock()


def route_or_lease(c: ra.Cluster, i: int, oks: Dict[str, int]) -> int:
    """Every other call a pick released OK (every tenth NEUTRAL) instead of a route."""
    if i % 2 == 0:
        return c.route().node
    lease = c.pick()
    if i % 10 == 1:
        lease.release(ra.Outcome.NEUTRAL)
    else:
        lease.release(ra.Outcome.OK)
        name = c.node_name(lease.node)
        with OKS_LOCK:  # a get and a store: another thread may run in between
            oks[name] = oks.get(name, 0) + 1
    return lease.node


def check_lease_totals(c: ra.Cluster, oks: Dict[str, int]) -> None:
    # Removed nodes leave the metrics; every live one must be exact.
    for n in c.metrics()["nodes"]:
        assert n["in_flight"] == 0, n
        assert n["successes"] == oks.get(n["name"], 0), n


def leasing(oks: Dict[str, int]) -> Step:
    return lambda c, i: route_or_lease(c, i, oks)


def test_leases_on_cached_pins_never_outlive_a_down_and_count_exactly_threads(cluster_factory):
    c = stress_cluster(cluster_factory)
    oks: Dict[str, int] = {}
    stress_threads(c, leasing(oks))
    check_lease_totals(c, oks)


def test_leases_on_cached_pins_count_exactly_asyncio(cluster_factory):
    c = stress_cluster(cluster_factory)
    oks: Dict[str, int] = {}
    stress_tasks(c, leasing(oks))
    check_lease_totals(c, oks)


def node_metrics(c: ra.Cluster, node: int) -> dict:
    name = c.node_name(node)
    return next(n for n in c.metrics()["nodes"] if n["name"] == name)


def test_a_pinned_contexts_leases_count_for_balancing_and_health(cluster_factory):
    c = cluster_factory(nodes=["a", "b"], policy="least_outstanding", health_eject_after_failures=2)
    with c.pin() as pinned:
        c.route()  # cached from here on
        held = [c.pick() for _ in range(5)]
        assert all(isinstance(lease, HostLease) for lease in held), held
        assert node_metrics(c, pinned.node)["in_flight"] == 5
        others: List[int] = []

        def unpinned() -> None:
            for _ in range(100):
                with c.pick() as lease:
                    others.append(lease.node)

        t = threading.Thread(target=unpinned)
        t.start()
        t.join()
        assert set(others) == {1 - pinned.node}, "least_outstanding must avoid the node holding 5 leases"
        for lease in held:
            lease.release()
        with pytest.raises(ra.InvalidLeaseError):
            held[0].release()
        m = node_metrics(c, pinned.node)
        assert (m["in_flight"], m["successes"]) == (0, 5)
        # Failures always reach the library: two in a row eject the pinned node.
        c.pick().release(ra.Outcome.FAILED)
        c.pick().release(ra.Outcome.FAILED)
        assert c.node_state(pinned.node) == ra.NodeState.DOWN
        assert node_metrics(c, pinned.node)["failures"] == 2


@pytest.mark.parametrize("failed, ok", [("failed", "ok"), ("FAILED", "OK"), (1, 0)])
def test_a_host_lease_released_by_outcome_name_or_number_counts_as_that_outcome(cluster_factory, failed, ok):
    """`release()` takes an `Outcome`, its name or its number
    (docs/python.md) on a `HostLease` as on any lease. A name or number
    was compared to the members by identity, so `release("failed")` was a
    NEUTRAL release: the failure never reached the library and a node that
    failed every request was never ejected; `release("ok")` counted no success."""
    assert (int(ra.Outcome.FAILED), int(ra.Outcome.OK)) == (1, 0)
    c = cluster_factory(nodes=["a", "b"], health_eject_after_failures=2)
    with c.pin() as pinned:
        c.route()  # cached from here on
        lease = c.pick()
        assert isinstance(lease, HostLease)
        lease.release(ok)
        assert node_metrics(c, pinned.node)["successes"] == 1
        for _ in range(2):
            lease = c.pick()
            assert isinstance(lease, HostLease)
            lease.release(failed)
        assert node_metrics(c, pinned.node)["failures"] == 2
        assert c.node_state(pinned.node) == ra.NodeState.DOWN


def test_a_host_lease_refuses_a_number_no_outcome_has_and_stays_held(cluster_factory):
    """A number no `Outcome` has is refused before the lease changes, as the
    library refuses it for a lease it holds: read as no outcome, it ended
    the lease as NEUTRAL and the host's error went unseen."""
    c = cluster_factory(nodes=["a", "b"])
    with c.pin() as pinned:
        c.route()  # cached from here on
        lease = c.pick()
        assert isinstance(lease, HostLease)
        with pytest.raises(ra.InvalidArgumentError, match="7 is not one of ok, failed, neutral"):
            lease.release(7)
        lease.release(ra.Outcome.OK)  # still held: this is its one release
        assert node_metrics(c, pinned.node)["successes"] == 1


def test_a_host_lease_dropped_unreleased_or_held_across_close_is_released(cluster_factory):
    c = cluster_factory(nodes=["a", "b"])
    with c.pin() as pinned:
        c.route()
        lease = c.pick()
        assert node_metrics(c, pinned.node)["in_flight"] == 1
        del lease  # released NEUTRAL when collected, as a library lease is
        assert node_metrics(c, pinned.node)["in_flight"] == 0
        first, second = c.pick(), c.pick()
    c.close()
    with first:  # exits quietly: the epoch moved at close, the library reports the close
        pass
    assert first.released
    with pytest.raises(ra.ClosedError):
        second.release()


class Crossings:
    """Counts calls into the library: every module of the binding sees a
    counting stand-in for `lib` and for each library function it bound to a
    name of its own."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: List[str] = []
        count = self.calls.append
        # cffi's functions are cdata without a name: find them by identity.
        functions = {}
        for name in dir(lib):
            v = getattr(lib, name)
            if isinstance(v, ffi.CData) and ffi.typeof(v).kind == "function":
                functions[id(v)] = name

        def counted(fn, name):
            def call(*args):
                count(name)
                return fn(*args)

            return call

        class Lib:
            def __getattr__(self, name: str):
                v = getattr(lib, name)
                return counted(v, name) if id(v) in functions else v

        stand_in = Lib()
        for mod in [m for n, m in list(sys.modules.items()) if n.startswith("racaffinity.") and m is not None]:
            for name, v in list(vars(mod).items()):
                if v is lib:
                    monkeypatch.setattr(mod, name, stand_in)
                elif id(v) in functions and getattr(lib, functions[id(v)]) is v:
                    monkeypatch.setattr(mod, name, counted(v, functions[id(v)]))

    def take(self) -> List[str]:
        calls = list(self.calls)
        self.calls.clear()
        return calls


def test_a_pick_in_a_pin_crosses_once_on_a_miss_and_for_a_draining_node(cluster_factory, monkeypatch):
    c = cluster_factory(nodes=["a", "b"])
    with c.pin() as pinned:
        crossings = Crossings(monkeypatch)
        lease = c.pick()  # nothing cached yet: one crossing, and the host leases
        assert len(crossings.take()) == 1
        assert isinstance(lease, HostLease)
        lease.release()
        with c.pick():
            pass
        assert crossings.take() == [], "a hit and its OK release stay in Python"
        c.set_node_state(pinned.name, "draining")  # never cacheable: its pin ends by the clock
        crossings.take()
        for _ in range(3):
            lease = c.pick()
            assert lease.node == pinned.node and not isinstance(lease, HostLease)
            assert len(crossings.take()) == 1, "one crossing per pick on a draining node"
            lease.release()
            assert len(crossings.take()) == 1, "its release reports the outcome"
        with pytest.raises(ra.InvalidLeaseError):
            lease.release()  # the library tracks its lease: a second release is refused there
        assert crossings.take()[0] == "racaffinity_lease_release"
    m = node_metrics(c, pinned.node)
    assert (m["in_flight"], m["successes"]) == (0, 5)


def test_a_host_lease_in_flight_at_an_ejection_is_discounted_not_taken_for_the_trial(cluster_factory):
    # As rust/core/tests/host_leases.rs: a lease begun before the ejection
    # ends after it, so its OK must reach the library's breaker (which
    # discounts it as stale), never be counted in the page as if the epoch
    # had not moved: the half-open trial alone decides.
    c = cluster_factory(nodes=["a", "b"], health_eject_after_failures=1, health_eject_backoff="200ms")
    with c.pin() as pinned:
        c.route()  # cached from here on
        stale = c.pick()
        assert isinstance(stale, HostLease)
        c.report_outcome(pinned.node, False)  # one failure ejects here
        assert c.node_state(pinned.node) == ra.NodeState.DOWN
        time.sleep(0.3)  # past the backoff: the next balanced pick of the node is the trial

        trial: List[ra.Lease] = []

        def pick_until_the_trial() -> None:
            for _ in range(10_000):
                lease = c.pick()
                if lease.node == pinned.node:
                    trial.append(lease)
                    return
                lease.release(ra.Outcome.NEUTRAL)

        t = threading.Thread(target=pick_until_the_trial)  # unpinned
        t.start()
        t.join()
        assert trial, "no trial pick of the ejected node"
        stale.release(ra.Outcome.OK)
        assert c.node_state(pinned.node) == ra.NodeState.DOWN, "a lease begun before the ejection is no trial"
        m = node_metrics(c, pinned.node)
        assert (m["in_flight"], m["successes"], m["ejections"]) == (1, 1, 1), "the trial is in flight; the stale OK counts"
        trial[0].release(ra.Outcome.OK)
        assert c.node_state(pinned.node) == ra.NodeState.UP, "the trial's own success lifts it"
        m = node_metrics(c, pinned.node)
        assert (m["in_flight"], m["successes"]) == (0, 2)
