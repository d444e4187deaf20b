"""tools/fuzz.sh around its libFuzzer jobs, with a stand-in `cargo` (the
script takes it from $CARGO): what it reports and waits for when a worker
finds a crash. No nightly toolchain, no fuzzing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import REPO

# A `cargo +nightly fuzz build|run ... TARGET ...` that plays libFuzzer: it
# writes fuzz-0.log in its working directory (the worker's log directory, as
# -jobs=1 does). The worker named in $CRASH dies at once with libFuzzer's
# crash report and no "Done" line; the others run $SLOW seconds ($SLOW_B0 for
# stub_b's first worker) and finish.
STUB = r"""#!/usr/bin/env bash
[ "$3" = build ] && exit 0
for a in "$@"; do case $a in stub_*) t=$a ;; esac; done
w=$(basename "$PWD")
if [ "$t/$w" = "$CRASH" ]; then
  printf '==1== ERROR: libFuzzer: deadly signal\nstat::number_of_executed_units: 7\n' > fuzz-0.log
  exit 1
fi
if [ "$t/$w" = stub_b/w0 ]; then sleep "$SLOW_B0"; else sleep "$SLOW"; fi
printf 'Done 5 runs in 1 second(s)\nstat::average_exec_per_sec: 5\n' > fuzz-0.log
echo "$t/$w finished" >> "$FINISHED"
"""


def _run(tmp: Path, crash: str, slow: str, slow_b0: str):
    (tmp / "tools").mkdir()
    shutil.copy(REPO / "tools" / "fuzz.sh", tmp / "tools" / "fuzz.sh")
    stub = tmp / "cargo"
    stub.write_text(STUB)
    stub.chmod(0o755)
    finished = tmp / "finished"
    env = dict(os.environ, CARGO=str(stub), CRASH=crash, SLOW=slow, SLOW_B0=slow_b0, FINISHED=str(finished), FUZZ_WORKERS="2")
    env.pop("FUZZ_RUNS", None)
    p = subprocess.run(["bash", str(tmp / "tools" / "fuzz.sh"), "--total", "30", "stub_a", "stub_b"],
                       env=env, capture_output=True, text=True, timeout=120)
    return p, finished


def test_a_crash_in_the_second_worker_is_reported_after_the_first_is_waited_for(tmp_path):
    # stub_b, the last target, runs from the start as worker 0 (6 s) and
    # joins as worker 1 when stub_a is done (1 s): that worker crashes at once.
    p, finished = _run(tmp_path, "stub_b/w1", "1", "6")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "== fuzz summary" in out, out
    assert "!! stub_b FAILED" in out, out
    summary = out[out.index("== fuzz summary"):]
    assert "stub_a" in summary and "stub_b" in summary, summary
    # The first worker was waited for, not left fuzzing after the script.
    assert "stub_b/w0 finished" in finished.read_text(), out


def test_a_crash_in_a_one_worker_target_is_reported_and_the_next_target_still_runs(tmp_path):
    p, finished = _run(tmp_path, "stub_a/w0", "0", "0")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "!! stub_a FAILED" in out, out
    assert "stub_b/w0 finished" in finished.read_text(), out
    assert "== fuzz summary" in out, out
