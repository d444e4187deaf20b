"""A deadline for one blocking psycopg call.

psycopg's sync calls wait on the socket without limit, and a node that
stops answering while its socket stays open (a blackhole, a hung host) would
hold a 2PC command or a recovery scan forever; `statement_timeout` needs an
answering server and a cancel request needs a new connection to it. So a
timer shuts the socket down when the deadline passes: the blocked call then
sees the connection end and raises, like for any lost connection.

    with bounded(conn, 5.0):
        conn.tpc_commit()          # CallTimeout after 5 s without an answer
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any, Iterator, Optional

import psycopg

__all__ = ["CallTimeout", "bounded"]


class CallTimeout(psycopg.OperationalError):
    """The node did not answer within the call's timeout; the connection
    was shut down (a node failure, like a lost connection)."""


@contextlib.contextmanager
def bounded(conn: Any, timeout: Optional[float]) -> Iterator[None]:
    if timeout is None:
        yield
        return
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if state["done"]:
                return
            state["fired"] = True
        try:
            # A dup shares the socket: shutdown reaches the one libpq waits on.
            with socket.socket(fileno=os.dup(conn.fileno())) as s:
                s.shutdown(socket.SHUT_RDWR)
        except (OSError, psycopg.Error):
            pass

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except psycopg.OperationalError as e:
        with lock:
            fired = state["fired"]
        if fired:
            raise CallTimeout(f"no answer from the node within {timeout:g}s") from e
        raise
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            fired = state["fired"]
        if fired:  # the socket is gone even if the call just made it
            try:
                conn.close()
            except Exception:
                pass
