#!/usr/bin/env python3
"""The demo's chart shows splits at a glance (make test-demo, after make demo).

target/demo/branches.svg must carry, per part, a headline "N of M split" and one
mark (class "split") above every split transaction and above no other. Checked
on a made-up run with known splits (part 2: transactions 3, 7, 8), then on the
chart and results.json that `make demo` just wrote.

    target/pyenv/bin/python tests/demo/chart_test.py
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "demo"))
import run as demo  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"


def panels(svg: str) -> list[tuple[str, list[str]]]:
    """(headline text, split marks' gtrids) per part, top to bottom."""
    root = ET.fromstring(svg)
    heads = [e.text or "" for e in root.iter(f"{NS}text") if e.get("class") == "headline"]
    marks = [(e.findtext(f"{NS}title") or "").split(":")[0] for e in root.iter(f"{NS}rect") if e.get("class") == "split"]
    by_part = [[g for g in marks if g.startswith(f"demo{p}-")] for p in (1, 2, 3)]
    return list(zip(heads, by_part))


def made_up() -> SimpleNamespace:
    txs = []
    for part in (1, 2, 3):
        for i in range(12):
            t = demo.Tx(part, i, f"demo{part}-{i:03d}")
            for k, lang in enumerate(demo.LANGS):
                node = "RAC1"
                if part == 2 and i in (3, 7, 8) and k == 1:
                    node = "RAC3"
                t.branches[lang] = demo.Branch(lang, "committed", node)
            t.misrouted = 2 if part == 2 and i == 5 else 0  # a miss without a split: no mark
            txs.append(t)
    return SimpleNamespace(txs=txs, markers={})


def check(svg: str, want: list[tuple[int, int, list[str] | None]]) -> list[str]:
    got = panels(svg)
    errors = []
    if len(got) != 3:
        return [f"{len(got)} panel headlines, wanted 3"]
    for part, ((head, marks), (splits, total, gtrids)) in enumerate(zip(got, want), start=1):
        if not re.match(rf"{splits} of {total} split\b", head):
            errors.append(f"part {part}: headline {head!r}, wanted '{splits} of {total} split'")
        if len(marks) != splits or (gtrids is not None and sorted(marks) != gtrids):
            errors.append(f"part {part}: split marks over {marks}, wanted {gtrids or splits}")
    return errors


def main() -> int:
    errors = check(demo.render_svg(made_up()),
                   [(0, 12, []), (3, 12, ["demo2-003", "demo2-007", "demo2-008"]), (0, 12, [])])
    svg, results = ROOT / "target/demo/branches.svg", ROOT / "target/demo/results.json"
    if svg.exists() and results.exists():
        parts = json.loads(results.read_text())["parts"]
        errors += [f"{svg.name}: {e}" for e in check(svg.read_text(), [
            (parts[p]["split"], parts[p]["transactions"], None) for p in ("1", "2", "3")])]
        real = f"; {svg.relative_to(ROOT)}: " + ", ".join(h for h, _ in panels(svg.read_text()))
    else:
        real = f"; no {svg.relative_to(ROOT)} (make demo) to check"
    for e in errors:
        print(f"chart_test: FAIL {e}")
    if not errors:
        print("chart_test: split marks and headlines match" + real)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
