#!/usr/bin/env python3
"""One version for Cargo, Maven, Python and the C header.

The source is the workspace version in Cargo.toml ([workspace.package]).
Everything else that names the version is either derived from it at build time
(the Python package's metadata, racaffinity_version(), the jar's
version.properties through Maven's ${project.version}) or is a literal that
this script keeps equal to it:

- Cargo.lock: the workspace crates;
- rust/ffi/src/capi/cluster.rs: RACAFFINITY_VERSION_MAJOR/MINOR/PATCH (the
  build also asserts them against CARGO_PKG_VERSION_*);
- rust/ffi/cbindgen.toml: the RACAFFINITY_VERSION string macro;
- include/racaffinity.h: the four macros as cbindgen writes them;
- every pom.xml under java/: the project's version, its parent's and any
  io.racaffinity dependency's when literal, and the racaffinity.version property;
- file names in docs and scripts: racaffinity-X.Y.Z.jar and the like;
- CMake version requests, find_package(racaffinity X.Y ...): major.minor;
- README.md's status line;
- CHANGELOG.md has a section for the version, and abi/ a baseline for it
  (checked only).

  tools/version.py check       every place agrees (make lint); exit 1 and a list when not
  tools/version.py set X.Y.Z   rewrite every literal place to X.Y.Z (the release step)
  tools/version.py show        print the version
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEMVER = r"\d+\.\d+\.\d+"
WORKSPACE_RE = re.compile(r"(^\[workspace\.package\][^\[]*?^version\s*=\s*\")(" + SEMVER + r")(\")", re.M | re.S)
POM_NS = "{http://maven.apache.org/POM/4.0.0}"
# File names that carry the version (the jar and its benchmark jar, the sdist, ...).
# A CMake version request: the same major.minor (cmake/racaffinityConfigVersion.cmake.in).
FIND_PACKAGE_RE = re.compile(r"(find_package\(racaffinity )(\d+\.\d+)(\b)")
FILE_NAME_RE = re.compile(r"(racaffinity(?:-[a-z]+)*-)(" + SEMVER + r")()(?=[-.])")
# Files whose version mentions are history, not the current version.
HISTORY = {"CHANGELOG.md", "Cargo.lock"}
HISTORY_DIRS = ("abi/",)


class Place:
    """One literal: a file, a regex whose group 2 is the version (group 1 and
    3 the text around it), and what it is, for the message."""

    def __init__(self, path: str, regex: re.Pattern, what: str, part: str | None = None):
        self.path, self.regex, self.what, self.part = path, regex, what, part

    def found(self) -> list[str]:
        text = (ROOT / self.path).read_text(encoding="utf-8")
        return [m.group(2) for m in self.regex.finditer(text)]

    def expected(self, version: str) -> str:
        if self.part is None:
            return version
        major, minor, patch = version.split(".")
        return {"major": major, "minor": minor, "patch": patch, "major.minor": f"{major}.{minor}"}[self.part]

    def rewrite(self, version: str) -> None:
        p = ROOT / self.path
        text = p.read_text(encoding="utf-8")
        new = self.regex.sub(lambda m: m.group(1) + self.expected(version) + m.group(3), text)
        if new != text:
            p.write_text(new, encoding="utf-8")


def workspace_version() -> str:
    m = WORKSPACE_RE.search((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    if not m:
        raise SystemExit("tools/version.py: no [workspace.package] version in Cargo.toml")
    return m.group(2)


def workspace_crates() -> list[str]:
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    members = re.search(r"^members\s*=\s*\[([^\]]*)\]", text, re.M).group(1)
    names = []
    for member in re.findall(r'"([^"]+)"', members):
        manifest = (ROOT / member / "Cargo.toml").read_text(encoding="utf-8")
        names.append(re.search(r'^name\s*=\s*"([^"]+)"', manifest, re.M).group(1))
    return names


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def pom_places(path: str) -> list[Place]:
    """The version lines of one pom: found through the XML, rewritten by
    line so an edit touches only those lines."""
    places = []
    root = ET.parse(ROOT / path).getroot()

    def tag(e: ET.Element | None, name: str) -> str | None:
        c = None if e is None else e.find(POM_NS + name)
        return None if c is None else (c.text or "").strip()

    # The project's own <version>: the one indented two spaces under <project>.
    if tag(root, "version") is not None:
        places.append(Place(path, re.compile(r"(^  <version>)(" + SEMVER + r"|[^<]*)(</version>)", re.M), "project version"))
    parent = root.find(POM_NS + "parent")
    if parent is not None and tag(parent, "groupId") == "io.racaffinity":
        places.append(Place(path, re.compile(r"(<parent>(?:(?!</parent>).)*?<version>)([^<]*)(</version>)", re.S),
                            "parent version"))
    props = root.find(POM_NS + "properties")
    if tag(props, "racaffinity.version") is not None:
        places.append(Place(path, re.compile(r"(<racaffinity\.version>)([^<]*)(</racaffinity\.version>)"),
                            "racaffinity.version property"))
    # io.racaffinity dependencies with a literal version (a ${...} one follows the property).
    for dep in root.iter(POM_NS + "dependency"):
        v = tag(dep, "version")
        if tag(dep, "groupId") == "io.racaffinity" and v and not v.startswith("${"):
            art = re.escape(tag(dep, "artifactId") or "")
            places.append(Place(path, re.compile(
                r"(<groupId>io\.racaffinity</groupId>\s*<artifactId>" + art + r"</artifactId>\s*<version>)([^<]*)(</version>)"),
                f"dependency {tag(dep, 'artifactId')}"))
    return places


def places() -> list[Place]:
    out = [
        Place("rust/ffi/src/capi/cluster.rs", re.compile(r"(pub const RACAFFINITY_VERSION_MAJOR: u32 = )(\d+)(;)"),
              "RACAFFINITY_VERSION_MAJOR", part="major"),
        Place("rust/ffi/src/capi/cluster.rs", re.compile(r"(pub const RACAFFINITY_VERSION_MINOR: u32 = )(\d+)(;)"),
              "RACAFFINITY_VERSION_MINOR", part="minor"),
        Place("rust/ffi/src/capi/cluster.rs", re.compile(r"(pub const RACAFFINITY_VERSION_PATCH: u32 = )(\d+)(;)"),
              "RACAFFINITY_VERSION_PATCH", part="patch"),
        Place("rust/ffi/cbindgen.toml", re.compile(r'(#define RACAFFINITY_VERSION ")([^"]*)(\\?")'), "RACAFFINITY_VERSION"),
        Place("include/racaffinity.h", re.compile(r'(#define RACAFFINITY_VERSION ")([^"]*)(")'), "RACAFFINITY_VERSION"),
        Place("include/racaffinity.h", re.compile(r"(#define RACAFFINITY_VERSION_MAJOR )(\d+)()"), "RACAFFINITY_VERSION_MAJOR",
              part="major"),
        Place("include/racaffinity.h", re.compile(r"(#define RACAFFINITY_VERSION_MINOR )(\d+)()"), "RACAFFINITY_VERSION_MINOR",
              part="minor"),
        Place("include/racaffinity.h", re.compile(r"(#define RACAFFINITY_VERSION_PATCH )(\d+)()"), "RACAFFINITY_VERSION_PATCH",
              part="patch"),
        Place("README.md", re.compile(r"(\*\*Status:\*\* version )(" + SEMVER + r")(\b)"), "status line"),
    ]
    for crate in workspace_crates():
        out.append(Place("Cargo.lock", re.compile(r'(\[\[package\]\]\nname = "' + re.escape(crate) + r'"\nversion = ")([^"]*)(")'),
                         f"crate {crate}"))
    files = tracked_files()
    for f in files:
        if f.startswith("java/") and f.endswith("pom.xml"):
            out.extend(pom_places(f))
    for f in files:
        if f in HISTORY or f.startswith(HISTORY_DIRS) or f.endswith((".abi", ".lock", ".sum")):
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if FILE_NAME_RE.search(text):
            out.append(Place(f, FILE_NAME_RE, "file name"))
        if FIND_PACKAGE_RE.search(text):
            out.append(Place(f, FIND_PACKAGE_RE, "CMake version request", part="major.minor"))
    return out


def check() -> int:
    version = workspace_version()
    bad = []
    for p in places():
        found = p.found()
        if not found and p.path != "README.md":
            bad.append(f"{p.path}: no {p.what} found")
        for v in found:
            if v != p.expected(version):
                bad.append(f"{p.path}: {p.what} is {v}, want {p.expected(version)}")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8") if (ROOT / "CHANGELOG.md").is_file() else ""
    if not re.search(r"^## \[" + re.escape(version) + r"\]", changelog, re.M):
        bad.append(f"CHANGELOG.md: no '## [{version}]' section")
    if not (ROOT / "abi" / f"racaffinity-{version}.abi").is_file():
        bad.append(f"abi/racaffinity-{version}.abi: missing (make abi-baseline writes it at a release)")
    pyproject = (ROOT / "python" / "pyproject.toml").read_text(encoding="utf-8")
    if not re.search(r'^dynamic = \[[^\]]*"version"', pyproject, re.M):
        bad.append("python/pyproject.toml: the version must be dynamic (the build backend reads Cargo.toml)")
    if bad:
        print(f"tools/version.py: the workspace version is {version} (Cargo.toml) but:", file=sys.stderr)
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        print("  (tools/version.py set X.Y.Z rewrites every place; see docs/c.md, 'Versions and ABI')", file=sys.stderr)
        return 1
    print(f"tools/version.py: {version} everywhere ({len(places())} places, CHANGELOG.md, abi baseline)")
    return 0


def set_version(version: str) -> int:
    if not re.fullmatch(SEMVER, version):
        print(f"tools/version.py: {version!r} is not MAJOR.MINOR.PATCH", file=sys.stderr)
        return 2
    ps = places()  # found before Cargo.toml changes: the file-name places are found by any version
    p = ROOT / "Cargo.toml"
    p.write_text(WORKSPACE_RE.sub(lambda m: m.group(1) + version + m.group(3), p.read_text(encoding="utf-8")), encoding="utf-8")
    for place in ps:
        place.rewrite(version)
    print(f"tools/version.py: set {version}. Still to do by hand: a '## [{version}]' section in CHANGELOG.md, "
          f"then 'make abi-baseline' (abi/racaffinity-{version}.abi), then 'make lint'.")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "check":
        return check()
    if len(argv) == 2 and argv[1] == "show":
        print(workspace_version())
        return 0
    if len(argv) == 3 and argv[1] == "set":
        return set_version(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
