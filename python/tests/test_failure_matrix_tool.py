"""tools/failure_matrix.py: one table from target/failure-matrix/*.json,
checked on a hand-made java.json (python/tests/data/failure-matrix) and a
python.json written here in the matrix's schema (the real one is printed
and checked by test_failure_matrix.py). No database needed."""

from __future__ import annotations

import json
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
    done = run(both)
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
    done = run(both)
    assert done.returncode == 1
    row = next(l.split() for l in done.stdout.splitlines() if l.split()[:3] == ["node", "soft", "end"])
    assert "FAIL/." in row
    assert "FAIL python node/soft/end/crash:" in done.stdout and "leaks: live=1" in done.stdout


def test_without_java_json_it_says_so_and_still_prints_python(tmp_path):
    write_python(tmp_path, [cell()], seconds=3.0)
    done = run(tmp_path)
    assert done.returncode == 0
    assert "java: no java.json" in done.stdout and "python (racaffinity.tpc): 1 cells, 1 holding" in done.stdout
    assert "ok" in done.stdout.splitlines()[3]
    # runtime falls back to the sum of the cells
    (tmp_path / "python.json").write_text(json.dumps({"language": "python", "cells": [cell(), cell(phase="work")]}))
    assert "runtime 2.0 s" in run(tmp_path).stdout


def test_markdown_for_the_readme(both):
    done = run(both, "--markdown")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("| model | mode | phase |"))
    assert set(lines[i + 1].replace("|", "")) == {"-"}
    assert any(l.startswith("| node | soft | commit | ok/ok |") for l in lines)
    assert any(l.startswith("- java (narayana): 4 cells") for l in lines)


def test_language_filter_malformed_and_missing_files(both, tmp_path_factory):
    done = run(both, "--language", "java")
    assert done.returncode == 0 and done.stdout.splitlines()[0].startswith("marks: java ")
    (both / "python.json").write_text('{"language": "python", "cells": [{"model": "node"}]}')
    done = run(both)
    assert done.returncode == 2 and "cell 0 lacks mode, phase, fault, holds, checks" in done.stderr
    empty = tmp_path_factory.mktemp("empty")
    done = run(empty)
    assert done.returncode == 2 and "no matrix file" in done.stderr
