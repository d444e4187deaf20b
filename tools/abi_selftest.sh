#!/usr/bin/env bash
# Shows that `make check-abi` can fail: in a scratch copy of this checkout
# (target/abi-selftest/src, its own cargo target dir beside it), each case
# changes the Rust source of the C ABI, rebuilds the dev-profile library and
# runs tools/abi.sh check against the checked-in baseline:
#
#   unchanged                    passes
#   a function added             passes (compatible)
#   a Rust module renamed        passes (the C types' Rust paths are no ABI)
#   a function no longer exported         fails
#   two struct fields swapped             fails (offsets change)
#   an enum value changed                 fails
#   a function removed under 0.x minor bump  passes (tools/version.py set)
#
# Each case rebuilds the library (about 100 s for the 7 cases once the
# scratch target dir is warm; a first run adds a dev build of the library
# and its 31 crates). Run: tools/abi_selftest.sh
#
#   tools/abi_selftest.sh --quick   make test's form (make check-abi-fails):
#     one build of a copy with two incompatible changes (a function no longer
#     exported, an enum value changed) must fail the check, and the check's
#     report must name both
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
WORK=$ROOT/target/abi-selftest
SRC=$WORK/src
export CARGO_TARGET_DIR=$WORK/target
mkdir -p "$WORK"

fresh_copy() {
    rm -rf "$SRC"
    mkdir -p "$SRC"
    git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
        [[ -f $f ]] && install -D -m "$(stat -c %a "$f")" "$f" "$SRC/$f"
    done
    # tools/version.py lists the tracked files through git.
    git -C "$SRC" init -q && git -C "$SRC" add -A
}

# edit FILE PYTHON-EXPR-ON-s: rewrite a file of the copy; fails when nothing changed.
edit() {
    python3 - "$SRC/$1" "$2" <<'EOF'
import sys
path, expr = sys.argv[1], sys.argv[2]
s = open(path).read()
new = eval(expr, {"s": s})
if new == s:
    sys.exit(f"abi_selftest: the edit changed nothing in {path}")
open(path, "w").write(new)
EOF
}

fails=0
# run_case NAME WANT [MUST-NAME...]: builds the copy and checks it; a
# failing check's report (tools/abi.sh's output) must name each MUST-NAME.
run_case() {
    local name=$1 want=$2
    shift 2
    (cd "$SRC" && cargo build --quiet -p racaffinity-ffi) || { echo "abi_selftest: $name: the copy does not build" >&2; exit 2; }
    set +e
    (cd "$SRC" && tools/abi.sh check "$CARGO_TARGET_DIR/debug/libracaffinity.so") >"$WORK/$name.log" 2>&1
    local rc=$?
    set -e
    local got=pass
    ((rc == 0)) || got=fail
    ((rc == 0 || rc == 1)) || got="error($rc)"
    printf '%-28s want %-4s got %-4s  %s\n' "$name" "$want" "$got" "$(grep -m1 -E 'check-abi|removed|changed' "$WORK/$name.log" | cut -c1-110)"
    [[ $got == "$want" ]] || fails=$((fails + 1))
    local must
    for must in "$@"; do
        if ! grep -q -- "$must" "$WORK/$name.log"; then
            echo "abi_selftest: $name: the report does not name $must" >&2
            fails=$((fails + 1))
        fi
    done
}

# The two incompatible edits of --quick (and of their cases below).
unexport_last_error_set() {
    edit rust/ffi/src/capi/result.rs 's.replace("#[no_mangle]\npub unsafe extern \"C\" fn racaffinity_last_error_set", "pub unsafe extern \"C\" fn racaffinity_last_error_set")'
}
renumber_error_class() {
    edit rust/ffi/src/capi/continuity.rs 's.replace("    NotRecoverable = 1,", "    NotRecoverable = 2,", 1)'
}

if [[ ${1:-} == --quick ]]; then
    fresh_copy
    unexport_last_error_set
    renumber_error_class
    run_case two_incompatible_changes fail racaffinity_last_error_set racaffinity_error_class
    if ((fails)); then
        echo "abi_selftest: the ABI check did not fail as it must (log: $WORK/two_incompatible_changes.log)" >&2
        exit 1
    fi
    echo "abi_selftest: an incompatible change fails make check-abi, named in its report"
    exit 0
fi

fresh_copy
run_case unchanged pass

fresh_copy
edit rust/ffi/src/capi/cluster.rs 's + "\n/// Added by tools/abi_selftest.sh.\n#[no_mangle]\npub extern \"C\" fn racaffinity_abi_selftest_added() -> u32 {\n    7\n}\n"'
run_case function_added pass

fresh_copy
edit rust/ffi/src/capi/mod.rs 's.replace("pub mod continuity;", "#[path = \"continuity.rs\"]\npub mod replay_moved;\npub use replay_moved as continuity;")'
run_case module_renamed pass

fresh_copy
unexport_last_error_set
run_case function_removed fail racaffinity_last_error_set

fresh_copy
edit rust/ffi/src/capi/continuity.rs 's.replace("    /// What to do.\n    pub action: racaffinity_replay_action,\n    /// Where.\n    pub node: u32,", "    /// Where.\n    pub node: u32,\n    /// What to do.\n    pub action: racaffinity_replay_action,")'
run_case struct_fields_swapped fail

fresh_copy
renumber_error_class
run_case enum_value_changed fail racaffinity_error_class

fresh_copy
unexport_last_error_set
(cd "$SRC" && python3 tools/version.py set 0.3.0 >/dev/null)
run_case removed_with_bump pass

if ((fails)); then
    echo "abi_selftest: $fails case(s) did not come out as wanted (logs: $WORK/*.log)" >&2
    exit 1
fi
echo "abi_selftest: every case as wanted"
