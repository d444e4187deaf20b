#!/usr/bin/env python3
"""Run every C, Rust and Java sample of README.md and docs/*.md as a user would.

Each sample is pasted into a new project in a temporary directory outside the
repository; the only things taken from the repository are what the docs tell
the user to take: the install prefix of `make install` (C), the crates by the
absolute path of the checkout (Rust: the docs' `/path/to/racaffinity`), the jar
of `make jar` and pgjdbc (Java in source-file mode), the Maven repository of
`make dist` by the checkout's path (Java samples with a pom.xml). Python
samples run in python/tests/test_readme.py.

    tests/docs/run_samples.py [LANG ...]      (make test-doc-samples)

The local nodes must be running and their variables exported
(eval "$(tests/cluster/pgnodes env)"): make test-doc-samples does that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import doc_samples  # noqa: E402

PGJDBC = Path.home() / ".m2/repository/org/postgresql/postgresql/42.7.8/postgresql-42.7.8.jar"
JAR = ROOT / "java/target/racaffinity-0.1.0.jar"
DIST = ROOT / "target/dist/maven"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# A sample that needs what this machine cannot have runs until that point and
# must stop there with this message; anything else is a failure.
NEEDS_ORACLE = {
    # OracleNodePools::build() loads the Oracle client library, absent here.
    "rust/oracle-pools": "DPI-1047",
}


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    # Maven 3.8 writes colour resets even when not on a terminal.
    p.stdout, p.stderr = ANSI.sub("", p.stdout), ANSI.sub("", p.stderr)
    return p


def report(name: str, source: str, p: subprocess.CompletedProcess, expect: str | None = None) -> bool:
    out = (p.stdout + p.stderr).strip()
    if p.returncode == 0 and expect is None:
        print(f"ok    {name} ({source})")
        for line in p.stdout.strip().splitlines()[:3]:
            print(f"        | {line}")
        return True
    if expect is not None and expect in out:
        print(f"ok    {name} ({source}): stops at {expect}, no Oracle client on this machine")
        return True
    print(f"FAIL  {name} ({source}): exit {p.returncode}")
    print("\n".join("        | " + line for line in out.splitlines()[-30:]))
    return False


def c_samples(samples: dict, work: Path) -> bool:
    prefix = work / "prefix"
    p = run(["make", "--no-print-directory", "install", f"PREFIX={prefix}"], ROOT)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        return False
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "racaffinity"], work, env).stdout.split()
    ok = True
    for name, s in samples.items():
        d = work / name
        d.mkdir(parents=True)
        (d / "app.c").write_text(s["files"]["app.c"])
        p = run(["cc", "-std=c11", "-Wall", "-Werror", "app.c", *flags, "-o", "app"], d, env)
        if p.returncode == 0:
            p = run(["./app"], d, dict(env, LD_LIBRARY_PATH=str(prefix / "lib")))
        ok &= report(name, s["source"], p)
    return ok


def rust_samples(samples: dict, work: Path) -> bool:
    # One target directory for every sample project, so the crates build once.
    target = ROOT / "target/doc-samples/cargo-target"
    ok = True
    for name, s in samples.items():
        d = work / name
        for rel, text in s["files"].items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text.replace(doc_samples.CHECKOUT_PLACEHOLDER, str(ROOT)))
        # The repository's lock file pins the same dependency versions as its own
        # builds (cargo drops what the sample does not use); no network needed.
        shutil.copy(ROOT / "Cargo.lock", d / "Cargo.lock")
        env = dict(os.environ, CARGO_TARGET_DIR=str(target), DB_PASSWORD="tiger", RUSTFLAGS="-A warnings")
        p = run(["cargo", "run", "--quiet", "--release"], d, env)
        ok &= report(name, s["source"], p, NEEDS_ORACLE.get(name))
    return ok


def java_samples(samples: dict, work: Path) -> bool:
    for i in (1, 2, 3):
        if f"RACAFF_NODE{i}_URL" not in os.environ:
            print("FAIL  java: the local nodes' variables are not set (eval \"$(tests/cluster/pgnodes env)\")")
            return False
    ok = True
    for name, s in samples.items():
        d = work / name
        for rel, text in s["files"].items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text.replace(doc_samples.CHECKOUT_PLACEHOLDER, str(ROOT)))
        if "pom.xml" in s["files"]:
            ok &= maven_sample(name, s, d)
            continue
        if not JAR.exists() or not PGJDBC.exists():
            print(f"FAIL  {name}: needs {JAR} (make jar) and {PGJDBC} (resolved by make test-java)")
            ok = False
            continue
        (file,) = s["files"]
        # Source-file mode, as the docs run it: java -cp ... Sample.java
        p = run(["java", "-cp", f"{JAR}:{PGJDBC}", file], d, timeout=300)
        ok &= report(name, s["source"], p)
    return ok


def maven_sample(name: str, s: dict, d: Path) -> bool:
    """A Maven project run as the README runs it, against make dist's repository."""
    if not DIST.is_dir():
        print(f"FAIL  {name}: needs {DIST} (make dist)")
        return False
    (java,) = (f for f in s["files"] if f.endswith(".java"))
    main = Path(java).stem
    cmd = ["mvn", "-q", "-B", "compile", "org.codehaus.mojo:exec-maven-plugin:3.5.0:java", f"-Dexec.mainClass={main}"]
    p = run(cmd, d, timeout=600)
    if not report(name, s["source"], p):
        return False
    if "RACAFF_NODE" not in next(t for f, t in s["files"].items() if f.endswith(".java")):
        return True
    # Without the nodes' variables: the sample's own line saying which is missing, not an
    # exception through Maven ("[ERROR] Failed to execute goal ...") or a stack trace.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACAFF_NODE")}
    p = run(cmd, d, env, timeout=600)
    out = (p.stdout + p.stderr).strip()
    if p.returncode != 0 and "RACAFF_NODE1_URL is not set" in out and "\tat " not in out and "[ERROR]" not in out:
        said = next(line for line in out.splitlines() if "is not set" in line)
        print(f"ok    {name} without the node variables: exit {p.returncode}, {said!r}")
        return True
    print(f"FAIL  {name} without the node variables: exit {p.returncode}, wanted a clear 'RACAFF_NODE1_URL is not set'")
    print("\n".join("        | " + line for line in out.splitlines()[-30:]))
    return False


RUNNERS = {"c": c_samples, "rust": rust_samples, "java": java_samples}


def main(argv: list[str]) -> int:
    errors = doc_samples.check()
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print("run_samples.py: unmarked or badly marked samples (see above)")
        return 1
    langs = argv[1:] or list(RUNNERS)
    all_samples = doc_samples.samples()
    ok = True
    with tempfile.TemporaryDirectory(prefix="racaffinity-samples.") as tmp:
        work = Path(tmp)
        for lang in langs:
            mine = {n: s for n, s in all_samples.items() if s["lang"] == lang}
            print(f"== {lang}: {len(mine)} sample(s)")
            if mine:
                ok &= RUNNERS[lang](mine, work / lang)
    print("run_samples.py: all samples ran" if ok else "run_samples.py: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
