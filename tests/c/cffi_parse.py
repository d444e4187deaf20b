#!/usr/bin/env python3
"""Checks that include/racaffinity.h is parseable by Python's cffi, and that the
shipped library answers through it.

cffi's cdef() takes declarations only: no preprocessor conditionals and no
macro expressions. The header promises to stay that way (rust/ffi/cbindgen.toml)
so the Python binding can feed it to cffi directly. This script:

1. Rejects the header if it has a preprocessor line other than the include
   guard, `#include <...>`, the `#ifdef __cplusplus` / `extern "C"` wrapper, or
   `#define NAME <plain integer literal>` -- in particular any `#if` inside the
   declarations and any macro whose value is an expression.
2. Strips those lines and every comment, and runs cffi.FFI().cdef(text).
3. dlopen()s target/release/libracaffinity.so, checks that every declared
   function is exported, calls racaffinity_version(), and creates, queries and
   frees a cluster, checking result codes.

`--self-test` runs step 1 and 2 on mutated copies of the header (an `#if`
around a declaration, a macro expression) and fails unless both are rejected,
so the check cannot rot into one that passes anything.

Usage: cffi_parse.py [--header H] [--lib SO] [--self-test]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GUARD_RE = re.compile(r"^#\s*(ifndef|define)\s+RACAFFINITY_H\s*$")
INCLUDE_RE = re.compile(r"^#\s*include\s*<[A-Za-z0-9_./]+>\s*$")
ENDIF_RE = re.compile(r"^#\s*endif\b.*$")
CPP_OPEN_RE = re.compile(r"^#\s*ifdef\s+__cplusplus\b.*$")
DEFINE_RE = re.compile(r"^#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)\s*(.*?)\s*$")
STRING_LITERAL_RE = re.compile(r'^"[0-9A-Za-z.+-]*"$')
INT_LITERAL_RE = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([uU]?[lL]{0,2}|[lL]{1,2}[uU]?)$")


class HeaderError(Exception):
    pass


def strip_comments(text: str) -> str:
    """Removes /* */ and // comments (the header has no string literals
    outside the extern "C" lines, which go anyway), keeping line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise HeaderError("unterminated /* comment")
            out.append("\n" * text.count("\n", i, j + 2))
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] == '"':
            j = text.find('"', i + 1)
            j = n - 1 if j < 0 else j
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def cdef_text(header: str) -> tuple[str, dict[str, int]]:
    """The header reduced to what cdef() accepts; rejects anything else.
    Returns the text and the integer #defines."""
    lines = strip_comments(header).split("\n")
    out: list[str] = []
    defines: dict[str, int] = {}
    strings: dict[str, str] = {}
    in_cpp = False  # inside #ifdef __cplusplus ... #endif
    depth = 0  # open conditionals (the include guard counts as one)
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if in_cpp:
            if ENDIF_RE.match(line):
                in_cpp = False
                depth -= 1
            elif line.startswith("#"):
                raise HeaderError(f"line {no}: nested preprocessor line inside #ifdef __cplusplus: {line}")
            elif line not in ('extern "C" {', "}", ""):
                raise HeaderError(f"line {no}: unexpected line inside #ifdef __cplusplus: {line}")
            out.append("")
            continue
        if not line.startswith("#"):
            out.append(raw)
            continue
        m = GUARD_RE.match(line)
        if m:
            if m.group(1) == "ifndef":
                if depth != 0:
                    raise HeaderError(f"line {no}: include guard not at the top level")
                depth += 1
            out.append("")
            continue
        if INCLUDE_RE.match(line):
            out.append("")
            continue
        if CPP_OPEN_RE.match(line):
            in_cpp = True
            depth += 1
            out.append("")
            continue
        if ENDIF_RE.match(line):
            depth -= 1
            if depth < 0:
                raise HeaderError(f"line {no}: #endif without #if")
            out.append("")
            continue
        m = DEFINE_RE.match(line)
        if m:
            name, value = m.group(1), m.group(2)
            if STRING_LITERAL_RE.match(value):
                # The version string: cffi's cdef() has no string macros, and the
                # Python binding drops it too (its cdef_source keeps integers only).
                strings[name] = value[1:-1]
                out.append("")
                continue
            if not INT_LITERAL_RE.match(value):
                raise HeaderError(f"line {no}: #define {name} is not a plain integer literal: {value!r} "
                                  "(cffi cannot parse macro expressions)")
            defines[name] = int(re.sub(r"[uUlL]+$", "", value), 0)
            out.append(f"#define {name} {defines[name]}")
            continue
        raise HeaderError(f"line {no}: preprocessor line cffi cannot take: {line!r} "
                          "(no #if/#ifdef inside the declarations)")
    if in_cpp or depth != 0:
        raise HeaderError("unbalanced #ifdef/#endif")
    if strings.get("RACAFFINITY_VERSION") != ".".join(str(defines.get(f"RACAFFINITY_VERSION_{p}")) for p in ("MAJOR", "MINOR", "PATCH")):
        raise HeaderError("RACAFFINITY_VERSION disagrees with RACAFFINITY_VERSION_MAJOR/MINOR/PATCH")
    return "\n".join(out), defines


def declared_functions(text: str) -> list[str]:
    return sorted(set(re.findall(r"\b(racaffinity_\w+)\s*\(", text)))


def parse(header: str):
    import cffi

    text, defines = cdef_text(header)
    ffi = cffi.FFI()
    ffi.cdef(text)
    return ffi, text, defines


def self_test(header: str) -> None:
    """The checks must reject an #if in the declarations and a macro expression."""
    decl = "const char *racaffinity_version(void);"
    assert decl in header, "self-test anchor missing from the header"
    mutants = {
        "#if around a declaration": header.replace(decl, "#if defined(RACAFFINITY_EXTRA)\n" + decl + "\n#endif"),
        "#ifdef in the declarations": header.replace(decl, "#ifdef _WIN32\n#endif\n" + decl),
        "macro expression": header.replace("#define RACAFFINITY_MAX_CLUSTERS 4096",
                                           "#define RACAFFINITY_MAX_CLUSTERS (1 << 12)"),
        "macro referring to a macro": header.replace("#define RACAFFINITY_MAX_CLUSTERS 4096",
                                                     "#define RACAFFINITY_MAX_CLUSTERS RACAFFINITY_MAX_KEY_BYTES"),
        "function-like macro": header.replace(decl, "#define RACAFFINITY_OK(r) ((r) == 0)\n" + decl),
    }
    for what, text in mutants.items():
        assert text != header, f"self-test mutation '{what}' did not apply"
        try:
            parse(text)
        except HeaderError as e:
            print(f"  self-test: rejected {what}: {e}")
            continue
        raise SystemExit(f"cffi_parse self-test: a header with a {what} was accepted")
    print("cffi_parse self-test: every mutation rejected")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--header", type=Path, default=ROOT / "include" / "racaffinity.h")
    ap.add_argument("--lib", type=Path, default=ROOT / "target" / "release" / "libracaffinity.so")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()

    header = args.header.read_text(encoding="utf-8")
    if args.self_test:
        self_test(header)
        return 0
    try:
        ffi, text, defines = parse(header)
    except HeaderError as e:
        print(f"cffi_parse: {args.header}: {e}", file=sys.stderr)
        return 1
    funcs = declared_functions(text)
    print(f"cffi_parse: cdef() accepted {args.header.name}: {len(funcs)} functions, {len(defines)} constants")

    lib = ffi.dlopen(str(args.lib))
    missing = [f for f in funcs if not hasattr(lib, f)]
    if missing:
        print(f"cffi_parse: {args.lib} lacks {missing}", file=sys.stderr)
        return 1
    if lib.RACAFFINITY_MAX_CLUSTERS != 4096 or lib.RACAFFINITY_MAX_GTRID_BYTES != 64:
        print("cffi_parse: constants do not come through", file=sys.stderr)
        return 1

    version = ffi.string(lib.racaffinity_version()).decode()
    if not version:
        print("cffi_parse: empty version", file=sys.stderr)
        return 1
    header_version = f"{lib.RACAFFINITY_VERSION_MAJOR}.{lib.RACAFFINITY_VERSION_MINOR}.{lib.RACAFFINITY_VERSION_PATCH}"
    if version != header_version:
        print(f"cffi_parse: the library is {version}, the header {header_version}", file=sys.stderr)
        return 1

    out = ffi.new("racaffinity_cluster **")
    rc = lib.racaffinity_cluster_new(b"name = cffi\nnodes = MYDB1, MYDB2, MYDB3", out)
    if rc != lib.RACAFFINITY_RESULT_OK or out[0] == ffi.NULL:
        print(f"cffi_parse: racaffinity_cluster_new returned {rc}", file=sys.stderr)
        return 1
    cluster = out[0]
    n = ffi.new("uint32_t *")
    route = ffi.new("racaffinity_route *")
    checks = [
        (lib.racaffinity_cluster_node_count(cluster, n), lib.RACAFFINITY_RESULT_OK),
        (lib.racaffinity_tx_begin(cluster, b"gtrid-42", 8, route), lib.RACAFFINITY_RESULT_OK),
        (lib.racaffinity_tx_begin(cluster, b"x" * 65, 65, route), lib.RACAFFINITY_RESULT_INVALID_ARGUMENT),
        (lib.racaffinity_cluster_new(b"nodes = A\nbogus = 1", out), lib.RACAFFINITY_RESULT_CONFIG),
        (lib.racaffinity_cluster_free(cluster), lib.RACAFFINITY_RESULT_OK),
        (lib.racaffinity_cluster_free(cluster), lib.RACAFFINITY_RESULT_INVALID_HANDLE),
    ]
    bad = [(i, got, want) for i, (got, want) in enumerate(checks) if got != want]
    if bad or n[0] != 3 or route.kind != lib.RACAFFINITY_ROUTE_KIND_PLACED:
        print(f"cffi_parse: unexpected results {bad}, node_count {n[0]}, kind {route.kind}", file=sys.stderr)
        return 1
    print(f"cffi_parse: {args.lib.name} {version} answers through cffi "
          f"(gtrid-42 -> node {route.node}; {len(checks)} result codes as expected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
