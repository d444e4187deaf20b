#!/usr/bin/env python3
"""Writes the sync node pools (and their tests) from the asyncio source, as
psycopg_pool's tools/async_to_sync.py does: one source, two APIs.

    python3 tools/async_to_sync.py           # rewrite the generated files
    python3 tools/async_to_sync.py --check   # fail if one is out of date (make lint)

An AST rewrite: `async def` -> `def`, `await x` -> `x`, `async with`/`async
for` -> `with`/`for`, `if _ASYNC: A else: B` -> `B`, `@pytest.mark.asyncio`
dropped, and the names of NAMES (asyncio primitives of `_acompat` -> their
thread equivalents, Async* -> the sync names) replaced in code, docstrings and
strings. Comments do not survive `ast.unparse`: they stay in the async source,
except a `# type: ignore[...]` on a statement's first line, which the
statement keeps in the sync file (mypy checks both, `make lint`).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FILES = [
    ("python/src/racaffinity/_pools_async.py", "python/src/racaffinity/_pools_sync.py"),
    ("python/tests/test_pools_async.py", "python/tests/test_pools_sync.py"),
    ("python/src/racaffinity/_tpc_async.py", "python/src/racaffinity/_tpc_sync.py"),
    ("python/tests/test_tpc_async.py", "python/tests/test_tpc_sync.py"),
]

NAMES = {
    "_pools_async": "_pools_sync",
    "AsyncNodePools": "NodePools",
    "_AsyncConnection": "_Connection",
    "_AsyncHeartbeat": "_Heartbeat",
    "_AsyncUpkeep": "_Upkeep",
    "_AsyncTracked": "_Tracked",
    "_AsyncRequest": "_Request",
    "AsyncConnectionPool": "ConnectionPool",
    "_AsyncNodePool": "_NodePool",
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "AEvent": "Event",
    "ALock": "Lock",
    "aspawn": "spawn",
    "ais_alive": "is_alive",
    "acancel": "cancel",
    "await_all": "wait_all",
    "ajoin": "join",
    "await_event": "wait_event",
    "asleep": "sleep",
    "agather": "gather",
    "wait_until_async": "wait_until",
    "aport_of": "port_of",
    "make_apools": "make_pools",
    "test_pools_async": "test_pools_sync",
    "_tpc_async": "_tpc_sync",
    "test_tpc_async": "test_tpc_sync",
    "AsyncGlobalTransaction": "GlobalTransaction",
    "_AsyncBranchScope": "_BranchScope",
    "_AsyncRecovery": "_Recovery",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "abounded": "bounded",
    "AsyncPartitionMapLoader": "PartitionMapLoader",
}

# Words in docstrings and strings (whole words only).
TEXT = [
    (re.compile(r"\basync with\b"), "with"),
    (re.compile(r"\bawait "), ""),
    (re.compile(r"\basyncio tasks?\b"), "threads"),
    (re.compile(r"\ban asyncio task\b"), "a thread"),
    (re.compile(r"\basyncio\b"), "threads"),
    (re.compile(r"\ban async context manager\b"), "a context manager"),
] + [(re.compile(r"\b%s\b" % re.escape(a)), b) for a, b in NAMES.items() if "_pools_" not in a]


def _text(s: str) -> str:
    for pat, repl in TEXT:
        s = pat.sub(repl, s)
    return s


def _is_async_flag(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "_ASYNC"


def _is_not_async_flag(test: ast.expr) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_async_flag(test.operand)


def _is_asyncio_mark(d: ast.expr) -> bool:
    # @pytest.mark.asyncio
    return (
        isinstance(d, ast.Attribute)
        and d.attr == "asyncio"
        and isinstance(d.value, ast.Attribute)
        and d.value.attr == "mark"
    )


class AsyncToSync(ast.NodeTransformer):
    def _stmts(self, stmts: list) -> list:
        out = []
        for s in stmts:
            r = self.visit(s)
            if r is None:
                continue
            out.extend(r if isinstance(r, list) else [r])
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field, old in ast.iter_fields(node):
            if isinstance(old, list) and old and isinstance(old[0], ast.stmt):
                setattr(node, field, self._stmts(old) or [ast.Pass()])
            elif isinstance(old, list):
                new = []
                for v in old:
                    if isinstance(v, ast.AST):
                        v = self.visit(v)
                        if v is None:
                            continue
                    new.append(v)
                setattr(node, field, new)
            elif isinstance(old, ast.AST):
                setattr(node, field, self.visit(old))
        return node

    def visit_If(self, node: ast.If):
        if _is_async_flag(node.test):
            return self._stmts(node.orelse) or None
        if _is_not_async_flag(node.test):
            return self._stmts(node.body) or None
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign):
        if any(isinstance(t, ast.Name) and t.id == "_ASYNC" for t in node.targets):
            return None
        return self.generic_visit(node)

    def _function(self, node, cls):
        node = self.generic_visit(node)
        node.decorator_list = [d for d in node.decorator_list if not _is_asyncio_mark(d)]
        fields = {f: getattr(node, f) for f in node._fields if hasattr(node, f)}
        fields["name"] = NAMES.get(node.name, node.name)
        return ast.copy_location(cls(**fields), node)

    def visit_AsyncFunctionDef(self, node):
        return self._function(node, ast.FunctionDef)

    def visit_FunctionDef(self, node):
        return self._function(node, ast.FunctionDef)

    def visit_ClassDef(self, node):
        node = self.generic_visit(node)
        node.name = NAMES.get(node.name, node.name)
        return node

    def visit_Await(self, node):
        return self.visit(node.value)

    def visit_AsyncWith(self, node):
        node = self.generic_visit(node)
        return ast.copy_location(ast.With(items=node.items, body=node.body, type_comment=None), node)

    def visit_AsyncFor(self, node):
        node = self.generic_visit(node)
        return ast.copy_location(
            ast.For(target=node.target, iter=node.iter, body=node.body, orelse=node.orelse, type_comment=None), node
        )

    def visit_Name(self, node):
        node.id = NAMES.get(node.id, node.id)
        return node

    def visit_Attribute(self, node):
        node = self.generic_visit(node)
        node.attr = NAMES.get(node.attr, node.attr)
        # asyncio.sleep -> time.sleep
        if isinstance(node.value, ast.Name) and node.value.id == "asyncio" and node.attr == "sleep":
            node.value.id = "time"
        return node

    def visit_ImportFrom(self, node):
        node.module = NAMES.get(node.module, node.module) if node.module else node.module
        for a in node.names:
            a.name = NAMES.get(a.name, a.name)
        return node

    def visit_arg(self, node):
        node = self.generic_visit(node)
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            node.value = _text(node.value)
        return node


def _drop_unused_imports(tree: ast.Module) -> None:
    """Imports only the async code used (asyncio, inspect, pytest_asyncio)."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    body = []
    for s in tree.body:
        if isinstance(s, ast.Import):
            s.names = [a for a in s.names if (a.asname or a.name.split(".")[0]) in used]
            if not s.names:
                continue
        elif isinstance(s, ast.ImportFrom) and s.module != "__future__":
            s.names = [a for a in s.names if (a.asname or a.name) in used]
            if not s.names:
                continue
        body.append(s)
    tree.body = body


def _ensure_import(tree: ast.Module, module: str) -> None:
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    have = {a.name for s in tree.body if isinstance(s, ast.Import) for a in s.names}
    if module in used and module not in have:
        first = next(i for i, s in enumerate(tree.body) if isinstance(s, (ast.Import, ast.ImportFrom))
                     and getattr(s, "module", None) != "__future__")
        tree.body.insert(first, ast.Import(names=[ast.alias(name=module)]))


_TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore\b(\[[^\]]*\])?")


def _type_ignores(source: str, src_name: str, tree: ast.Module) -> dict:
    """line -> its `# type: ignore[...]` comment, for each such comment of
    `source`, which must be on the first line of a statement of `tree`."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and (m := _TYPE_IGNORE.match(tok.string)):
            out[tok.start[0]] = m.group(0)
    starts = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.stmt)}
    for line in out:
        if line not in starts:
            sys.exit(f"{src_name}:{line}: a type: ignore must be on a statement's first line to reach the sync file")
    return out


def _keep_type_ignores(tree: ast.Module, ignores: dict, text: str) -> str:
    """`text` (the unparsed `tree`) with each statement that began on a line
    of `ignores` in the async source given that line's comment. The tree's
    statements still carry their source lines; `text` parsed again has the
    same statements, in the same order, at their new lines."""
    if not ignores:
        return text
    old = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    new = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.stmt)]
    assert [type(n) for n in old] == [type(n) for n in new]
    lines = text.split("\n")
    done = set()
    for o, n in zip(old, new):
        comment = ignores.get(getattr(o, "lineno", None))
        if comment and o.lineno not in done:
            done.add(o.lineno)
            lines[n.lineno - 1] += "  " + comment
    return "\n".join(lines)


def convert(source: str, src_name: str) -> str:
    tree = ast.parse(source)
    ignores = _type_ignores(source, src_name, tree)
    tree = AsyncToSync().visit(tree)
    _drop_unused_imports(tree)
    _ensure_import(tree, "time")
    ast.fix_missing_locations(tree)
    head = (
        f"# WARNING: generated by tools/async_to_sync.py from {src_name}: do not edit.\n"
        f"# Edit {src_name} and run `python3 tools/async_to_sync.py` (make lint checks it);\n"
        "# the comments that say why are in that file.\n"
    )
    return head + _keep_type_ignores(tree, ignores, ast.unparse(tree)) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a generated file is out of date")
    args = ap.parse_args()
    stale = []
    for src, dst in FILES:
        s, d = ROOT / src, ROOT / dst
        if not s.exists():
            continue
        out = convert(s.read_text(), s.name)
        if args.check:
            if not d.exists() or d.read_text() != out:
                stale.append(dst)
        elif not d.exists() or d.read_text() != out:
            d.write_text(out)
            print(f"wrote {dst}")
    if stale:
        print(f"out of date (run python3 tools/async_to_sync.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
