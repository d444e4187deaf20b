"""Issue 15: three processes (C, Java, Python) route the same 1,000 session
tokens to the same nodes, with no shared state but the tokens: all nodes up,
one node marked down (promotion), a second one down (backup "none"), both
back (a new backup). Each process builds its own cluster from the config
text and carries its own rewritten tokens from phase to phase; their outputs
must be identical line for line.

The C program (tests/cross/token_routes.c) is compiled with `cc` against the
checked-in header and target/release/libracaffinity.so; the Java program
(tests/cross/TokenRoutes.java) with `javac` against the sources of the
`io.racaffinity` package, loading the same library (`-Dracaffinity.library`);
the Python side is this process, through `racaffinity.Cluster.route_token`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

import racaffinity as ra

from conftest import REPO

CONFIG = (
    "name = cross-tokens\n"
    "nodes = RAC1, RAC2, RAC3, RAC4\n"
    "node.RAC1.machine = m1\nnode.RAC2.machine = m1\n"
    "node.RAC3.machine = m2\nnode.RAC4.machine = m3\n"
)
DOWN = ("RAC3", "RAC1")
LIB_DIR = REPO / "target" / "release"
TOKENS = 1000


def python_routes(config: str, tokens: List[str], down: Tuple[str, str]) -> str:
    """This process's share: the same phases as token_routes.c."""
    states = [("UP", "UP"), ("DOWN", "UP"), ("DOWN", "DOWN"), ("UP", "UP")]
    out: List[str] = []
    held = list(tokens)
    with ra.Cluster(config) as c:
        for phase, (s1, s2) in enumerate(states):
            c.set_node_state(down[0], s1)
            c.set_node_state(down[1], s2)
            for i, token in enumerate(held):
                r = c.route_token(token)
                held[i] = r.token or token
                out.append(f"{phase} {r.route.name} {held[i]}")
    return "\n".join(out) + "\n"


def run(cmd: List[str], **kwargs: object) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd[0]} failed ({done.returncode}):\n{done.stderr}"
    return str(done.stdout)


@pytest.mark.timeout(180)
def test_c_java_and_python_route_the_same_1000_tokens_to_the_same_nodes(tmp_path: Path) -> None:
    for tool in ("cc", "javac", "java"):
        if shutil.which(tool) is None:
            pytest.fail(f"the cross-language token test needs `{tool}` on PATH")
    lib = LIB_DIR / "libracaffinity.so"
    assert lib.is_file(), f"{lib} is missing: run `make lib`"

    # The tokens, generated once (by this process), are the only thing shared.
    with ra.Cluster(CONFIG) as c:
        tokens = [c.session_token(f"s{i:04d}x{(i * 2654435761) % 2**32:08x}") for i in range(TOKENS)]
    (tmp_path / "config.txt").write_text(CONFIG)
    (tmp_path / "tokens.txt").write_text("\n".join(tokens) + "\n")
    args = [str(tmp_path / "config.txt"), str(tmp_path / "tokens.txt"), *DOWN]

    exe = tmp_path / "token_routes"
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'include'}",
         str(REPO / "tests" / "cross" / "token_routes.c"), "-o", str(exe),
         f"-L{LIB_DIR}", "-lracaffinity", f"-Wl,-rpath,{LIB_DIR}"])
    classes = tmp_path / "classes"
    sources = sorted(str(p) for p in (REPO / "java" / "src" / "main" / "java" / "io" / "racaffinity").glob("*.java"))
    run(["javac", "-nowarn", "-d", str(classes), *sources, str(REPO / "tests" / "cross" / "TokenRoutes.java")])

    c_out = run([str(exe), *args])
    java_out = run(["java", f"-Dracaffinity.library={lib}", "-cp", str(classes), "TokenRoutes", *args])
    py_out = python_routes(CONFIG, tokens, DOWN)

    lines = py_out.splitlines()
    assert len(lines) == 4 * TOKENS
    for name, other in (("C", c_out), ("Java", java_out)):
        diff = [(a, b) for a, b in zip(lines, other.splitlines()) if a != b]
        assert not diff and len(other.splitlines()) == len(lines), f"{name} differs from Python: {diff[:3]}"

    # The phases did what the seed says, so the agreement is not vacuous.
    by_phase = [[line.split(" ") for line in lines[p * TOKENS:(p + 1) * TOKENS]] for p in range(4)]
    assert {n for _, n, _ in by_phase[0]} == {"RAC1", "RAC2", "RAC3", "RAC4"}
    assert all(n not in DOWN[:1] for _, n, _ in by_phase[1])
    assert all(n not in DOWN for _, n, _ in by_phase[2])
    moved = sum(t != tokens[i] for i, (_, _, t) in enumerate(by_phase[1]))
    assert 0 < moved < TOKENS  # only the tokens that named RAC3 were rewritten
    print(f"cross-language tokens: {TOKENS} tokens x 4 phases identical in C, Java and Python; "
          f"{moved} rewritten when {DOWN[0]} went down")
