"""tools/failure_matrix.py --replay: the replay dimension of issue 29 from
target/failure-matrix/replay-python.json and replay-java.json (written by
test_replay_matrix.py and ReplayMatrixTest), checked on files written here in
their schema: one table, a mark per language, and its refusal of a cell that
does not hold, a mutant that holds (the cell's check cannot fail), and what
is not one whole, current run. No database needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

TOOL = REPO / "tools" / "failure_matrix.py"
MODELS = ["node", "database"]
STEPS = ["before", "mid", "before_commit", "commit_lost", "after"]
FAULTS = ["crash", "blackhole", "reset", "refuse"]


def cell(model, step, fault, holds=True, mutated=False):
    return {"model": model, "step": step, "fault": fault, "holds": holds, "copies": 1 if holds else 2,
            "replays": 1, "outcome": "ok, 1 replay(s)", "seconds": 0.5, "mutated": mutated}


def whole():
    runs = [cell(m, s, f) for m in MODELS for s in STEPS for f in FAULTS]
    return runs + [cell(m, "commit_lost", f, holds=False, mutated=True) for m in MODELS for f in FAULTS]


def write(d: Path, language: str, cells) -> Path:
    p = d / f"replay-{language}.json"
    p.write_text(json.dumps({"language": language, "cells": cells}))
    return p


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), "--replay", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def row(out: str, model: str, step: str):
    header = out.splitlines()[1].split()
    r = next(l.split() for l in out.splitlines() if l.split()[:2] == [model, step])
    return dict(zip(header[2:], r[2:]))


def test_both_halves_whole_and_holding_pass_with_one_table(tmp_path):
    write(tmp_path, "python", whole())
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("marks: python/java")
    assert row(done.stdout, "database", "commit_lost") == {f: "ok/ok" for f in FAULTS}
    assert "java: 40 cells, 40 holding; 8 mutants, 8 failing as they must; runtime 24.0 s" in done.stdout


def test_a_cell_that_does_not_hold_fails_and_is_named(tmp_path):
    write(tmp_path, "python", whole())
    cells = whole()
    cells[1] = dict(cells[1], holds=False, copies=2, outcome="ok, 1 replay(s)")
    write(tmp_path, "java", cells)
    done = run(tmp_path)
    assert done.returncode == 1
    assert row(done.stdout, "node", "before")["blackhole"] == "ok/FAIL"
    assert "FAIL java node/before/blackhole: does not hold: 2 copies, ok, 1 replay(s)" in done.stdout


def test_a_mutant_that_holds_fails_the_run(tmp_path):
    # The blind replay passed: the cell's check could not have caught a double commit.
    cells = whole()
    cells[-1] = dict(cells[-1], holds=True, copies=1)
    write(tmp_path, "python", cells)
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 1
    assert row(done.stdout, "database", "commit_lost")["refuse"] == "MUT/ok"
    assert "FAIL python database/commit_lost/refuse (mutant): its mutant holds" in done.stdout


def test_a_missing_cell_mutant_or_half_is_not_a_whole_run(tmp_path):
    write(tmp_path, "python", whole()[:-1])
    done = run(tmp_path)
    assert done.returncode == 1
    assert "java: no replay-java.json" in done.stdout
    assert "replay-python.json lacks 1 cell: database/commit_lost/refuse (mutant)" in done.stdout
    assert run(tmp_path, "--language", "python", "--allow-partial").returncode == 0
    write(tmp_path, "python", whole() + [cell("node", "mid", "meteor"), whole()[0]])
    done = run(tmp_path, "--language", "python", "--allow-partial")
    assert done.returncode == 1
    assert "has cells the matrix does not: node/mid/meteor" in done.stdout
    assert "has cells more than once: node/before/crash" in done.stdout


def test_a_stale_or_malformed_file(tmp_path):
    write(tmp_path, "python", whole())
    old = write(tmp_path, "java", whole())
    os.utime(old, (1_000_000, 1_000_000))  # 1970: before every source of this checkout
    done = run(tmp_path)
    assert done.returncode == 1 and "replay-java.json is older than" in done.stdout, done.stdout
    (tmp_path / "replay-java.json").write_text('{"language": "java", "cells": [{"model": "node"}]}')
    done = run(tmp_path)
    assert done.returncode == 2 and "cell 0 lacks step, fault, holds, copies, outcome, mutated" in done.stderr
    os.remove(tmp_path / "replay-java.json")
    os.remove(tmp_path / "replay-python.json")
    done = run(tmp_path)
    assert done.returncode == 2 and "no replay matrix file" in done.stderr


def test_python_runs_through_two_apis_are_two_halves(tmp_path):
    # test_replay_matrix.py writes NodePools' and the SQLAlchemy engine's cells into one file,
    # each cell naming its `api` (CI: "has cells more than once" when they were one half).
    api = lambda cells, name: [dict(c, api=name) for c in cells]  # noqa: E731
    sqla = api(whole(), "sqlalchemy")
    sqla[0] = dict(sqla[0], holds=False, copies=2)
    write(tmp_path, "python", api(whole(), "pools") + sqla)
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("marks: python pools/python sqlalchemy/java")
    assert "more than once" not in done.stdout
    assert "FAIL python sqlalchemy node/before/crash: does not hold" in done.stdout
    assert row(done.stdout, "node", "before")["crash"] == "ok/FAIL/ok"
    write(tmp_path, "python", api(whole(), "pools") + api(whole(), "sqlalchemy")[:-1])
    done = run(tmp_path)
    assert done.returncode == 1 and "python sqlalchemy: replay-python.json lacks 1 cell" in done.stdout, done.stdout


def test_the_four_python_apis_are_marked_in_the_order_the_docs_give_them(tmp_path):
    # The sync pools and engine first, then their asyncio forms (docs/continuity.md's table).
    cells = [dict(c, api=name) for name in ("async_sqlalchemy", "sqlalchemy", "async_pools", "pools")
             for c in whole()]
    write(tmp_path, "python", cells)
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(
        "marks: python pools/python sqlalchemy/python async_pools/python async_sqlalchemy/java"), done.stdout
