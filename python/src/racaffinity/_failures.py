"""Which errors say that a *node* failed, so that they count against its
health (passive ejection), and which are the application's or one
session's own. One leaf module, used by `pools` and `tpc` alike.

Node failures (one per failed node operation), told by SQLSTATE, exception
class and connection state, never by the words of a message (servers
localize them, and applications put anything in theirs):
- SQLSTATE class 08 (connection exception), 57P02 (crash shutdown) and
  57P03 (cannot connect now: starting up or shutting down);
- a `psycopg.OperationalError` without SQLSTATE that libpq raised because
  it never got the server's answer (refused, reset, timed out). libpq keeps
  no SQLSTATE for an error the server sends while connecting (no such role,
  wrong password, no such database, too many clients, starting up): all it
  leaves is its report, in which a server's error always has the shape
  "SEVERITY:  text" (the severity word, a colon, two spaces, in any
  language). Such a node is up and the error is this user's;
- a `PoolTimeout` while the pool cannot connect to the node: its last
  connection attempt failed with a node failure, or an attempt has been
  running for the whole wait. That does not depend on `min_size`/`max_size`
  (psycopg_pool counts pending reconnects in its size), and a pool that is
  merely busy is not a node failure.

- 57P01 (admin_shutdown) sent FATAL by the server routine that notices the
  postmaster's death while it reads or writes the client socket (the
  error's non-localized severity and routine fields, `diag`): the node
  crashed.

Never node failures: constraint, trigger, serialization errors (23xxx,
P0001, 40001), a wrong password for one user (28000/28P01), any other 57P01
(`pg_terminate_backend` of one session or a fast shutdown: FATAL from
`ProcessInterrupts`; an application's `RAISE ... USING ERRCODE '57P01'`:
ERROR), statement timeouts, a closed or overloaded pool.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Dict, Optional

import psycopg
import psycopg_pool

__all__ = ["is_node_failure", "connection_lost", "ConnectAttempts"]

_NODE_SQLSTATES = ("57P02", "57P03")

# The routines of PostgreSQL's be-secure.c that end a session with FATAL 57P01
# when the postmaster has died (a backend notices while it waits on its client).
_POSTMASTER_DEATH_ROUTINES = ("secure_read", "secure_write")

# libpq renders an ErrorResponse as "<severity>:  <message>": one word (any
# language), a colon and two spaces, which none of libpq's own reports of a
# refused, reset or timed-out connection contains.
_SERVER_REPORT = re.compile(r"(?:^|\s)[^\s:\"]+:  \S")


def _is_node_error(exc: BaseException) -> bool:
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return _SERVER_REPORT.search(_libpq_report(exc)) is None
    if state == "57P01":
        diag = exc.diag
        return diag.severity_nonlocalized == "FATAL" and diag.source_function in _POSTMASTER_DEATH_ROUTINES
    return state.startswith("08") or state in _NODE_SQLSTATES


def _libpq_report(exc: BaseException) -> str:
    """libpq's own report of a failed connect (psycopg attaches the finished
    connection), else the exception's text."""
    pgconn = getattr(exc, "pgconn", None)
    raw = getattr(pgconn, "error_message", None) if pgconn is not None else None
    if isinstance(raw, bytes) and raw:
        return raw.decode("utf-8", "replace")
    return str(exc)


class ConnectAttempts:
    """What a pool's connection attempts to one node did lately: the attempts
    running now (since when) and whether the last finished one failed with
    a node failure. Fed by the connection class `pools` gives each pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: Dict[int, float] = {}
        self._next = 0
        self.last_failed = False
        # Whether the last finished connect failed for any reason: the pool
        # then waits its reconnect back-off, also after a server's refusal
        # ("starting up", "shutting down") that is no node failure.
        self.backing_off = False
        # Monotonic time of the last failure of the node these pools saw (a
        # node failure, a Down): a connection last checked out before it is
        # validated at checkout whatever its age.
        self.node_failed_at = 0.0
        self.last_error: Optional[str] = None

    def started(self) -> int:
        with self._lock:
            self._next += 1
            self._running[self._next] = time.monotonic()
            return self._next

    def finished(self, token: int, error: Optional[BaseException]) -> None:
        with self._lock:
            self._running.pop(token, None)
            if error is not None and not isinstance(error, Exception):
                # Cancelled (or interrupted) on this side: the node did not
                # fail, and a back-off for it would renew its pool for
                # nothing. What the attempts before it said still holds.
                return
            self.last_failed = error is not None and _is_node_error(error)
            self.backing_off = error is not None
            self.last_error = None if error is None else type(error).__name__

    def check_failed(self, error: BaseException) -> None:
        """A pooled connection failed its checkout check: with a node
        failure, the node is as unreachable as after a failed connect."""
        if _is_node_error(error):
            with self._lock:
                self.last_failed = True
                self.last_error = type(error).__name__

    def cannot_connect(self, waited_since: Optional[float]) -> bool:
        """Whether a wait for a connection that began at `waited_since`
        (monotonic) timed out because the node cannot be reached."""
        with self._lock:
            if self.last_failed:
                return True
            if waited_since is None or not self._running:
                return False
            return min(self._running.values()) <= waited_since


def is_node_failure(exc: BaseException, pool: Any = None, *, waited_since: Optional[float] = None) -> bool:
    """Whether `exc` says the node failed (see the module doc). `pool` is
    the node's pool, for a `PoolTimeout` (without one, a timeout counts; a
    pool that `racaffinity.pools` did not make never does); `waited_since`
    the monotonic time its wait began."""
    if isinstance(exc, psycopg_pool.PoolTimeout):
        if pool is None:
            return True  # no pool to ask: as documented since 0.1, assume the node
        attempts = getattr(pool, "_racaffinity_connects", None)
        return attempts is not None and attempts.cannot_connect(waited_since)
    if isinstance(exc, (psycopg_pool.PoolClosed, psycopg_pool.TooManyRequests)):
        return False
    return _is_node_error(exc)


def connection_lost(conn: Any, exc: BaseException) -> bool:
    """Whether the session of `conn` ended with `exc` (so a command sent on
    it may or may not have taken effect), rather than the server answering
    the command with an error."""
    if conn is None:
        return True
    if not isinstance(exc, Exception):  # interrupted mid-call: state unknown
        return True
    return bool(conn.closed or getattr(conn, "broken", False)) or _is_node_error(exc)
