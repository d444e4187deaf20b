#!/usr/bin/env python3
"""Every Rust crate a Cargo.toml of this repository depends on has its line
in docs/dependencies.md ("one line per dependency: what it is for").

    python3 tools/check_dependencies.py

Reads [dependencies], [dev-dependencies] and [build-dependencies] (and their
target-specific forms) of rust/*/Cargo.toml and fuzz/Cargo.toml; path
dependencies are this repository's own crates and need no line. A crate
counts as listed when docs/dependencies.md names it in backticks. Exits 1
naming each crate without a line and the manifest that brings it in.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("dependencies", "dev-dependencies", "build-dependencies")


def manifests() -> List[Path]:
    return sorted(REPO.glob("rust/*/Cargo.toml")) + [REPO / "fuzz" / "Cargo.toml"]


def dependency_tables(manifest: dict) -> Iterator[Dict[str, object]]:
    for section in SECTIONS:
        yield manifest.get(section, {})
    for target in manifest.get("target", {}).values():
        for section in SECTIONS:
            yield target.get(section, {})


def external_crates(path: Path) -> Iterator[str]:
    """The crates.io names `path` depends on (a renamed dependency by its
    `package`), path dependencies left out."""
    with path.open("rb") as f:
        manifest = tomllib.load(f)
    for table in dependency_tables(manifest):
        for name, spec in table.items():
            if isinstance(spec, dict):
                if "path" in spec:
                    continue
                name = spec.get("package", name)
            yield name


def missing(doc_text: str) -> List[Tuple[str, str]]:
    out = []
    for path in manifests():
        for crate in sorted(set(external_crates(path))):
            if f"`{crate}`" not in doc_text:
                out.append((crate, str(path.relative_to(REPO))))
    return out


def main() -> int:
    doc = REPO / "docs" / "dependencies.md"
    gaps = missing(doc.read_text(encoding="utf-8"))
    for crate, where in gaps:
        print(f"{doc.relative_to(REPO)}: no line for `{crate}` ({where} depends on it)", file=sys.stderr)
    print(f"dependencies: {sum(1 for _ in manifests())} manifests, {len(gaps)} crate(s) without a line")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
