#!/usr/bin/env python3
"""`make help` names every make target that README.md and docs/*.md tell users to run.

Fails, naming the file and target, when the docs use `make X` and `make help`
does not list X, or when `make help` lists a target the Makefile lacks.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    defined = set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", makefile, flags=re.M))
    help_text = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
    listed = set(re.findall(r"^\s+make ([a-z][a-z0-9-]*)", help_text, flags=re.M))
    errors = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        # `make X` in code spans and blocks; "make targets" in prose is not one.
        for m in re.finditer(r"(?:`|^|\$ |&& |; )make ([a-z][a-z0-9-]*)", text, flags=re.M):
            target = m.group(1)
            if target not in listed and target != "help":
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{path.relative_to(ROOT)}:{line}: `make {target}` is not listed by make help")
    for target in sorted(listed - defined):
        errors.append(f"Makefile: make help lists {target!r}, which is not a target")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"make help: {len(listed)} targets listed, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
