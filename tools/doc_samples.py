#!/usr/bin/env python3
"""The code samples of README.md and docs/*.md, for the tests that run them.

A sample is a fenced block right after a marker line:

    <!-- sample: LANG/NAME [LANG/NAME2 ...] -->

LANG is c, rust, python or java; each language's test runs every sample of
its language as a user would paste it into a new project outside the
repository. A `toml` block marked with rust sample names is those samples'
`[dependencies]`; an `xml` block marked with java sample names is those
samples' Maven `pom.xml` (the sample then runs as a Maven project, its class
under src/main/java; without one it runs in source-file mode). A block that
is not meant to run (a config excerpt, a fragment of a shown file) is marked
`<!-- not-a-sample: why -->`.

    tools/doc_samples.py check           fail when a c/rust/python/java/toml block has no marker
    tools/doc_samples.py list [LANG]     one line per sample: name, file:line
    tools/doc_samples.py extract DIR     DIR/<lang>/<name>/ with the sample's files, DIR/samples.json

The checker is what makes "every sample runs" hold: an unmarked block fails
`make test-doc-samples`, and every marked one is run by its language's test.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("c", "rust", "python", "java")
CHECKED = LANGS + ("toml",)
MARKER = re.compile(r"<!--\s*(sample|not-a-sample):\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
# What a user replaces with their checkout; the tests put the real path there.
CHECKOUT_PLACEHOLDER = "/path/to/racaffinity"


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    text: str
    marker: str | None = None  # "sample" | "not-a-sample" | None
    names: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang = m.group(2).split(",")[0].lower()
        start = i
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        b = Block(path, start + 1, lang, "\n".join(body) + "\n")
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mm = MARKER.search(lines[j]) if j >= 0 else None
        if mm:
            b.marker = mm.group(1)
            if b.marker == "sample":
                b.names = mm.group(2).split()
        out.append(b)
    return out


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in blocks(p)]


def check() -> list[str]:
    errors = []
    seen: dict[str, str] = {}
    for b in all_blocks():
        if b.lang not in CHECKED:
            continue
        if b.marker is None:
            errors.append(f"{b.where}: a ```{b.lang} block without <!-- sample: ... --> or <!-- not-a-sample: ... -->")
            continue
        if b.marker != "sample":
            continue
        for name in b.names:
            lang = name.split("/", 1)[0]
            if "/" not in name or lang not in LANGS:
                errors.append(f"{b.where}: sample name {name!r} is not LANG/NAME with LANG in {LANGS}")
            elif b.lang == "toml" and lang != "rust":
                errors.append(f"{b.where}: a toml block can only be a rust sample's dependencies")
            elif b.lang != "toml" and lang != b.lang:
                errors.append(f"{b.where}: a ```{b.lang} block named {name!r}")
            elif b.lang != "toml":
                if name in seen:
                    errors.append(f"{b.where}: sample {name!r} already at {seen[name]}")
                seen[name] = b.where
    for b in all_blocks():
        if b.lang == "toml" and b.marker == "sample":
            for name in b.names:
                if name not in seen:
                    errors.append(f"{b.where}: dependencies for {name!r}, which has no rust block")
    for b in all_blocks():
        if b.lang == "xml" and b.marker == "sample":
            for name in b.names:
                if not name.startswith("java/") or name not in seen:
                    errors.append(f"{b.where}: a pom.xml for {name!r}, which has no java block")
    for name, where in seen.items():
        if name.startswith("rust/") and not any(
            b.lang == "toml" and name in b.names for b in all_blocks()
        ):
            errors.append(f"{where}: rust sample {name!r} has no marked toml block with its [dependencies]")
    return errors


def samples() -> dict[str, dict]:
    """name -> {lang, source, files: {relative path: text}}"""
    out: dict[str, dict] = {}
    deps: dict[str, str] = {}
    poms: dict[str, str] = {}
    for b in all_blocks():
        if b.marker != "sample":
            continue
        for name in b.names:
            if b.lang == "toml":
                deps[name] = b.text
                continue
            if b.lang == "xml":
                poms[name] = b.text
                continue
            lang, short = name.split("/", 1)
            if lang == "c":
                files = {"app.c": b.text}
            elif lang == "python":
                files = {"app.py": b.text}
            elif lang == "java":
                m = re.search(r"public\s+class\s+(\w+)", b.text)
                files = {f"{m.group(1) if m else 'Main'}.java": b.text}
            else:
                files = {"src/main.rs": b.text}
            out[name] = {"lang": lang, "name": short, "source": b.where, "files": files}
    for name, text in deps.items():
        if name in out:
            pkg = name.split("/", 1)[1].replace("/", "-")
            out[name]["files"]["Cargo.toml"] = (
                f'[package]\nname = "sample-{pkg}"\nversion = "0.1.0"\nedition = "2021"\n\n{text}'
            )
    for name, text in poms.items():
        if name in out:
            (java,) = out[name]["files"]
            out[name]["files"] = {"pom.xml": text, f"src/main/java/{java}": out[name]["files"][java]}
    return out


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "check"
    if cmd == "check":
        errors = check()
        for e in errors:
            print(e, file=sys.stderr)
        n = len(samples())
        print(f"doc samples: {n} marked, {len(errors)} problem(s)")
        return 1 if errors else 0
    if cmd == "list":
        lang = argv[2] if len(argv) > 2 else None
        for name, s in samples().items():
            if lang is None or s["lang"] == lang:
                print(f"{name}\t{s['source']}")
        return 0
    if cmd == "extract":
        out = Path(argv[2])
        all_s = samples()
        for name, s in all_s.items():
            d = out / name
            for rel, text in s["files"].items():
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / rel).write_text(text.replace(CHECKOUT_PLACEHOLDER, str(ROOT)), encoding="utf-8")
        (out / "samples.json").write_text(json.dumps(all_s, indent=1), encoding="utf-8")
        return 0
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
