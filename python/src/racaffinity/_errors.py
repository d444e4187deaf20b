"""The exception hierarchy and the ONE table from result codes to it.

Messages come from `racaffinity_last_error_message`, which is per OS thread:
`raise_for` must run on the thread that made the failing call, before that
thread makes another call into the library (it does: it is called right after
the failing call returns, with no `await` or library call in between).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NoReturn, Optional, Type

from ._lib import ffi, lib

__all__ = [
    "Error",
    "NullArgumentError",
    "ClosedError",
    "InvalidArgumentError",
    "InvalidUtf8Error",
    "KeyOverflowError",
    "BufferTooSmallError",
    "PanicError",
    "ConfigError",
    "UnknownNodeError",
    "DuplicateNodeError",
    "NoNodeAvailableError",
    "StrictAffinityError",
    "PreparedNodeUnavailableError",
    "UnknownTransactionError",
    "EventParseError",
    "ForeignEventError",
    "TooManyHandlesError",
    "InvalidLeaseError",
    "FeedUnavailableError",
    "EXCEPTIONS",
    "exception_for",
]


class Error(Exception):
    """Base of every racaffinity error. `code` is the C result code
    (`racaffinity_result`), `message` the library's detailed message."""

    code: int = -1

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NullArgumentError(Error):
    """NULL_ARGUMENT: a required pointer was NULL (a bug in the binding)."""


class ClosedError(Error):
    """INVALID_HANDLE: the cluster was closed (or the handle is stale)."""


class InvalidArgumentError(Error, ValueError):
    """INVALID_ARGUMENT: out of range or oversized (gtrid > 64 B, key > 1024 B,
    string > 1 MiB, empty key, bad node name, weight or connect-string value)."""


class InvalidUtf8Error(InvalidArgumentError):
    """INVALID_UTF8: a string argument is not UTF-8 (bytes that are not UTF-8,
    or a str with lone surrogates)."""


class KeyOverflowError(InvalidArgumentError, OverflowError):
    """An int key or port outside the C type's range (raised before the call)."""


class BufferTooSmallError(Error):
    """BUFFER_TOO_SMALL: the binding retries with the size the library asks
    for, so this only escapes if the text keeps growing (a bug)."""


class PanicError(Error):
    """PANIC: a Rust panic was caught at the library boundary (a bug)."""


class ConfigError(Error, ValueError):
    """CONFIG: bad config text or keyword value; the message names the key."""


class UnknownNodeError(Error, LookupError):
    """UNKNOWN_NODE: no such node name, id, instance or host."""


class DuplicateNodeError(Error):
    """DUPLICATE_NODE: a node of that name exists."""


class NoNodeAvailableError(Error):
    """NO_NODE_AVAILABLE: nothing can take the work and `panic = fail`."""


class StrictAffinityError(Error):
    """STRICT_AFFINITY: a strict scope's node is unavailable; the work cannot
    move. Retry when the node is back (or switch the scope to soft)."""


class PreparedNodeUnavailableError(StrictAffinityError):
    """PREPARED_NODE_UNAVAILABLE: a prepared transaction's node is down.

    A subclass of StrictAffinityError: a prepared branch is the one affinity
    that is strict whatever the switch says (it never moves, even in soft
    mode), so a handler for "my affinity's node is gone and the work cannot
    move" covers it too. Catch this class first to tell the two apart."""


class UnknownTransactionError(Error, LookupError):
    """UNKNOWN_TRANSACTION: the gtrid is not registered."""


class EventParseError(Error, ValueError):
    """EVENT_PARSE: malformed or unsupported FAN/RLB text (nothing changed)."""


class ForeignEventError(Error):
    """FOREIGN_EVENT: an event for another database or service (nothing changed)."""


class TooManyHandlesError(Error):
    """TOO_MANY_HANDLES: more than 4096 live clusters in the process."""


class InvalidLeaseError(Error):
    """INVALID_LEASE: the lease was already released (or is from another cluster)."""


class FeedUnavailableError(Error, ConnectionError):
    """FEED_UNAVAILABLE: an operator call could not be written to the topology
    feed (`topology.feed`); nothing changed, in this process or any other."""


def _code(name: str) -> int:
    return int(getattr(lib, "RACAFFINITY_RESULT_" + name))


#: THE table: result code -> exception class. Keyed by the header's enum
#: constants, so a renumbering there cannot silently shift it.
# Tracebacks and reprs name the public path (`racaffinity.ConfigError`),
# where applications import them from, not this private module.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, Error):
        _cls.__module__ = "racaffinity"
del _cls

EXCEPTIONS: Dict[int, Type[Error]] = {
    _code("NULL_ARGUMENT"): NullArgumentError,
    _code("INVALID_HANDLE"): ClosedError,
    _code("INVALID_UTF8"): InvalidUtf8Error,
    _code("INVALID_ARGUMENT"): InvalidArgumentError,
    _code("BUFFER_TOO_SMALL"): BufferTooSmallError,
    _code("PANIC"): PanicError,
    _code("CONFIG"): ConfigError,
    _code("UNKNOWN_NODE"): UnknownNodeError,
    _code("DUPLICATE_NODE"): DuplicateNodeError,
    _code("NO_NODE_AVAILABLE"): NoNodeAvailableError,
    _code("STRICT_AFFINITY"): StrictAffinityError,
    _code("PREPARED_NODE_UNAVAILABLE"): PreparedNodeUnavailableError,
    _code("UNKNOWN_TRANSACTION"): UnknownTransactionError,
    _code("EVENT_PARSE"): EventParseError,
    _code("FOREIGN_EVENT"): ForeignEventError,
    _code("TOO_MANY_HANDLES"): TooManyHandlesError,
    _code("INVALID_LEASE"): InvalidLeaseError,
    _code("FEED_UNAVAILABLE"): FeedUnavailableError,
}

for _c, _cls in EXCEPTIONS.items():
    _cls.code = _c
Error.code = -1

INVALID_HANDLE = _code("INVALID_HANDLE")
BUFFER_TOO_SMALL = _code("BUFFER_TOO_SMALL")
UNKNOWN_NODE = _code("UNKNOWN_NODE")


def exception_for(code: int) -> Type[Error]:
    """The exception class of a result code (`Error` for a code this binding
    does not know yet: codes are only ever added)."""
    return EXCEPTIONS.get(code, Error)


def _read_text(fill: Callable[[Any, int, Any], int]) -> str:
    """Calls `fill(buf, cap, out_len)` with growing buffers until it fits."""
    cap = 256
    out_len = ffi.new("size_t *")
    for _ in range(8):
        buf = ffi.new("char[]", cap)
        rc = fill(buf, cap, out_len)
        if rc == 0:
            return ffi.string(buf).decode("utf-8", "replace")
        if rc != BUFFER_TOO_SMALL:
            return ""
        cap = max(int(out_len[0]), cap) + 64
    return ""


def last_error_message() -> str:
    return _read_text(lib.racaffinity_last_error_message)


def result_message(code: int) -> str:
    return _read_text(lambda b, c, n: lib.racaffinity_result_message(code, b, c, n))


def keeping_last_error(fn: Any, *args: Any) -> Any:
    """`fn(*args)` for a finalizer (`__del__`, `weakref.finalize`), then the
    thread's last-error message as it was before. The cycle collector runs
    finalizers at any bytecode boundary, also between another call's failure
    and `raise_for`'s read of its message: a finalizer's own failing call
    (INVALID_HANDLE on a cluster another thread freed) must not replace it."""
    saved = _read_text(lib.racaffinity_last_error_message)
    try:
        return fn(*args)
    finally:
        lib.racaffinity_last_error_set(saved.encode("utf-8"))


def raise_for(code: int, closed: bool = False) -> NoReturn:
    """Raises the exception of a failed call's result code, with the calling
    thread's detailed message. Call it right after the failing call."""
    msg = last_error_message()
    cls = exception_for(code)
    if code == INVALID_HANDLE and closed:
        msg = "the cluster is closed"
    if not msg:
        msg = result_message(code) or f"racaffinity result code {code}"
    raise cls(msg, code)
