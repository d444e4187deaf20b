"""The concurrency primitives `_pools_async` is written with, and their
thread equivalents that `tools/async_to_sync.py` puts in their place when it
writes `_pools_sync` (AEvent -> Event, aspawn -> spawn, ...): one source of
the pools' logic, two ways to wait."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Iterable, Optional, Sequence

__all__ = [
    "AEvent", "ALock", "aspawn", "ais_alive", "acancel", "await_all", "ajoin", "await_event",
    "Event", "Lock", "spawn", "is_alive", "cancel", "wait_all", "join", "wait_event",
]

# -- asyncio -------------------------------------------------------------------

AEvent = asyncio.Event
ALock = asyncio.Lock


def aspawn(fn: Callable[..., Any], args: Sequence[Any], name: str) -> "asyncio.Task[Any]":
    """Runs `fn(*args)` as a task of the running loop."""
    return asyncio.get_running_loop().create_task(fn(*args), name=name)


def ais_alive(h: "asyncio.Task[Any]") -> bool:
    return not h.done()


def acancel(h: "asyncio.Task[Any]") -> None:
    h.cancel()


async def await_all(hs: Iterable["asyncio.Task[Any]"], timeout: float) -> None:
    """Waits until every task ended or `timeout` passed (they go on)."""
    hs = list(hs)
    if hs:
        await asyncio.wait(hs, timeout=max(0.0, timeout))


async def ajoin(h: "asyncio.Task[Any]", timeout: float) -> None:
    """Waits for the task to end, at most `timeout`; then cancels it."""
    if h is asyncio.current_task():
        return
    done, _pending = await asyncio.wait({h}, timeout=timeout)
    if not done:
        h.cancel()


async def await_event(ev: asyncio.Event, timeout: Optional[float]) -> bool:
    """Whether `ev` was set within `timeout`."""
    try:
        await asyncio.wait_for(ev.wait(), max(0.0, timeout) if timeout is not None else None)
    except asyncio.TimeoutError:
        return False
    return True


# -- threads -------------------------------------------------------------------

Event = threading.Event
Lock = threading.Lock


def spawn(fn: Callable[..., Any], args: Sequence[Any], name: str) -> threading.Thread:
    """Runs `fn(*args)` on a new daemon thread."""
    t = threading.Thread(target=fn, args=tuple(args), name=name, daemon=True)
    t.start()
    return t


def is_alive(h: threading.Thread) -> bool:
    return h.is_alive()


def cancel(h: threading.Thread) -> None:
    """Threads cannot be cancelled: a stuck probe thread ends with its call."""


def wait_all(hs: Iterable[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + max(0.0, timeout)
    for h in hs:
        h.join(max(0.0, deadline - time.monotonic()))


def join(h: threading.Thread, timeout: float) -> None:
    if h.is_alive() and h is not threading.current_thread():
        h.join(timeout)


def wait_event(ev: threading.Event, timeout: Optional[float]) -> bool:
    return ev.wait(timeout)
