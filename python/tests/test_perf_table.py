"""tools/perf_table.py (what `make bench` writes into docs/benchmarks.md) on
made-up benchmark outputs, no benchmark run: each target is judged on the
median it names, carries the issue that set it, a later issue's target for
the same row is judged apart, and a target without an issue stops the table.

Before, the issues were kept in a table keyed by each row's label, apart from
the targets: only `make bench` ran the tool, so a renamed label left a stale
entry behind and nothing ran the error path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("perf_table", REPO / "tools" / "perf_table.py")
assert _spec is not None and _spec.loader is not None
perf_table = importlib.util.module_from_spec(_spec)
sys.modules["perf_table"] = perf_table  # its dataclasses look their module up there
_spec.loader.exec_module(perf_table)


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, **sources: str) -> tuple:
    """perf_table.main over the given sources' texts (every other source
    missing): (exit status, the rows by label, the whole output)."""
    paths = {}
    for name in ("c", "python", "jmh", "java_interleaved", "rust_interleaved"):
        p = tmp_path / f"{name}.out"
        if name in sources:
            p.write_text(sources[name])
        paths[name] = p
    crit = tmp_path / "criterion"
    crit.mkdir(exist_ok=True)
    rc = perf_table.main(["perf_table.py", "--criterion", str(crit), "--c", str(paths["c"]),
                          "--python", str(paths["python"]), "--jmh", str(paths["jmh"]),
                          "--java-interleaved", str(paths["java_interleaved"]),
                          "--rust-interleaved", str(paths["rust_interleaved"]), "--date", "2026-12-05", *extra])
    rows: Dict[str, List[str]] = {}
    out = capsys.readouterr().out
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in ("Rust", "C", "Java", "Python"):
            rows[f"{cells[0]}: {cells[1]}"] = cells
    return rc, rows, out


JAVA = """\
JBENCH_PAIR affinityUnpinned 216.0 124.0 1.75 1.42 2.02
JBENCH_PAIR affinityDataSource 160.0 124.0 1.29 1.10 1.40
JBENCH_PAIR pinnedRoute 8.3 4.8 1.73 1.60 1.90
JBENCH_PAIR routeFloor 2.9 4.8 0.60 0.56 0.61
"""


def test_java_targets_carry_their_issue_and_a_later_target_is_judged_apart(tmp_path, capsys):
    rc, rows, _ = run(tmp_path, capsys, java_interleaved=JAVA)
    assert rc == 0
    unpinned = rows["Java: `AffinityDataSource` get + close, unpinned (interleaved)"]
    assert unpinned[5:] == ["1.75× (1.42–2.02)", "≤ 1.6× [fast-paths-2]", "**no**"]
    # [fast-paths] set ≤ 1.10×, [fast-paths-2] ≤ 1.3× for the same row: each verdict stands.
    pinned = rows["Java: `AffinityDataSource` get + close, pinned (interleaved)"]
    assert pinned[6:] == ["≤ 1.1× [fast-paths]; ≤ 1.3× [fast-paths-2]", "**no**; yes"]
    assert rows["Java: `Cluster.route()` on a pinned thread (cached; interleaved)"][6] == "≤ 1× [fast-paths]"
    floor = rows["Java: the route floor: this thread's route from a `ThreadLocal`, no check, no count (interleaved)"]
    assert floor[6:] == ["–", "–"]


def test_python_targets_are_judged_on_the_median_of_the_rounds(tmp_path, capsys):
    # The subject / baseline of the means (5.0 / 3.65 = 1.37) would miss ≤ 1.35×; the median of the
    # per-round ratios (1.34) is what the target reads.
    py = ("PYBENCH_VS pools_connection_pinned bare_pool_getconn_putconn 1.34 1.30 2.53 5000 3650\n"
          "PYBENCH_VS sqlalchemy_engine_pinned sqlalchemy_plain_connect 1.16 1.12 1.20 10800 9310\n"
          "PYBENCH noop_call 152 1\nPYBENCH pick_release 2040 13.4\nPYBENCH_RATIO pick_release 13.34 11.82 15.31\n")
    rc, rows, _ = run(tmp_path, capsys, python=py)
    assert rc == 0
    pinned = rows["Python: `NodePools.connection()` in a pin (interleaved)"]
    assert pinned[5:] == ["1.34× (1.30–2.53)", "≤ 1.35× [fast-paths-2]", "yes"]
    sa = rows["Python: SQLAlchemy engine `connect()` + close, in a pin (interleaved)"]
    assert sa[6:] == ["≤ 1.15× [fast-paths-2]", "**no**"]
    assert rows["Python: `Cluster.pick().release()`, unpinned"][5:] == [
        "13.34× (11.82–15.31)", "≤ 3× [fast-paths]", "**no**"]


def test_check_fails_on_a_missed_target_only(tmp_path, capsys):
    rc, _, _ = run(tmp_path, capsys, "--check", java_interleaved=JAVA)
    assert rc == 1
    rc, _, _ = run(tmp_path, capsys, "--check", java_interleaved="JBENCH_PAIR affinityUnpinned 190 124 1.53 1.4 1.6\n")
    assert rc == 0


def test_the_summary_counts_every_verdict(tmp_path, capsys):
    _, _, out = run(tmp_path, capsys, java_interleaved=JAVA)
    # unpinned (no), pinned (no; yes), cached route (no): 1 met of 4.
    assert "Targets met: 1 of 4;" in out


def test_no_source_at_all_is_exit_2(tmp_path, capsys):
    rc, rows, out = run(tmp_path, capsys)
    assert rc == 2 and rows == {} and out == ""


def test_a_target_without_its_issue_stops_the_table() -> None:
    # A spec can only give a Target with its issue; a row built by hand without one is refused.
    row = perf_table.Row("Java", "made up", 2.0, "base", 1.0, "≤ 3×", True)
    with pytest.raises(SystemExit, match="names no issue"):
        perf_table.render([row], [], "2026-12-05", "m", "make bench")
    # And every spec'd target has one, so the real table renders.
    targets = [t for spec in (perf_table.PY_ROWS, perf_table.PY_VERSUS_ROWS, perf_table.JAVA_ROWS)
               for *_rest, t in spec if t is not None]
    targets += [t for *_rest, t in perf_table.INTERLEAVED_ROWS if t is not None]
    targets += [t for *_rest, t in perf_table.RUST_INTERLEAVED_ROWS if t is not None]
    assert targets and all(isinstance(t, perf_table.Target) and t.issue for t in targets)


def test_write_readme_replaces_only_the_marked_block(tmp_path, capsys):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nbefore\n<!-- perf:begin -->\nold table\n<!-- perf:end -->\nafter\n")
    run(tmp_path, capsys, "--write-readme", str(page), java_interleaved=JAVA)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nbefore\n<!-- perf:begin -->\nMeasured 2026-12-05")
    assert "old table" not in text and text.endswith("<!-- perf:end -->\nafter\n")
    assert "≤ 1.6× [fast-paths-2]" in text
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="neither"):
        run(tmp_path, capsys, "--write-readme", str(page), java_interleaved=JAVA)
