"""tools/failure_matrix.py: one table from target/failure-matrix/python.json
and java.json, checked on a hand-made java.json
(python/tests/data/failure-matrix) and a python.json written here in the
matrix's schema (the real one is printed and checked by
test_failure_matrix.py); the hand-made files hold a few cells, so the table
tests pass --allow-partial. Then its refusal of what is not one whole,
current run of both halves. No database needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

TOOL = REPO / "tools" / "failure_matrix.py"
JAVA = Path(__file__).parent / "data" / "failure-matrix" / "java.json"
CHECKS = {"split_commits": 0, "spans_counted": 0, "spans_silent": 0, "in_doubt_after_recovery": 0, "rows_wrong": 0,
          "nota_while_silent": 0, "leaks": 0, "app_error_ejections": 0, "failures_counted": 1, "failures_expected": 1}


def cell(model="node", mode="soft", phase="commit", fault="crash", holds=True, **extra):
    return {"model": model, "mode": mode, "phase": phase, "fault": fault, "holds": holds, "checks": dict(CHECKS),
            "outcome": "committed", "seconds": 1.0, "note": "", **extra}


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)


def partial(*args):
    return run(*args, "--allow-partial")


def write_python(d: Path, cells, seconds=12.5) -> None:
    (d / "python.json").write_text(json.dumps({"language": "python", "tm": "racaffinity.tpc",
                                               "seconds": seconds, "cells": cells}))


@pytest.fixture
def both(tmp_path):
    shutil.copy(JAVA, tmp_path / "java.json")
    write_python(tmp_path, [cell(), cell(phase="work", fault="reset", checks=dict(CHECKS, spans_counted=1)),
                            cell(mode="strict", phase="prepare", fault="trigger")])
    return tmp_path


def test_one_table_with_a_mark_per_language_and_a_summary_line_each(both):
    done = partial(both)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("marks: python/java")
    header = lines[1].split()
    assert header[:3] == ["model", "mode", "phase"] and "crash" in header and "trigger" in header
    row = next(l.split() for l in lines if l.split()[:3] == ["node", "soft", "commit"])
    assert row[3 + header[3:].index("crash")] == "ok/ok"
    row = next(l.split() for l in lines if l.split()[:3] == ["node", "soft", "work"])
    assert row[3 + header[3:].index("reset")] == "ok*/ok*"  # spanned and counted, in both
    row = next(l.split() for l in lines if l.split()[:3] == ["database", "strict", "recover"])
    assert row[3 + header[3:].index("blackhole")] == "./allow"
    assert any(l.startswith("python (racaffinity.tpc): 3 cells, 3 holding, 0 allowed, 0 failing, runtime 12.5 s")
               for l in lines)
    assert any(l.startswith("java (narayana): 4 cells, 3 holding, 1 allowed, 0 failing, runtime 42.5 s")
               for l in lines)
    assert any("allowed java database/strict/recover/blackhole: fixture: an allow-listed cell" in l for l in lines)


def test_a_cell_that_does_not_hold_fails_the_run_and_is_named(both):
    write_python(both, [cell(), cell(phase="end", holds=False, note="leaks: live=1")])
    done = partial(both)
    assert done.returncode == 1
    row = next(l.split() for l in done.stdout.splitlines() if l.split()[:3] == ["node", "soft", "end"])
    assert "FAIL/." in row
    assert "FAIL python node/soft/end/crash:" in done.stdout and "leaks: live=1" in done.stdout


def test_without_java_json_it_says_so_still_prints_python_and_fails(tmp_path):
    write_python(tmp_path, [cell()], seconds=3.0)
    done = partial(tmp_path)
    assert done.returncode == 1  # a missing half is no verdict (it printed and passed before)
    assert "java: no java.json" in done.stdout and "python (racaffinity.tpc): 1 cells, 1 holding" in done.stdout
    assert "ok" in done.stdout.splitlines()[3]
    # runtime falls back to the sum of the cells
    (tmp_path / "python.json").write_text(json.dumps({"language": "python", "cells": [cell(), cell(phase="work")]}))
    assert "runtime 2.0 s" in partial(tmp_path).stdout


def test_markdown_for_the_readme(both):
    done = partial(both, "--markdown")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("| model | mode | phase |"))
    assert set(lines[i + 1].replace("|", "")) == {"-"}
    assert any(l.startswith("| node | soft | commit | ok/ok |") for l in lines)
    assert any(l.startswith("- java (narayana): 4 cells") for l in lines)


def test_language_filter_malformed_and_missing_files(both, tmp_path_factory):
    done = partial(both, "--language", "java")
    assert done.returncode == 0 and done.stdout.splitlines()[0].startswith("marks: java ")
    (both / "python.json").write_text('{"language": "python", "cells": [{"model": "node"}]}')
    done = run(both)
    assert done.returncode == 2 and "cell 0 lacks mode, phase, fault, holds, checks" in done.stderr
    empty = tmp_path_factory.mktemp("empty")
    done = run(empty)
    assert done.returncode == 2 and "no matrix file" in done.stderr


# -- one whole, current run of both halves -------------------------------------

PHASES = ["start", "work", "end", "prepare", "commit", "rollback", "recover"]
APP_ERRORS = [("constraint", "work"), ("trigger", "prepare"), ("serialization", "work"), ("password", "start")]


# Cells one half runs on its own (review items of that binding), per language.
OWN = {"python": [("stall", "prepare"), ("resolver", "recover")]}


def whole(language="java"):
    """The cells a half runs (test_failure_matrix.py's cells_of): the 156
    both run, and its own."""
    pairs = [(p, f) for p in PHASES for f in ("crash", "reset", "blackhole", "latency", "refused")]
    pairs += [(p, f) for f, p in APP_ERRORS + OWN.get(language, [])]
    return [cell(model=m, mode=o, phase=p, fault=f) for m in ("node", "database") for o in ("soft", "strict")
            for p, f in pairs]


# Java's own cells (issue 27): a node gone at PREPARE, a refused login in the XA heartbeat.
OWN["java"] = [("gone", "prepare"), ("hb_login", "start")]


def write(d: Path, language: str, cells, **extra) -> Path:
    p = d / f"{language}.json"
    p.write_text(json.dumps({"language": language, "tm": "test", "cells": cells, **extra}))
    return p


def test_two_whole_current_halves_pass(tmp_path):
    write(tmp_path, "python", whole("python"))
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "python (test): 164 cells, 164 holding" in done.stdout
    assert "java (test): 164 cells, 164 holding" in done.stdout


def test_a_half_without_its_own_cells_fails_and_names_them(tmp_path):
    # Python's late-PREPARE (stall) and racing-resolver cells are the Python
    # half's; the Java half does not run them (yet).
    write(tmp_path, "python", whole())
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 1 and "python.json lacks 8 cells: node/soft/prepare/stall" in done.stdout, done.stdout
    assert "java.json lacks" not in done.stdout


def test_a_missing_half_fails_unless_only_the_other_is_asked_for(tmp_path):
    write(tmp_path, "java", whole())
    done = run(tmp_path)
    assert done.returncode == 1 and "python: no python.json" in done.stdout, done.stdout
    assert run(tmp_path, "--language", "java").returncode == 0


def test_a_narrowed_run_fails_even_with_every_cell(tmp_path):
    write(tmp_path, "java", whole())
    write(tmp_path, "python", whole()[:3], narrowed=True)
    done = run(tmp_path)
    assert done.returncode == 1 and "python.json records a narrowed run" in done.stdout, done.stdout
    write(tmp_path, "python", whole("python"), narrowed=True)
    assert run(tmp_path).returncode == 1
    write(tmp_path, "python", whole()[:3], narrowed=True)
    assert run(tmp_path, "--language", "python", "--allow-partial").returncode == 0  # iterating on a few cells


def test_a_half_that_lacks_a_cell_fails_and_names_it(tmp_path):
    write(tmp_path, "java", whole())
    write(tmp_path, "python", whole("python")[1:])
    done = run(tmp_path)
    assert done.returncode == 1 and "python.json lacks 1 cell: node/soft/start/crash" in done.stdout, done.stdout


def test_a_cell_twice_or_one_the_matrix_does_not_have_fails(tmp_path):
    write(tmp_path, "python", whole("python") + [cell(phase="start", fault="meteor")])
    write(tmp_path, "java", whole() + [whole()[5]])
    done = partial(tmp_path)  # even so
    assert done.returncode == 1, done.stdout
    assert "python.json has cells the matrix does not: node/soft/start/meteor" in done.stdout
    assert "java.json has cells more than once: node/soft/work/crash" in done.stdout


def test_a_file_older_than_the_sources_it_describes_is_stale(tmp_path):
    write(tmp_path, "python", whole("python"))
    old = write(tmp_path, "java", whole())
    os.utime(old, (1_000_000, 1_000_000))  # 1970: before every source of this checkout
    done = run(tmp_path)
    assert done.returncode == 1 and "java.json is older than" in done.stdout and "stale" in done.stdout, done.stdout


def test_no_other_file_of_the_directory_is_read(tmp_path):
    write(tmp_path, "python", whole("python"))
    write(tmp_path, "java", whole())
    write(tmp_path, "python-last-week", [cell(holds=False)])
    done = run(tmp_path)
    assert done.returncode == 0 and "python-last-week" not in done.stdout, done.stdout
