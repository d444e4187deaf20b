"""Weak sets that other threads add to while one lists them."""

from __future__ import annotations

import weakref
from typing import List, TypeVar

T = TypeVar("T")


def members(items: "weakref.WeakSet[T]") -> List[T]:
    """The objects `items` holds now. Listing a `WeakSet` runs Python code
    per member, so another thread can add one meanwhile (a pool's worker its
    new connection, a thread its pin), and the listing then raises
    "Set changed size during iteration": it is listed again. An addition
    takes microseconds, so a retry finds the set still."""
    while True:
        try:
            return list(items)
        except RuntimeError:
            continue
