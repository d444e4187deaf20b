#!/usr/bin/env bash
# The wheel of `make wheel` as a Python user without Rust meets it: a fresh
# virtualenv, a PATH without cargo or rustc, `pip install <the wheel>`, then
# the README's Python quick start run from an empty directory. Then the
# source distribution: built from ./python, and `pip wheel` of it (this one
# needs cargo, as any sdist of a native library does) gives a wheel that imports.
#
#   python/wheel_test.sh            (make test-wheel, after make wheel)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
shopt -s nullglob
wheels=(target/wheel/racaffinity-*manylinux*.whl)
if (( ${#wheels[@]} != 1 )); then
    echo "wheel_test.sh: expected one manylinux wheel in target/wheel (run make wheel), found ${#wheels[@]}" >&2
    exit 2
fi
wheel=$ROOT/${wheels[0]}
work=$(mktemp -d "${TMPDIR:-/tmp}/racaffinity-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# PATH without any directory holding cargo or rustc: what a user without Rust has.
nocargo_path=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [[ -z $d || -x $d/cargo || -x $d/rustc ]] && continue
    nocargo_path+=${nocargo_path:+:}$d
done
pybin=$(command -v "$PYTHON")
pybin=$("$pybin" -c 'import sys; print(sys.executable)')

echo "== the wheel in a fresh venv, no cargo on PATH: $(basename "$wheel")"
"$pybin" -m venv "$work/venv"
env PATH="$work/venv/bin:$nocargo_path" CARGO=/nonexistent bash -c '
    set -euo pipefail
    if command -v cargo >/dev/null || command -v rustc >/dev/null; then echo "cargo still on PATH" >&2; exit 1; fi
    pip install --quiet --disable-pip-version-check "$1"
    ' _ "$wheel"
python3 tools/doc_samples.py extract "$work/samples" >/dev/null
mkdir "$work/app"
cp "$work/samples/python/readme/app.py" "$work/app/quickstart.py"
(cd "$work/app" && env PATH="$work/venv/bin:$nocargo_path" python quickstart.py)
# The installed copy is the one that ran, with the library the wheel carries.
(cd "$work/app" && env PATH="$work/venv/bin:$nocargo_path" python -c '
import racaffinity, pathlib
p = pathlib.Path(racaffinity.__file__)
assert "venv" in str(p), p
print("  imported from", p.parent, "with", [l.name for l in (p.parent / "_native").iterdir()])
')
echo "  ok: installed and ran the README quick start without cargo"

echo "== the sdist still builds and installs (with cargo)"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "build==1.6.1"
"$work/venv/bin/python" -m build --sdist --outdir "$work/sdist" python >"$work/sdist.log" 2>&1 || { tail -20 "$work/sdist.log"; exit 1; }
sdist=("$work"/sdist/racaffinity-*.tar.gz)
"$pybin" -m venv "$work/venv2"
# Its own target dir: the sdist unpacks elsewhere, and must not touch target/release.
export CARGO_TARGET_DIR=$ROOT/target/sdist-cargo
"$work/venv2/bin/python" -m pip install --quiet --disable-pip-version-check "${sdist[0]}" >"$work/sdist-install.log" 2>&1 ||
    { tail -20 "$work/sdist-install.log"; exit 1; }
(cd "$work/app" && "$work/venv2/bin/python" quickstart.py >/dev/null)
echo "  ok: $(basename "${sdist[0]}") built, installed from source and ran the quick start"
