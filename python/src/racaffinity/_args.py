"""Argument conversion for calls into libracaffinity: a TypeError for a
wrong type, the library's typed errors for a bad value."""

from __future__ import annotations

from typing import Any, Union

from ._errors import InvalidArgumentError, InvalidUtf8Error, KeyOverflowError

__all__ = [
    "BytesLike", "DataKey", "I64_MIN", "I64_MAX", "U32_MAX", "bytes_arg", "cstr", "bool_arg", "enum_arg", "i64_arg",
    "port_arg",
]

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U32_MAX = (1 << 32) - 1

BytesLike = Union[bytes, bytearray, memoryview, str]
"""A gtrid or session key: bytes as given, a str as its UTF-8 bytes."""
DataKey = Union[bytes, bytearray, memoryview, str, int]
"""A data key: bytes, a str (UTF-8) or an int (i64)."""


def bytes_arg(v: Any, what: str) -> bytes:
    t = type(v)
    if t is bytes:
        b: bytes = v
        return b
    if t is str or isinstance(v, str):
        s: str = v
        try:
            return s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidUtf8Error(f"{what} is not valid UTF-8: {e.reason} at {e.start}") from None
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    # A data key ("key") may also be an int, which callers route before this.
    kinds = "bytes, str or int" if what == "key" else "bytes or str"
    raise TypeError(f"{what} must be {kinds}, not {type(v).__name__}")


def cstr(v: Any, what: str) -> bytes:
    """A NUL-terminated string argument: str (encoded as UTF-8) or bytes
    (passed as is; the library checks UTF-8). NUL inside is refused rather
    than silently truncating the text."""
    if isinstance(v, str):
        try:
            b = v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidUtf8Error(f"{what} is not valid UTF-8: {e.reason} at {e.start}") from None
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
    else:
        raise TypeError(f"{what} must be str or bytes, not {type(v).__name__}")
    if b"\0" in b:
        raise InvalidArgumentError(f"{what} contains a NUL character")
    return b


def bool_arg(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{what} must be a bool, not {type(v).__name__}")
    return v


def enum_arg(v: Any, enum_cls: Any, what: str) -> int:
    if isinstance(v, enum_cls):
        return int(v)
    if isinstance(v, str):
        try:
            return int(enum_cls[v.upper()])
        except KeyError:
            names = ", ".join(m.name.lower() for m in enum_cls)
            raise InvalidArgumentError(f"{what}: {v!r} is not one of {names}") from None
    if isinstance(v, int) and not isinstance(v, bool):
        if not 0 <= v <= U32_MAX:
            raise KeyOverflowError(f"{what}: {v} is out of range")
        return v  # the library checks the range and answers INVALID_ARGUMENT
    raise TypeError(f"{what} must be a {enum_cls.__name__} or its name, not {type(v).__name__}")


def i64_arg(v: int) -> int:
    """An int data key: it must fit in the core's i64."""
    if not I64_MIN <= v <= I64_MAX:
        raise KeyOverflowError(f"int key {v} does not fit in 64 bits")
    return v


def port_arg(v: Any, what: str) -> int:
    """A TCP port for a `uint16_t` parameter (the core refuses 0 itself)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    if not 0 <= v <= 0xFFFF:
        raise KeyOverflowError(f"port {v} is not in 1..=65535")
    return v
