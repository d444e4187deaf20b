"""Without the optional dependencies, `racaffinity` imports and the modules
that need them say which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCK = textwrap.dedent(
    """
    import sys

    class Blocker:
        # what a Python without psycopg and psycopg_pool finds
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_the_core_package_imports_without_psycopg():
    done = run("import racaffinity; print(racaffinity.Cluster(nodes=['A']).node_name(0))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "A"


@pytest.mark.parametrize("module", ["racaffinity.pools", "racaffinity.tpc"])
def test_a_module_that_needs_psycopg_names_the_extra(module):
    done = run(
        f"""
        try:
            import {module}
        except ImportError as e:
            print(type(e).__name__, e)
        """
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("ImportError") or out.startswith("ModuleNotFoundError"), out
    assert "pip install 'racaffinity[postgres]'" in out, out
    assert "psycopg" in out, out


def test_the_sqlalchemy_module_names_its_extra():
    block = BLOCK.replace('("psycopg", "psycopg_pool", "psycopg_binary")', '("sqlalchemy",)')
    code = block + textwrap.dedent(
        """
        try:
            import racaffinity.sqlalchemy
        except ImportError as e:
            print(type(e).__name__, e)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ImportError"), done.stdout
    assert "pip install 'racaffinity[sqlalchemy]'" in done.stdout, done.stdout
