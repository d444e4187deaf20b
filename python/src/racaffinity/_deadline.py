"""A deadline for one blocking psycopg call.

psycopg's sync calls wait on the socket without limit, and a node that
stops answering while its socket stays open (a blackhole, a hung host) would
hold a 2PC command or a recovery scan forever; `statement_timeout` needs an
answering server and a cancel request needs a new connection to it. So a
watchdog thread shuts the socket down when the deadline passes: the blocked
call then sees the connection end and raises, like for any lost connection.

    with bounded(conn, 5.0):
        conn.tpc_commit()          # CallTimeout after 5 s without an answer
"""

from __future__ import annotations

import contextlib
import heapq
import os
import socket
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterator, List, Optional, Tuple

import psycopg

__all__ = ["CallTimeout", "abounded", "bounded", "shut_down"]


class CallTimeout(psycopg.OperationalError):
    """The node did not answer within the call's timeout; the connection
    was shut down (a node failure, like a lost connection)."""


class _Watchdog:
    """One daemon thread for every deadline of the process (a Timer thread
    per call would cost ~0.3 ms, more than a local round trip). Deadlines
    sit in a heap; a disarmed one is dropped when it comes up."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: List[Tuple[float, int, List[Any]]] = []
        self._seq = 0
        self._pid = -1

    def arm(self, timeout: float, fire: Callable[[], None]) -> List[Any]:
        entry: List[Any] = [fire]
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child
                self._pid = os.getpid()
                self._heap.clear()
                threading.Thread(target=self._run, name="racaffinity-deadlines", daemon=True).start()
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + timeout, self._seq, entry))
            self._cond.notify()
        return entry

    def disarm(self, entry: List[Any]) -> None:
        entry[0] = None  # lazily dropped

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2][0] is None:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        fire = heapq.heappop(self._heap)[2][0]
                        break
                    # Condition.wait raises OverflowError past TIMEOUT_MAX
                    # (a call_timeout of inf): the thread would end, and no
                    # deadline of the process fire again.
                    self._cond.wait(min(wait, threading.TIMEOUT_MAX))
            if fire is not None:
                try:
                    fire()
                except Exception:  # never let the watchdog die
                    pass


_WATCHDOG = _Watchdog()


def shut_down(conn: Any) -> None:
    """Shuts a connection's socket down, from any thread or task: the call
    blocked on it (or the next one) sees the connection end and raises, as
    for any lost connection; closing it belongs to its owner."""
    try:
        # A dup shares the socket: shutdown reaches the one libpq waits on.
        with socket.socket(fileno=os.dup(conn.fileno())) as s:
            s.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass


class _Deadline:
    """One armed deadline: shuts the connection's socket down when it passes."""

    __slots__ = ("_conn", "_timeout", "_lock", "_done", "_fired", "_entry")

    def __init__(self, conn: Any, timeout: float) -> None:
        self._conn = conn
        self._timeout = timeout
        self._lock = threading.Lock()
        self._done = False
        self._fired = False
        self._entry = _WATCHDOG.arm(timeout, self._fire)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self._fired = True
        shut_down(self._conn)

    def failed(self, e: psycopg.OperationalError) -> None:
        """Raises CallTimeout for an error the deadline caused."""
        with self._lock:
            fired = self._fired
        if fired:
            raise CallTimeout(f"no answer from the node within {self._timeout:g}s") from e

    def end(self) -> bool:
        """Disarms; whether it fired (the socket is gone even if the call
        just made it: the caller closes the connection)."""
        _WATCHDOG.disarm(self._entry)
        with self._lock:
            self._done = True
            return self._fired


@contextlib.contextmanager
def _armed(conn: Any, timeout: Optional[float], on_fired: Callable[[], None]) -> Iterator[None]:
    """The deadline around one call; `on_fired` runs after it when the
    deadline shut the socket down (the connection is gone even if the call
    just made it)."""
    if timeout is None:
        yield
        return
    d = _Deadline(conn, timeout)
    try:
        yield
    except psycopg.OperationalError as e:
        d.failed(e)
        raise
    finally:
        if d.end():
            on_fired()


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass


@contextlib.contextmanager
def bounded(conn: Any, timeout: Optional[float]) -> Iterator[None]:
    with _armed(conn, timeout, lambda: _close_quietly(conn)):
        yield


@contextlib.asynccontextmanager
async def abounded(conn: Any, timeout: Optional[float]) -> AsyncIterator[None]:
    """`bounded` for an async connection: the loop's wait on the socket sees
    the shutdown like libpq's blocking read does."""
    fired: List[bool] = []
    try:
        with _armed(conn, timeout, lambda: fired.append(True)):
            yield
    finally:
        if fired:
            try:
                await conn.close()
            except Exception:
                pass
