"""The optional dependencies (`pip install 'racaffinity[postgres]'` and
`[oracle]`): a module that needs one fails to import with an ImportError that
names the extra to install, not with the bare ModuleNotFoundError of
whichever import came first."""

from __future__ import annotations

import importlib

__all__ = ["require"]


def require(module: str, extra: str, *names: str) -> None:
    """Imports `names`; if one is missing, raises ImportError naming `extra`."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(
                f"{module} needs {', '.join(names)} ({e.name or name} is missing): "
                f"pip install 'racaffinity[{extra}]'",
                name=e.name,
            ) from e
