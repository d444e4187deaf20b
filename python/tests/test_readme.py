"""The Python samples of README.md and docs/*.md run as written (against the local nodes).

Samples are the blocks marked `<!-- sample: python/NAME -->`; tools/doc_samples.py
finds them and fails `make test-doc-samples` on an unmarked block.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _doc_samples():
    spec = importlib.util.spec_from_file_location("doc_samples", ROOT / "tools" / "doc_samples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["doc_samples"] = mod
    spec.loader.exec_module(mod)
    return mod


SAMPLES = {n: s for n, s in _doc_samples().samples().items() if s["lang"] == "python"}


def test_the_docs_have_python_samples() -> None:
    assert {"python/readme", "python/pools", "python/otel"} <= set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_doc_sample_runs_as_written(name: str) -> None:
    code = SAMPLES[name]["files"]["app.py"]
    if "RACAFF_NODE1_DSN" in code and "RACAFF_NODE1_DSN" not in os.environ:
        pytest.fail("this sample needs the local nodes (run through python/run_tests.sh)")
    exec(compile(code, SAMPLES[name]["source"], "exec"), {"__name__": "__main__"})
