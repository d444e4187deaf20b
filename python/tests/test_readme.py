"""The README's Python examples run as written (against the local nodes)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Python\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def test_the_python_section_has_examples() -> None:
    assert len(python_blocks()) >= 2


@pytest.mark.parametrize("index", range(2))
def test_readme_example_runs_as_written(index: int) -> None:
    if index == 1 and "RACAFF_NODE1_DSN" not in os.environ:
        pytest.fail("the pools example needs the local nodes (run through python/run_tests.sh)")
    exec(compile(python_blocks()[index], f"README.md python block {index}", "exec"), {})
