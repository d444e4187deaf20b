#!/usr/bin/env python3
"""Prints the failure matrix of issue 11 [xa-faults] as one table.

    python3 tools/failure_matrix.py [DIR] [--markdown] [--language NAME ...] [--allow-partial] [--replay]

Reads DIR/python.json (python/tests/test_failure_matrix.py) and DIR/java.json
(the Java half's FailureMatrixTest), DIR defaulting to target/failure-matrix
under the repository root; no other file there. Each is

    {"language": "...", "tm": "...", "seconds": 123.4 (optional),
     "narrowed": true (optional: the run covered only some cells),
     "cells": [{"model", "mode", "phase", "fault", "holds", "checks",
                "outcome", "seconds", "note", "allowed" (optional)}]}

Rows are model x mode x phase, columns the faults; with several languages
each cell shows one mark per language, in the order of the legend line:

    ok     the cell holds
    ok*    it holds, and the transaction spanned nodes (soft mode; counted)
    FAIL   it does not hold
    allow  it does not hold and is allow-listed (see its note)
    .      no such cell (application errors have one phase each)

Then one summary line per language (cells, holding, allowed, runtime) and
the notes of cells that do not hold. Exits 1 if a cell does not hold and is
not allow-listed ("allowed": true), or if the files are not one whole,
current run: a language's file is missing (both are required unless
--language names the ones wanted), a file records a narrowed run or lacks
cells of the matrix (CELLS below and the language's OWN_CELLS; both accepted with --allow-partial, for
iterating on a few cells and for hand-made files), has a cell twice or one
the matrix does not, or is older than a tracked source it describes
(SOURCES: the results of an earlier run of other code). Exits 2 if no file could be read or one is
malformed. Python 3 standard library only. Tests: python/tests/test_failure_matrix_tool.py.

With --replay it prints the failure matrix's replay dimension of issue 29
[continuity] instead: DIR/replay-python.json (python/tests/test_replay_matrix.py)
and DIR/replay-java.json (ReplayMatrixTest), each

    {"language": "...", "cells": [{"model", "step", "fault", "holds", "copies",
                                   "replays", "outcome", "seconds", "mutated"}]}

Rows are model x step (REPLAY_STEPS), columns the faults (REPLAY_FAULTS); a
cell of a step where a COMMIT is in flight (REPLAY_IN_FLIGHT) comes twice,
as run and "mutated" (a blind replay, no commit-outcome check), and the
mutant must NOT hold: that shows the cell's check can fail. Marks:

    ok     the cell holds (and its mutant, where it has one, fails it)
    FAIL   it does not hold
    MUT    it holds, and so does its mutant: the check cannot fail there
    .      no such cell

Then one summary line per language and each failing cell's outcome. The
same verdicts of a whole, current run as above (SOURCES: REPLAY_SOURCES).
Tests: python/tests/test_replay_matrix_tool.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

MODELS = ["node", "database"]
MODES = ["soft", "strict"]
PHASES = ["start", "work", "end", "prepare", "commit", "rollback", "recover"]
FAULTS = ["crash", "reset", "blackhole", "latency", "refused", "constraint", "trigger", "serialization", "password",
          "stall", "resolver"]
KNOWN = ["python", "java"]  # the languages expected in the directory
INFRA_FAULTS = ["crash", "reset", "blackhole", "latency", "refused"]
APP_ERRORS = [("constraint", "work"), ("trigger", "prepare"), ("serialization", "work"), ("password", "start")]
# Every language runs the same cells: each infrastructure fault in each
# phase, each application error in the one phase it happens in.
CELLS = [(model, mode, phase, fault) for model in MODELS for mode in MODES
         for phase, fault in [(p, f) for p in PHASES for f in INFRA_FAULTS] + [(p, f) for f, p in APP_ERRORS]]
# Cells one half runs on its own, (fault, phase) in each lane: a review's
# items of that binding, until the other half runs them too (then they move
# into CELLS). Python: "stall", the branch's backend stopped (SIGSTOP) right
# before b1's PREPARE, so the PREPARE runs late (issue 27 P1); "resolver",
# another party commits a scanned xid before recover_all's own command (P2).
OWN_CELLS: Dict[str, List[Tuple[str, str]]] = {"python": [("stall", "prepare"), ("resolver", "recover")]}


def cells_of(language: str) -> List[Tuple[str, str, str, str]]:
    """Every cell of the matrix `language` runs."""
    own = [(model, mode, phase, fault) for model in MODELS for mode in MODES
           for fault, phase in OWN_CELLS.get(language, [])]
    return CELLS + own
# What each half's results depend on (tracked files under these paths).
SOURCES = {
    "python": ["rust", "python/src", "python/tests/test_failure_matrix.py", "tests/cluster/faults"],
    "java": ["rust", "java/src", "tests/cluster/faults"],
}
CELL_KEYS = ("model", "mode", "phase", "fault", "holds", "checks")

# Java's own cells (issue 27, FailureMatrixTest.OWN_CELLS): "gone", the node
# crashes right before the second PREPARE and stays down until the TM gave up
# (its rollback cannot connect) and the application closed its XAConnections;
# "hb_login", one user's refused login reaches the XA heartbeat, which probes
# with the last credentials passed to getXAConnection(user, password).
OWN_CELLS["java"] = [("gone", "prepare"), ("hb_login", "start")]
FAULTS += ["gone", "hb_login"]

ROOT = Path(__file__).resolve().parents[1]

# The replay dimension (--replay): a fault at each step of one request, on
# independent nodes and on instances of one database.
REPLAY_STEPS = ["before", "mid", "before_commit", "commit_lost", "after"]
REPLAY_FAULTS = ["crash", "blackhole", "reset", "refuse"]
REPLAY_IN_FLIGHT = ["commit_lost"]
REPLAY_CELLS = [(model, step, fault, False) for model in MODELS for step in REPLAY_STEPS for fault in REPLAY_FAULTS]
REPLAY_CELLS += [(model, step, fault, True) for model in MODELS for step in REPLAY_IN_FLIGHT for fault in REPLAY_FAULTS]
REPLAY_KEYS = ("model", "step", "fault", "holds", "copies", "outcome", "mutated")
REPLAY_SOURCES = {
    "python": ["rust", "python/src", "python/tests/test_replay_matrix.py", "python/tests/faultproxy.py"],
    "java": ["rust", "java/src", "java/test-support"],
}


class Malformed(Exception):
    pass


def load(path: Path, keys: Tuple[str, ...] = CELL_KEYS) -> Dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Malformed(f"{path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("language"), str) or not isinstance(doc.get("cells"), list):
        raise Malformed(f"{path}: expected an object with \"language\" and \"cells\"")
    for i, c in enumerate(doc["cells"]):
        missing = [k for k in keys if not isinstance(c, dict) or k not in c]
        if missing:
            raise Malformed(f"{path}: cell {i} lacks {', '.join(missing)}")
    return doc


def cell_problems(doc: Dict[str, Any], allow_partial: bool) -> List[str]:
    """Why `doc` is not one whole run of the matrix (empty if it is)."""
    name = f"{doc['language']}.json"
    if doc.get("narrowed") is True and not allow_partial:
        return [f"{name} records a narrowed run (RACAFF_MATRIX_ONLY or the like): re-run the whole matrix"]
    keys = [(c["model"], c["mode"], c["phase"], c["fault"]) for c in doc["cells"]]
    return coverage_problems(name, keys, cells_of(doc["language"]), lambda k: "/".join(k), allow_partial)


def coverage_problems(name: str, keys: List[Any], expected: List[Any], show: Any, allow_partial: bool) -> List[str]:
    """The cells a run lacks (unless `allow_partial`), has beyond `expected`,
    or has twice; `show` names one cell."""
    seen: Dict[Any, int] = {}
    for k in keys:
        seen[k] = seen.get(k, 0) + 1
    fmt = lambda ks: ", ".join(show(k) for k in ks)  # noqa: E731
    out = []
    missing = [k for k in expected if k not in seen]
    if missing and not allow_partial:
        out.append(f"{name} lacks {len(missing)} cell{'s' if len(missing) > 1 else ''}: {fmt(missing[:10])}"
                   + (" ..." if len(missing) > 10 else ""))
    unknown = sorted(k for k in seen if k not in set(expected))
    if unknown:
        out.append(f"{name} has cells the matrix does not: {fmt(unknown)}")
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        out.append(f"{name} has cells more than once: {fmt(twice)}")
    return out


def stale(path: Path, language: str, sources: Dict[str, List[str]] = SOURCES) -> List[str]:
    """The file's results are older than a tracked source they depend on."""
    paths = sources.get(language)
    if not paths:
        return []
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *paths],
                                capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # not a git checkout (an unpacked sdist): nothing to compare with
    written = path.stat().st_mtime
    newest, newest_path = 0.0, ""
    for rel in filter(None, listed.decode("utf-8", "replace").split("\0")):
        try:
            m = os.stat(ROOT / rel).st_mtime
        except OSError:
            continue  # deleted in the work tree
        if m > newest:
            newest, newest_path = m, rel
    if newest > written:
        return [f"{path.name} is older than {newest_path}: stale, from an earlier run (re-run its tests)"]
    return []


def mark(cell: Dict[str, Any]) -> str:
    if cell["holds"]:
        spanned = (cell.get("checks") or {}).get("spans_counted", 0)
        return "ok*" if spanned else "ok"
    return "allow" if cell.get("allowed") else "FAIL"


def runtime(doc: Dict[str, Any]) -> float:
    if isinstance(doc.get("seconds"), (int, float)):
        return float(doc["seconds"])
    return float(sum(c.get("seconds", 0) or 0 for c in doc["cells"]))


def table(docs: List[Dict[str, Any]]) -> Tuple[List[str], List[List[str]]]:
    index: Dict[Tuple[str, str, str, str, str], Dict[str, Any]] = {}
    for d in docs:
        for c in d["cells"]:
            index[(d["language"], c["model"], c["mode"], c["phase"], c["fault"])] = c
    faults = [f for f in FAULTS if any(k[4] == f for k in index)] + sorted(
        {k[4] for k in index} - set(FAULTS))
    header = ["model", "mode", "phase"] + faults
    body = []
    for model in MODELS + sorted({k[1] for k in index} - set(MODELS)):
        for mode in MODES:
            for phase in PHASES:
                marks = []
                for f in faults:
                    per = [mark(index[k]) if (k := (d["language"], model, mode, phase, f)) in index else "."
                           for d in docs]
                    marks.append("/".join(per))
                if all(m.strip("/.") == "" for m in marks):
                    continue
                body.append([model, mode, phase] + marks)
    return header, body


def render(header: List[str], body: List[List[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


def replay_key(c: Dict[str, Any]) -> Tuple[str, str, str, bool]:
    return (c["model"], c["step"], c["fault"], c["mutated"] is True)


def replay_problems(doc: Dict[str, Any], name: str, allow_partial: bool) -> List[str]:
    """Why `doc` is not one whole run of the replay matrix (empty if it is)."""
    keys = [replay_key(c) for c in doc["cells"]]
    show = lambda k: "/".join(k[:3]) + (" (mutant)" if k[3] else "")  # noqa: E731
    return coverage_problems(name, keys, REPLAY_CELLS, show, allow_partial)


# Python's APIs as docs/continuity.md lists them: the sync pools and engine,
# then their asyncio forms.
API_ORDER = ["pools", "sqlalchemy", "async_pools", "async_sqlalchemy"]


def split_by_api(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One half per API its cells name (`api`: Python runs the matrix through
    `NodePools` and through the SQLAlchemy engine into one file); a file
    without `api` is one half."""
    apis = sorted({c.get("api") for c in doc["cells"]},
                  key=lambda a: (a is not None, API_ORDER.index(a) if a in API_ORDER else len(API_ORDER), str(a)))
    if len(apis) < 2:
        return [doc]
    return [dict(doc, language=f"{doc['language']} {api}", cells=[c for c in doc["cells"] if c.get("api") == api])
            for api in apis]


def replay_mark(run: Dict[str, Any], mutant: Any) -> str:
    if not run["holds"]:
        return "FAIL"
    return "MUT" if mutant is not None and mutant["holds"] else "ok"


def replay_main(args: argparse.Namespace) -> int:
    d = Path(args.dir)
    docs = []
    problems: List[str] = []
    try:
        for name in args.language or KNOWN:
            p = d / f"replay-{name}.json"
            if not p.exists():
                problems.append(f"{name}: no {p.name} in {d} (that half has not run)")
                continue
            doc = load(p, REPLAY_KEYS)
            if doc["language"] != name:
                raise Malformed(f"{p}: \"language\" is {doc['language']!r}, not {name!r}")
            problems += [f"{name}: {m}" for m in stale(p, name, REPLAY_SOURCES)]
            for half in split_by_api(doc):
                docs.append(half)
                problems += [f"{half['language']}: {m}" for m in replay_problems(half, p.name, args.allow_partial)]
    except Malformed as e:
        print(f"failure_matrix: {e}", file=sys.stderr)
        return 2
    if not docs:
        print(f"failure_matrix: no replay matrix file in {d} (run python/tests/test_replay_matrix.py or"
              " ReplayMatrixTest)", file=sys.stderr)
        return 2
    order = {name: i for i, name in enumerate(KNOWN)}
    # Stable: a language's halves keep split_by_api's order.
    docs.sort(key=lambda doc: order.get(doc["language"].split()[0], len(KNOWN)))
    index = {(doc["language"],) + replay_key(c): c for doc in docs for c in doc["cells"]}
    header = ["model", "step"] + REPLAY_FAULTS
    body = []
    for model in MODELS:
        for step in REPLAY_STEPS:
            row = [model, step]
            for fault in REPLAY_FAULTS:
                marks = []
                for doc in docs:
                    k = (doc["language"], model, step, fault)
                    marks.append(replay_mark(index[k + (False,)], index.get(k + (True,)))
                                 if k + (False,) in index else ".")
                row.append("/".join(marks))
            if any(m.strip("/.") for m in row[2:]):
                body.append(row)
    out = [("Marks: " if args.markdown else "marks: ") + "/".join(doc["language"] for doc in docs)
           + " — ok holds (its blind-replay mutant, where it has one, fails it), FAIL does not hold,"
           " MUT holds and so does its mutant, . no cell"]
    if args.markdown:
        out.append("")
    out.append(render(header, body, args.markdown))
    if args.markdown:
        out.append("")
    failing = []
    for doc in docs:
        runs = [c for c in doc["cells"] if c["mutated"] is not True]
        mutants = [c for c in doc["cells"] if c["mutated"] is True]
        holding = sum(1 for c in runs if c["holds"])
        caught = sum(1 for c in mutants if not c["holds"])
        failing += [(doc["language"], c, "does not hold") for c in runs if not c["holds"]]
        failing += [(doc["language"], c, "its mutant holds: the check cannot fail") for c in mutants if c["holds"]]
        out.append(("- " if args.markdown else "") + f"{doc['language']}: {len(runs)} cells, {holding} holding;"
                   f" {len(mutants)} mutants, {caught} failing as they must; runtime {runtime(doc):.1f} s")
    for p in problems:
        out.append(("- " if args.markdown else "") + "NOT A WHOLE RUN: " + p)
    for lang, c, why in failing:
        out.append(f"FAIL {lang} {c['model']}/{c['step']}/{c['fault']}{' (mutant)' if c['mutated'] is True else ''}:"
                   f" {why}: {c['copies']} copies, {c['outcome']}")
    try:
        print("\n".join(out))
    except BrokenPipeError:  # `| head`
        pass
    return 1 if failing or problems else 0


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=str(ROOT / "target" / "failure-matrix"))
    ap.add_argument("--markdown", action="store_true", help="a Markdown table (for the README)")
    ap.add_argument("--language", action="append", help="only this language's file (repeatable)")
    ap.add_argument("--allow-partial", action="store_true",
                    help="accept files with only some of the cells (a narrowed run, a hand-made file)")
    ap.add_argument("--replay", action="store_true",
                    help="the replay dimension of issue 29 (replay-python.json, replay-java.json)")
    args = ap.parse_args(argv)
    if args.replay:
        return replay_main(args)
    d = Path(args.dir)
    wanted = args.language or KNOWN
    docs = []
    problems: List[str] = []
    try:
        for name in wanted:
            p = d / f"{name}.json"
            if not p.exists():
                problems.append(f"{name}: no {name}.json in {d} (that half has not run)")
                continue
            doc = load(p)
            if doc["language"] != name:
                raise Malformed(f"{p}: \"language\" is {doc['language']!r}, not {name!r}")
            docs.append(doc)
            problems += [f"{name}: {m}" for m in cell_problems(doc, args.allow_partial) + stale(p, name)]
    except Malformed as e:
        print(f"failure_matrix: {e}", file=sys.stderr)
        return 2
    order = {name: i for i, name in enumerate(KNOWN)}
    # Stable: a language's halves keep split_by_api's order.
    docs.sort(key=lambda doc: order.get(doc["language"].split()[0], len(KNOWN)))
    if not docs:
        print(f"failure_matrix: no matrix file in {d} (run python/run_tests.sh or java/run_tests.sh)", file=sys.stderr)
        return 2
    header, body = table(docs)
    out = []
    langs = [doc["language"] for doc in docs]
    out.append(("marks: " if not args.markdown else "Marks: ") + "/".join(langs)
               + " — ok holds, ok* holds and spanned (counted), FAIL does not hold, allow allow-listed, . no cell")
    if args.markdown:
        out.append("")
    out.append(render(header, body, args.markdown))
    if any(c["model"] == "database" and c["fault"] == "crash" for doc in docs for c in doc["cells"]):
        out.append(("" if not args.markdown else "\n") + "database model (three instances of ONE server): a crash "
                   "of one instance is its proxy going away (refuse + reset); killing the server would kill every "
                   "instance at once.")
    if args.markdown:
        out.append("")
    failing = []
    for doc in docs:
        cells = doc["cells"]
        holding = sum(1 for c in cells if c["holds"])
        allowed = [c for c in cells if not c["holds"] and c.get("allowed")]
        bad = [c for c in cells if not c["holds"] and not c.get("allowed")]
        failing += [(doc["language"], c) for c in bad]
        line = (f"{doc['language']} ({doc.get('tm', '?')}): {len(cells)} cells, {holding} holding, "
                f"{len(allowed)} allowed, {len(bad)} failing, runtime {runtime(doc):.1f} s")
        out.append(("- " if args.markdown else "") + line)
        for c in allowed:
            out.append(f"  allowed {doc['language']} {c['model']}/{c['mode']}/{c['phase']}/{c['fault']}: {c.get('note', '')}")
    for p in problems:
        out.append(("- " if args.markdown else "") + "NOT A WHOLE RUN: " + p)
    for lang, c in failing:
        out.append(f"FAIL {lang} {c['model']}/{c['mode']}/{c['phase']}/{c['fault']}: "
                   f"{json.dumps(c.get('checks'), sort_keys=True)} {c.get('note', '')}")
    try:
        print("\n".join(out))
    except BrokenPipeError:  # `| head`
        pass
    return 1 if failing or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
