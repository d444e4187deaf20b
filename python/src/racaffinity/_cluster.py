"""The cluster: one database's nodes, policy and affinity registries.
Routes and leases live in `_routes`, context-local scopes in `_scopes`,
argument conversion in `_args`.

Every routing decision is the core's: this module converts arguments, calls
libracaffinity and maps result codes to exceptions (`_errors.EXCEPTIONS`).
"""

from __future__ import annotations

import contextvars
import itertools
import json
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _config
from ._args import U32_MAX as _U32_MAX
from ._args import BytesLike, DataKey
from ._args import bool_arg as _bool_arg
from ._args import bytes_arg as _bytes_arg
from ._args import cstr as _cstr
from ._args import enum_arg as _enum_arg
from ._args import i64_arg as _i64_arg
from ._errors import (
    BUFFER_TOO_SMALL,
    UNKNOWN_NODE,
    InvalidArgumentError,
    KeyOverflowError,
    NoNodeAvailableError,
    StrictAffinityError,
    keeping_last_error,
    raise_for,
)
from ._lib import NULL, ffi, lib
from ._routes import HOST_LEASE_BASE as _HOST_LEASE_BASE
from ._routes import HOST_LEASE_NODES as _HOST_LEASE_NODES
from ._routes import PAGE_BYTES as _PAGE_BYTES
from ._routes import KINDS as _KINDS
from ._routes import HostLease, Lease, Node, NodeState, Route, Scope
from ._routes import STATES as _STATES
from ._routes import lease_begin as _lease_begin
from ._routes import context_pick as _context_pick
from ._routes import new_ as _new
from ._routes import pick_host_leasable as _pick_host_leasable
from ._routes import route_of as _route
from ._scopes import SESSION as _SESSION
from ._scopes import TX as _TX
from ._scopes import PinScope, SessionScope, Transaction, _Pin
from ._scopes import context_call as _context_call
from ._scopes import slot as _slot
from ._token import SessionRouting, TokenChoice, TokenRoute
from ._weak import members

if TYPE_CHECKING:  # pragma: no cover
    from ._continuity import ReplayStep, RequestFailure
    from ._ucp import AffinityContext

__all__ = ["Cluster", "version", "read_text"]


def version() -> str:
    """The native library's version (`racaffinity_version`)."""
    return ffi.string(lib.racaffinity_version()).decode()


# ---------------------------------------------------------------------------
# the cluster


_new_host_lease = HostLease.__new__
_serials = itertools.count(1)


def read_text(fill: Any, cap: int = 4096, fail: Any = None) -> str:
    """Reads a NUL-terminated string that the library writes into a caller
    buffer, growing the buffer on BUFFER_TOO_SMALL. `fill(buf, cap, out_len)`
    makes the call; `fail(rc)` raises for any other code (default `raise_for`)."""
    fail = fail or raise_for
    out_len = _new("size_t *")
    for _ in range(16):
        buf = _new("char[]", cap)
        rc = fill(buf, cap, out_len)
        if rc == 0:
            return ffi.string(buf).decode("utf-8")
        if rc != BUFFER_TOO_SMALL:
            fail(rc)
        cap = int(out_len[0]) + int(out_len[0]) // 8 + 256  # counters move: some slack
    fail(BUFFER_TOO_SMALL)
    raise AssertionError("unreachable")  # pragma: no cover


def _request_span(b: bytes, what: str) -> Any:
    """A `uint8_t[]` view of `b` for a `racaffinity_route_request` field. A
    zero length there means "none", so an empty key would silently become
    no key rather than the error every other call gives it."""
    if not b:
        raise InvalidArgumentError(f"{what} is empty")
    return ffi.from_buffer("uint8_t[]", b)


# Host leases change the library's page with plain read-modify-writes, which
# only the GIL makes safe (a free-threaded build leases through the library).
_HOST_LEASES = getattr(sys, "_is_gil_enabled", lambda: True)()


class Cluster:
    """One database's nodes, policy and affinity registries: a handle on a
    `racaffinity_cluster`.

    `Cluster("nodes = A, B\\ntransaction.strict = true")` takes the config
    text of the README; keyword arguments write the same text (`nodes=["A",
    "B"]`, `policy="random"`, `transaction_strict=True`, `node_addresses={"A":
    "h1:1521"}`, `node_machines={"A": "m1"}`, `heartbeat_interval=0.2` seconds
    or `"200ms"`, …) and may be combined with it. Close it (or use it as a context manager) to free the
    native handle; any use after `close()` raises `ClosedError`.
    """

    def __init__(self, config: Union[str, bytes, None] = None, **kwargs: Any) -> None:
        self._closed = True  # until the handle exists (for __del__)
        self._serial = next(_serials)
        # This cluster's pin of the current context (see _scopes).
        self._pin_var: contextvars.ContextVar[Optional[_Pin]] = contextvars.ContextVar(
            f"racaffinity_pin_{self._serial}", default=None
        )
        self._names: Dict[int, str] = {}
        self._close_lock = threading.Lock()
        if isinstance(config, (bytes, bytearray)) and not kwargs:
            raw = _cstr(config, "config")
            try:
                self._text = raw.decode("utf-8")
            except UnicodeDecodeError:
                self._text = ""
        else:
            if config is not None and not isinstance(config, str):
                raise TypeError(f"config must be str, not {type(config).__name__}")
            self._text = _config.build(config, kwargs)
            raw = _cstr(self._text, "config")
        out = _new("racaffinity_cluster **")
        rc = lib.racaffinity_cluster_new(raw, out)
        if rc:
            raise_for(rc)
        self._h = out[0]
        self._closed = False
        auto = _new("bool *")
        rc = lib.racaffinity_cluster_auto_pin(self._h, auto)
        if rc:
            raise_for(rc)
        self._auto_pin = bool(auto[0])
        # The routing epoch word (see Cluster.route). The page behind it is
        # freed with this cdata, not at close(): a thread may read it after
        # another closed the cluster.
        word = _new("const uint64_t **")
        page = _new("racaffinity_epoch_page **")
        rc = lib.racaffinity_cluster_epoch_page(self._h, word, page)
        if rc:
            raise_for(rc)
        # The buffers below keep this cdata alive; its finalizer frees the
        # hand-out (never the word's address: a later page may reuse it).
        hand_out = page[0]
        self._epoch = ffi.gc(word[0], lambda _w: lib.racaffinity_epoch_page_free(hand_out))
        # Indexing a memoryview is cheaper than indexing the cdata pointer;
        # the cdata above keeps the memory it views alive.
        self._epoch_word = memoryview(ffi.buffer(self._epoch, 8)).cast("Q")
        # The whole page: the epoch word, then the host lease table (HostLease).
        self._page = memoryview(ffi.buffer(self._epoch, _PAGE_BYTES)).cast("Q")
        # Pins that cached a route: their hits are merged before metrics are read.
        self._cached_pins: "weakref.WeakSet[Any]" = weakref.WeakSet()

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Frees the native handle. Idempotent; calls from other threads that
        race with it finish on the old cluster or raise `ClosedError`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        lib.racaffinity_cluster_free(self._h)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._closed = True
                keeping_last_error(lib.racaffinity_cluster_free, self._h)
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self._closed:
            return "<racaffinity.Cluster closed>"
        try:
            names = ", ".join(n.name for n in self.nodes)
        except Exception:
            names = "?"
        return f"<racaffinity.Cluster nodes=[{names}]>"

    def _raise(self, rc: int) -> None:
        raise_for(rc, closed=self._closed)

    def _call(self, fn: Any, *args: Any) -> None:
        """`fn(handle, *args)`, raising the error its result code names."""
        rc = fn(self._h, *args)
        if rc:
            self._raise(rc)

    def _out(self, ctype: str, fn: Any, *args: Any) -> Any:
        """`fn(handle, *args, out)` with a new `ctype` out-parameter, returned."""
        out = _new(ctype)
        self._call(fn, *args, out)
        return out

    # -- config ------------------------------------------------------------

    @property
    def config_text(self) -> str:
        """The config text the cluster was built from."""
        return self._text

    def _heartbeat(self) -> Tuple[int, int]:
        interval, misses = _new("uint64_t *"), _new("uint32_t *")
        self._call(lib.racaffinity_cluster_heartbeat, interval, misses)
        return int(interval[0]), int(misses[0])

    @property
    def heartbeat_interval(self) -> float:
        """`heartbeat.interval` in seconds (10.0 by default), as the core parsed it."""
        return self._heartbeat()[0] / 1000.0

    @property
    def heartbeat_misses(self) -> int:
        """`heartbeat.misses` (3 by default), as the core parsed it."""
        return self._heartbeat()[1]

    # -- seed 002 (UCP) parity (racaffinity._ucp) ----------------------------

    def affinity_context(self, scope: Union[Scope, str, int]) -> "AffinityContext":
        """A new, unpinned pin context that follows `scope`'s rules (UCP's
        connection affinity context; see `racaffinity._ucp.AffinityContext`):
        TRANSACTION obeys `transaction.strict`, SESSION obeys `session.strict`
        and is released by an `aff=FALSE` advisory."""
        from ._ucp import AffinityContext

        return AffinityContext(self, _enum_arg(scope, Scope, "scope"))

    def replace_partition_map(self, mapping: Mapping[int, str], source: str = "loader") -> int:
        """Replaces the whole explicit partition -> node map in one step
        (`racaffinity_partition_map_replace`); returns the map's new epoch.
        Partitions left out fall back to placement; any bad entry changes
        nothing. `source` names the producer in the metrics."""
        items = list(mapping.items())
        parts = _new("uint32_t[]", max(1, len(items)))
        names = _new("const char *[]", max(1, len(items)))
        keep = []
        for i, (p, n) in enumerate(items):
            if not isinstance(p, int) or isinstance(p, bool):
                raise TypeError(f"partition must be an int, not {type(p).__name__}")
            if not 0 <= p <= _U32_MAX:
                raise InvalidArgumentError(f"partition {p} is out of range")
            parts[i] = p
            b = _new("char[]", _cstr(n, "node name"))
            keep.append(b)
            names[i] = b
        epoch = _new("uint64_t *")
        self._call(lib.racaffinity_partition_map_replace, parts, names, len(items), _cstr(source, "source"), epoch)
        return int(epoch[0])

    def partition_map_load_failed(self, source: str, error: str) -> None:
        """Records that the application's partition-map loader `source`
        failed with `error` (`racaffinity_partition_map_load_failed`): the map
        in force stays, and the metrics count the failure and keep the
        message (`partition_map.load_failures`, `last_error`)."""
        rc = lib.racaffinity_partition_map_load_failed(self._h, _cstr(source, "source"), _cstr(error, "error"))
        if rc:
            self._raise(rc)

    @property
    def recovery_scope(self) -> str:
        """`recovery.scope`: ``"node"`` (independent databases: scan every node,
        complete each id where it was found) or ``"database"`` (instances of one
        database, as on RAC: any answering instance lists and completes every id)."""
        out = _new("racaffinity_recovery_scope *")
        self._call(lib.racaffinity_cluster_recovery_scope, out)
        return "database" if int(out[0]) == lib.RACAFFINITY_RECOVERY_SCOPE_DATABASE else "node"

    # -- continuity (docs/continuity.md) ------------------------------------

    def replay_step(self, failure: "RequestFailure") -> "ReplayStep":
        """The next step for a failed request (`racaffinity_replay_decide`):
        check the outcome of a commit in flight on a node, force it, replay
        once on a node, report success, or give up with a typed refusal. A
        pure decision that changes nothing: ask again after each step with
        what it learned (`failure.with_(outcome=...)`). UnknownNodeError for
        a node id this cluster never had."""
        from ._continuity import replay_decide

        return replay_decide(self, failure)

    # -- session routing tokens (seed 001, WebLogic) -----------------------

    def session_routing(self, key: BytesLike) -> SessionRouting:
        """The routing data a new session with `key` gets: the first node of
        the key's rendezvous ranking that takes new work, and as backup the
        next one on another machine (`node.<N>.machine`, default the host of
        its address), else any other usable node, else None."""
        k = _bytes_arg(key, "session key")
        primary, backup = _new("uint32_t *"), _new("uint32_t *")
        self._call(lib.racaffinity_session_routing, k, len(k), primary, backup)
        p, b = int(primary[0]), int(backup[0])
        if b == int(lib.RACAFFINITY_NO_NODE):
            return SessionRouting(p, self.node_name(p), None, None)
        return SessionRouting(p, self.node_name(p), b, self.node_name(b))

    def session_token(self, session_id: str) -> str:
        """A new token for `session_id`: `<session-id>!ra1.<primary>.<backup>`
        (cookie-safe; every binding and process reads it the same way)."""
        sid = _cstr(session_id, "session id")
        cap = len(sid) + int(lib.RACAFFINITY_TOKEN_EXTRA_BYTES) + 1
        return self._read_text(lambda b, c, n: lib.racaffinity_session_token_new(self._h, sid, b, c, n), cap)

    def route_token(self, token: str) -> TokenRoute:
        """Routes a request carrying `token` by seed 001's rules (the primary;
        else the backup is promoted and a new backup chosen; with both gone a
        fresh pair; an empty backup slot is filled when a node is back; strict
        session mode raises `StrictAffinityError` instead). The result's
        `token` is the rewritten token, or None when the client's still holds."""
        t = _cstr(token, "token")
        out = _new("racaffinity_route *")
        changed = _new("bool *")
        # The header's bound: a token whose backup slot is empty gains one (4
        # bytes). Sized right the first time, since the library routes (and
        # counts the route) before it can say that a buffer is too small.
        text = self._read_text(
            lambda b, c, n: lib.racaffinity_session_token_route(self._h, t, out, b, c, n, changed), len(t) + 5
        )
        return TokenRoute(_route(self, out), text if changed[0] else None)

    def route_tokens(self, tokens: Sequence[str]) -> Optional[TokenChoice]:
        """Routes a request that carries several tokens, given in the order
        the client sent them (a browser sends one cookie per path it holds,
        the longest path first, so a stale token may come before the current
        one): the core chooses the first that names a node of this cluster
        as primary or backup, else the first well-formed one, and routes it
        as `route_token` does (docs/wls-routing.md). Returns the
        `TokenChoice`, whose `route` raises a refusal (strict session mode,
        every node down); None when no token is well-formed: start a new
        session (`session_token`)."""
        tokens = list(tokens)
        held = []
        for t in tokens:
            try:
                held.append(_cstr(t, "token"))
            except InvalidArgumentError:
                held.append(b"")  # no text (a NUL, a lone surrogate): a token of no cluster
        keep = [_new("char[]", b) for b in held]
        array = _new("const char *[]", keep) if keep else NULL
        index = _new("size_t *", len(held) + 1)
        out = _new("racaffinity_route *")
        changed = _new("bool *")
        # The header's bound, so the route (counted) is made once.
        cap = max((len(b) for b in held), default=0) + 5
        try:
            text = self._read_text(
                lambda b, c, n: lib.racaffinity_session_tokens_route(
                    self._h, array, len(held), index, out, b, c, n, changed
                ),
                cap,
            )
        except InvalidArgumentError:
            if int(index[0]) == len(held):
                return None
            raise
        except (StrictAffinityError, NoNodeAvailableError) as refused:
            i = int(index[0])
            return TokenChoice(i, tokens[i], None, refused)
        i = int(index[0])
        return TokenChoice(i, tokens[i], TokenRoute(_route(self, out), text if changed[0] else None), None)

    def node_address(self, node: Union[int, str]) -> Optional[str]:
        """The node's configured `host:port` (None if unset)."""
        node = self.node_id(node)
        text = self._read_text(lambda b, c, n: lib.racaffinity_node_address(self._h, node, b, c, n), 72)
        return text or None

    # -- nodes -------------------------------------------------------------

    def node_id(self, node: Union[int, str]) -> int:
        """The id of a node given by name (case-insensitive) or id."""
        if isinstance(node, str):
            out = self._out("uint32_t *", lib.racaffinity_node_find, _cstr(node, "node name"))
            return int(out[0])
        if isinstance(node, int) and not isinstance(node, bool):
            if not 0 <= node <= _U32_MAX:
                raise KeyOverflowError(f"node id {node} is out of range")
            return node
        raise TypeError(f"node must be a name (str) or an id (int), not {type(node).__name__}")

    def node_name(self, node: int) -> str:
        """The name of node id `node` (removed nodes keep theirs)."""
        # Only an int reads the cache: True and 1.0 are equal to 1 as dict
        # keys, and node_id refuses them (TypeError).
        if type(node) is int:
            name = self._names.get(node)
            if name is not None:
                return name
        node = self.node_id(node)
        text = self._read_text(lambda b, c, n: lib.racaffinity_node_name(self._h, node, b, c, n), 72)
        self._names[node] = text
        return text

    @property
    def nodes(self) -> List[Node]:
        """The live nodes in id order."""
        count = _new("uint32_t *")
        self._call(lib.racaffinity_cluster_node_count, count)
        out: List[Node] = []
        want = int(count[0])
        for i in itertools.count():
            if len(out) >= want:
                break
            try:
                name = self.node_name(i)
            except Exception as e:  # past the last id
                if getattr(e, "code", None) == UNKNOWN_NODE:
                    break
                raise
            try:
                live = self.node_id(name) == i
            except LookupError:
                live = False
            if live:
                out.append(Node(i, name, self.node_state(i)))
        return out

    def __len__(self) -> int:
        count = _new("uint32_t *")
        self._call(lib.racaffinity_cluster_node_count, count)
        return int(count[0])

    def node_state(self, node: Union[int, str]) -> NodeState:
        """A node's current state (a removed node reads as DOWN)."""
        out = self._out("racaffinity_node_state *", lib.racaffinity_node_get_state, self.node_id(node))
        state: NodeState = _STATES[out[0]]
        return state

    def node_down_is_planned(self, node: Union[int, str]) -> bool:
        """Whether the node is Down at the end of a planned drain (its
        deadline passed, or the operator's Down came while it drained; or it
        was removed while it drained): connections in use on it may finish
        their requests. False while Up or Draining, and for a Down by a
        failure (FAN failure, missed heartbeats, ejection, the operator's
        Down of a node taking work)."""
        out = self._out("bool *", lib.racaffinity_node_down_is_planned, self.node_id(node))
        return bool(out[0])

    def set_node_state(self, name: str, state: Union[NodeState, str, int]) -> None:
        """Sets a node's state as an operator would (`up`, `draining`, `down`)."""
        st = _enum_arg(state, NodeState, "state")
        self._call(lib.racaffinity_node_set_state, _cstr(name, "node name"), st)

    def add_node(self, name: str, address: Optional[str] = None, weight: int = 1) -> int:
        """Adds a node at runtime; returns its id."""
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise TypeError(f"weight must be an int, not {type(weight).__name__}")
        if not 1 <= weight <= _U32_MAX:
            raise InvalidArgumentError(f"weight must be 1..=1000000, got {weight}")
        addr = NULL if address is None else _cstr(address, "address")
        out = self._out("uint32_t *", lib.racaffinity_node_add, _cstr(name, "node name"), addr, weight)
        return int(out[0])

    def remove_node(self, name: str) -> None:
        """Removes a node; affinities to it break as if it were down."""
        self._call(lib.racaffinity_node_remove, _cstr(name, "node name"))

    def set_strict(self, scope: Union[Scope, str, int], strict: bool) -> None:
        """Switches a scope (`thread`, `transaction`, `session`, `data`) between strict and soft."""
        sc = _enum_arg(scope, Scope, "scope")
        self._call(lib.racaffinity_cluster_set_strict, sc, _bool_arg(strict, "strict"))

    # -- picks, pins and leases ---------------------------------------------

    def pick(self) -> Lease:
        """Picks a node for the current context (its pin, else load balancing;
        with `thread_auto_pin` a new pin of the context) and leases it.
        Release the lease (or use it as a context manager)."""
        pin = self._pin_var.get()
        if pin is not None and _HOST_LEASES:
            # Pinned: a host lease on the cached route (see HostLease).
            page = self._page
            epoch = page[0]
            if pin.epoch == epoch:  # never so for an ended pin
                route = pin.route
                node = route.node
                if node < _HOST_LEASE_NODES:
                    pin.hits += 1
                    page[_HOST_LEASE_BASE + node] += 1
                    # HostLease(self, node, route.kind, epoch) without its
                    # __init__ frame, which cost a fifth of this path.
                    lease = _new_host_lease(HostLease)
                    lease._cluster = self
                    lease.node = node
                    lease.kind = route.kind
                    lease._live = epoch
                    return lease
            if pin.active:
                return self._pick_host_leasable(epoch)
        buf = _new("racaffinity_lease *")
        _context_call(self, _context_pick, buf)
        return Lease(self, buf)

    def route(self) -> Route:
        """Routes the current context's next unit of work without leasing
        (`racaffinity_context_route`: a pin released meanwhile is not revived).

        A pinned context's route is served from its pin's cache, without
        calling the library, while nothing that could alter a route has
        changed (the library's routing epoch word, read here); such routes
        are counted in the metrics as if the library had answered."""
        pin = self._pin_var.get()
        # x86-64 loads have acquire ordering: what the library published
        # before advancing the word is visible. An ended pin's epoch is 0,
        # which the word never reads.
        if pin is not None and pin.epoch == self._epoch_word[0]:
            pin.hits += 1
            return pin.route
        return self._route_and_cache()

    def _route_and_cache(self) -> Route:
        epoch = self._epoch_word[0]  # before the call: a change during it moves the word past this
        out = _new("racaffinity_route *")
        cacheable = _new("bool *")
        _context_call(self, lambda h, k, o: lib.racaffinity_context_route_cacheable(h, k, o, cacheable), out)
        route = _route(self, out)
        pin = self._pin_var.get()
        if pin is not None and pin.active:
            if cacheable[0] and not self._closed:
                self._cache_pin(pin, route, epoch)
            else:
                pin.epoch = 0
        return route

    def _pick_host_leasable(self, epoch: int) -> Lease:
        """A pinned pick the cache could not serve, in one call: the library
        says whether Python may lease the route itself (and cache it, under
        `epoch`, read before the call) or leased it already (a lease the
        library tracks, as `racaffinity_context_pick` gives)."""
        got = self._pick_host_or_raw(epoch)
        return got if got.__class__ is HostLease else Lease(self, got)

    def _pick_host_or_raw(self, epoch: int) -> Any:
        """`_pick_host_leasable` for the node pools, which keep a lease the
        library tracks as its raw `racaffinity_lease` (no `Lease` object)."""
        out = _new("racaffinity_lease *")
        host = _new("bool *")
        _context_call(self, lambda h, k, o: _pick_host_leasable(h, k, o, host), out)
        pin = self._pin_var.get()
        if host[0]:
            if pin is not None and pin.active and not self._closed:
                self._cache_pin(pin, _route(self, out), epoch)
            self._page[_HOST_LEASE_BASE + out.node] += 1
            return HostLease(self, out.node, _KINDS[out.kind], epoch)
        # The pin's cache stays as it was: stale (the word moved past it), or
        # a route() cache on a node past the host lease table.
        return out

    def _cache_pin(self, pin: _Pin, route: Route, epoch: int) -> None:
        """Lets `pin` serve `route` while the routing epoch is `epoch`; its
        hits are merged into the metrics from `_cached_pins`."""
        pin.cache(self._h, route, epoch)
        self._cached_pins.add(pin)

    def _merge_host_hits(self) -> None:
        for pin in members(self._cached_pins):
            pin.merge_hits()

    def lease(self, node: Union[int, str]) -> Lease:
        """Leases `node`, which another route chose (transaction, session,
        key), so the work's outcome feeds balancing and health."""
        buf = _new("racaffinity_lease *")
        rc = _lease_begin(self._h, self.node_id(node), buf)
        if rc:
            self._raise(rc)
        return Lease(self, buf)

    def pin(self) -> PinScope:
        """A context manager that pins the current context (see `PinScope`)."""
        return PinScope(self)

    def pinned(self) -> bool:
        """Whether the current context is pinned: inside a pin scope of this
        cluster, or auto-pinned (`thread_auto_pin`) by a pick or route."""
        pin = self._pin_var.get()
        return pin is not None and pin.active

    def unpin_all(self) -> bool:
        """Releases the current context's pin at every level: its auto-pin
        (`thread_auto_pin`), or a pin whose scopes were not all closed (the
        scopes then exit quietly). Returns whether the context was pinned;
        contexts sharing the pin (tasks created while it held) stop using it."""
        pin = self._pin_var.get()
        if pin is None or not pin.active:
            return False
        pin.end()
        existed = _new("bool *")
        self._call(lib.racaffinity_context_release, pin.key, existed)
        return bool(existed[0])

    # -- transactions -------------------------------------------------------

    def transaction(self, gtrid: BytesLike, *, prefer_pinned: bool = False) -> Transaction:
        """A branch of global transaction `gtrid` as a context manager. With
        `prefer_pinned`, a *new* gtrid is placed on the context's pinned node
        (`racaffinity_tx_begin_on`; only consistent within this process)."""
        return Transaction(self, _bytes_arg(gtrid, "gtrid"), prefer_pinned)

    def current_transaction(self) -> Optional[Transaction]:
        tx: Optional[Transaction] = _slot(self._serial, _TX)
        return tx

    def _gtrid_call(self, fn: Any, gtrid: BytesLike) -> None:
        g = _bytes_arg(gtrid, "gtrid")
        rc = fn(self._h, g, len(g))
        if rc:
            self._raise(rc)

    def _route_call(self, fn: Any, key: BytesLike, what: str) -> Route:
        k = _bytes_arg(key, what)
        out = _new("racaffinity_route *")
        rc = fn(self._h, k, len(k), out)
        if rc:
            self._raise(rc)
        return _route(self, out)

    def tx_begin(self, gtrid: BytesLike) -> Route:
        """Begins or joins a branch of `gtrid`; every branch gets the owning node."""
        return self._route_call(lib.racaffinity_tx_begin, gtrid, "gtrid")

    def tx_begin_on(self, gtrid: BytesLike, preferred: Union[int, str]) -> Route:
        """Like `tx_begin`; a new gtrid goes to `preferred` if it takes new work.

        Otherwise strict transaction mode raises `StrictAffinityError` (a
        branch elsewhere would split the transaction) and soft mode places
        the gtrid as `tx_begin` does."""
        g = _bytes_arg(gtrid, "gtrid")
        out = self._out("racaffinity_route *", lib.racaffinity_tx_begin_on, g, len(g), self.node_id(preferred))
        return _route(self, out)

    def tx_begin_for(
        self,
        gtrid: BytesLike,
        *,
        key: Optional[DataKey] = None,
        session: Optional[BytesLike] = None,
        token: Union[str, bytes, None] = None,
    ) -> Route:
        """Begins or joins a branch of `gtrid` for a request
        (`racaffinity_tx_begin_for`, `racaffinity_tx_begin_for_token`): a
        *new* gtrid goes to the data `key`'s owner (bytes, str or int), else
        to the node the session routing `token` routes the request to (as
        `route_token` routes it, without counting or rewriting), else to the
        `session`'s node, else to the current context's pinned node, else by
        the placement policy (also when that node takes no new work). An
        existing gtrid is joined wherever it lives. In strict transaction
        mode across processes (`transaction.settle`) only shared inputs place
        it (docs/semantics.md, "Token routes and new transactions").

        A malformed token raises `InvalidArgumentError` even where a key
        wins; a refused call registers nothing."""
        g = _bytes_arg(gtrid, "gtrid")
        t = None if token is None else _cstr(token, "token")
        req = _new("racaffinity_route_request *")
        # The request points into `k` and `s`, which live until the call returns.
        if key is not None:
            if isinstance(key, int) and not isinstance(key, bool):
                req.key_i64, req.key_is_i64 = _i64_arg(key), 1
            else:
                k = _request_span(_bytes_arg(key, "key"), "key")
                req.key, req.key_len = k, len(k)
        if session is not None:
            s = _request_span(_bytes_arg(session, "session key"), "session key")
            req.session, req.session_len = s, len(s)
        pin = self._pin_var.get()
        if pin is not None and pin.active:
            req.context = pin.key
        out = _new("racaffinity_route *")
        if t is None:
            rc = lib.racaffinity_tx_begin_for(self._h, g, len(g), req, out)
        else:
            rc = lib.racaffinity_tx_begin_for_token(self._h, g, len(g), req, t, out)
        if rc:
            self._raise(rc)
        return _route(self, out)

    def tx_route(self, gtrid: BytesLike) -> Route:
        """Where 2PC commands for `gtrid` go. Never moves the transaction."""
        return self._route_call(lib.racaffinity_tx_route, gtrid, "gtrid")

    def tx_prepared(self, gtrid: BytesLike) -> None:
        """Marks a branch prepared: the transaction never moves again."""
        self._gtrid_call(lib.racaffinity_tx_prepared, gtrid)

    def tx_end(self, gtrid: BytesLike) -> None:
        """Ends one branch; the entry goes with the last."""
        self._gtrid_call(lib.racaffinity_tx_end, gtrid)

    def tx_complete(self, gtrid: BytesLike) -> None:
        """Forgets `gtrid` whatever its branch count."""
        self._gtrid_call(lib.racaffinity_tx_complete, gtrid)

    def tx_recovered(self, gtrid: BytesLike, node: Union[int, str]) -> None:
        """Records that `node` returned `gtrid` from a recovery scan."""
        g = _bytes_arg(gtrid, "gtrid")
        self._call(lib.racaffinity_tx_recovered, g, len(g), self.node_id(node))

    # -- sessions and data keys ----------------------------------------------

    def route_session(self, key: BytesLike) -> Route:
        """Routes a request of web session `key` (1..=1024 bytes)."""
        return self._route_call(lib.racaffinity_session_route, key, "session key")

    def session(self, key: BytesLike) -> SessionScope:
        """A request of session `key` as a context manager (see `SessionScope`)."""
        return SessionScope(self, _bytes_arg(key, "session key"))

    def current_session(self) -> Optional[bytes]:
        key: Optional[bytes] = _slot(self._serial, _SESSION)
        return key

    def end_session(self, key: BytesLike) -> bool:
        """Ends session `key`'s affinity; returns whether it had one."""
        k = _bytes_arg(key, "session key")
        out = self._out("bool *", lib.racaffinity_session_end, k, len(k))
        return bool(out[0])

    def route_key(self, key: DataKey) -> Route:
        """Routes a data key: bytes, str (UTF-8) or int (i64)."""
        if isinstance(key, int) and not isinstance(key, bool):
            out = _new("racaffinity_route *")
            rc = lib.racaffinity_key_route_i64(self._h, _i64_arg(key), out)
            if rc:
                self._raise(rc)
            return _route(self, out)
        return self._route_call(lib.racaffinity_key_route, key, "key")  # type: ignore[arg-type]

    def partition_of(self, key: DataKey) -> int:
        """The partition a data key falls in. An int key is passed as its 8
        little-endian bytes, which is how the core hashes an i64 (README,
        racaffinity-hrw-v2 step 2); the C ABI has no i64 variant."""
        if isinstance(key, int) and not isinstance(key, bool):
            k = _i64_arg(key).to_bytes(8, "little", signed=True)
        else:
            k = _bytes_arg(key, "key")
        out = self._out("uint32_t *", lib.racaffinity_key_partition, k, len(k))
        return int(out[0])

    # -- failover inputs --------------------------------------------------------

    def apply_event(self, line: Union[str, bytes]) -> int:
        """Applies one FAN event or RLB advisory line; returns the number of
        node state changes. Malformed text (`EventParseError`), an unknown
        instance (`UnknownNodeError`) or a foreign database/service
        (`ForeignEventError`) changes nothing."""
        out = self._out("uint32_t *", lib.racaffinity_event_apply, _cstr(line, "event line"))
        return int(out[0])

    def apply_feed_record(self, version: int, key: str, value: Optional[str]) -> bool:
        """Applies one record of a fleet feed (docs/operations.md, "Feed
        records"): `key` relative to the feed's prefix (`node/RAC1/state`,
        `node/RAC1/weight`, `node/RAC1`, `partition_map`, `fan/<id>`),
        `value` its value or None when the key was deleted, `version` its
        fleet-wide order (the log's revision). Returns False when an input
        with a higher version was already in (nothing changed). A record of
        no known form raises `InvalidArgumentError`, one about an unknown
        node `UnknownNodeError`; a refused record changes nothing."""
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**64:
            raise TypeError(f"version must be an int in 0..2**64, got {version!r}")
        v = ffi.NULL if value is None else _cstr(value, "value")
        out = self._out("bool *", lib.racaffinity_feed_record_apply, version, _cstr(key, "key"), v)
        return bool(out[0])

    def publish_event(self, line: str) -> int:
        """Relays one FAN or RLB line into the cluster's topology feed
        (`topology.feed`; an ONS relay, so every subscribed process gets it)
        and applies it here at the record's revision, which it returns. A
        malformed or foreign line, or one about an instance or host this
        cluster does not have, raises before anything is written;
        `FeedUnavailableError` without a feed or when etcd does not take it."""
        out = self._out("uint64_t *", lib.racaffinity_feed_event_publish, _cstr(line, "event line"))
        return int(out[0])

    def report_probe(self, node: Union[int, str], ok: bool) -> None:
        """Reports a heartbeat probe of `node`. A removed node's id is
        taken and ignored (a probe begun before the removal)."""
        self._call(lib.racaffinity_probe_report, self.node_id(node), _bool_arg(ok, "ok"))

    def report_outcome(self, node: Union[int, str], ok: bool) -> None:
        """Reports a node-level success or failure outside a lease. A
        removed node's id is taken and ignored."""
        self._call(lib.racaffinity_outcome_report, self.node_id(node), _bool_arg(ok, "ok"))

    # -- metrics ---------------------------------------------------------------

    def _read_text(self, fill: Any, cap: int = 4096) -> str:
        return read_text(fill, cap, self._raise)

    def metrics(self) -> Dict[str, Any]:
        """The metrics snapshot (the library's JSON, parsed)."""
        metrics: Dict[str, Any] = json.loads(self.metrics_json())
        return metrics

    def metrics_json(self) -> str:
        self._merge_host_hits()
        return self._read_text(lambda b, c, n: lib.racaffinity_metrics_json(self._h, b, c, n))

    def metrics_prometheus(self) -> str:
        """The metrics snapshot in the Prometheus text format."""
        self._merge_host_hits()
        return self._read_text(lambda b, c, n: lib.racaffinity_metrics_prometheus(self._h, b, c, n), 16384)
