"""Loads the bundled libracaffinity through the cffi ABI-mode module that the
build wrote from include/racaffinity.h (see build_backend/racaffinity_build.py)."""

from __future__ import annotations

import os
import sys

from ._ffi import ffi

if sys.platform == "darwin":  # pragma: no cover
    _NAME = "libracaffinity.dylib"
elif sys.platform == "win32":  # pragma: no cover
    _NAME = "racaffinity.dll"
else:
    _NAME = "libracaffinity.so"

LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", _NAME)

lib = ffi.dlopen(LIBRARY_PATH)

NULL = ffi.NULL

__all__ = ["ffi", "lib", "LIBRARY_PATH", "NULL"]
