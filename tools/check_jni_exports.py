#!/usr/bin/env python3
"""Checks that the Java `native` methods and the library's JNI exports match.

    python3 tools/check_jni_exports.py [--java DIR] [--jni DIR]

`Native.java` (and any other class with `native` methods, such as
`oracle/OracleUrls.java`) is written by hand against the `Java_…` functions
of `rust/ffi/src/jni/`. A method without an export fails only at its first
call (UnsatisfiedLinkError), and an export without a method is dead code, so
`make lint` runs this check in both directions:

- every `native` method under --java (default java/src/main/java) has an
  export named by the JNI rule (`Java_<package>_<Class>_<method>`, with `_`
  written `_1`), and every `Java_…` function in any .rs file under --jni
  (default rust/ffi/src/jni, so exports added in new files count) has a
  `native` method;
- each pair has as many parameters (the export's first two, the JNIEnv and
  the class or object, aside), a `static` method gets a `JClass` and an
  instance method a `JObject`, and where a JNI type names one Java type
  (`jint`, `JString`, `JByteArray`, …) the Java parameter and return types
  agree;
- every export is `extern "system"` and unmangled.

Exports are written either as plain functions or in the `jni_export!` form of
`rust/ffi/src/jni/mod.rs` (`fn Java_…<'l>(env, args…) -> R { … }` inside
`jni_export! { … }`). For the macro form the check reads the macro's
definition: it must still expand to an unmangled `pub extern "system"` function
whose first two parameters it names (the env and the class); those are then
checked as a plain export's would be.

The Rust side is read from source, not from `nm -D` of the library: exports
behind the `testing` feature (`testPanic`) are then seen too, and no build is
needed. Exits 1 with one line per problem, naming the symbol and the method.
Python 3 standard library only.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# JNI types that stand for exactly one Java type. Others (JObject,
# JObjectArray) only say "a reference"; see reference_ok().
JNI_TO_JAVA = {
    "jboolean": "boolean",
    "jbyte": "byte",
    "jchar": "char",
    "jshort": "short",
    "jint": "int",
    "jlong": "long",
    "jfloat": "float",
    "jdouble": "double",
    "JString": "String",
    "JClass": "Class",
    "JByteArray": "byte[]",
    "JBooleanArray": "boolean[]",
    "JCharArray": "char[]",
    "JShortArray": "short[]",
    "JIntArray": "int[]",
    "JLongArray": "long[]",
    "JFloatArray": "float[]",
    "JDoubleArray": "double[]",
    "()": "void",
}
PRIMITIVES = {"boolean", "byte", "char", "short", "int", "long", "float", "double", "void"}


def strip_comments(text, strings=True):
    """Blanks out comments (and, if asked, string and char literals) but keeps
    every newline, so offsets still give line numbers."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif strings and c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + " " * max(0, j - i - 1))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(s, sep=","):
    """Splits at `sep` outside (), <> and []."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    tail = "".join(cur)
    if tail.strip():
        parts.append(tail)
    return [p.strip() for p in parts]


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def jni_mangle(s):
    out = []
    for ch in s:
        if ch == "_":
            out.append("_1")
        elif ch == ";":
            out.append("_2")
        elif ch == "[":
            out.append("_3")
        elif ch.isascii() and (ch.isalnum()):
            out.append(ch)
        elif ch in "./":
            out.append("_")
        else:
            out.append("_0%04x" % ord(ch))
    return "".join(out)


class Decl:
    def __init__(self, where, name, params, ret, static):
        self.where, self.name, self.params, self.ret, self.static = where, name, params, ret, static


NATIVE_RE = re.compile(
    r"((?:\b(?:public|protected|private|static|final|synchronized|native|strictfp)\s+)+)"
    r"([\w.$<>\[\]?,\s]+?)\s+(\w+)\s*\(([^)]*)\)\s*(?:throws\s+[\w.,\s]+)?;"
)


def java_natives(java_dir, problems):
    """{export name: Decl} for every `native` method under java_dir."""
    found = {}
    for path in sorted(java_dir.rglob("*.java")):
        raw = path.read_text(encoding="utf-8")
        text = strip_comments(raw)
        if not re.search(r"\bnative\b", text):
            continue
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        pkg = re.search(r"^\s*package\s+([\w.]+)\s*;", text, re.M)
        cls = (pkg.group(1) + "." if pkg else "") + path.stem
        names_in_file = {}
        for m in NATIVE_RE.finditer(text):
            mods = m.group(1).split()
            if "native" not in mods:
                continue
            where = f"{rel}:{line_of(text, m.start(3))}"
            depth = text.count("{", 0, m.start()) - text.count("}", 0, m.start())
            if depth != 1:
                problems.append(f"{where}: native method {m.group(3)} is not a member of the top-level class "
                                f"{path.stem}: this check reads only top-level classes' natives")
                continue
            name = m.group(3)
            if name in names_in_file:
                problems.append(f"{where}: native method {cls}.{name} is overloaded: JNI would need the long "
                                f"(signature-suffixed) export name, which this check does not derive; rename one")
                continue
            params = [" ".join(p.split()[:-1]) for p in split_top(m.group(4))]
            ret = " ".join(m.group(2).split())
            decl = Decl(where, f"{cls}.{name}", params, ret, "static" in mods)
            names_in_file[name] = decl
            found["Java_" + jni_mangle(cls) + "_" + jni_mangle(name)] = decl
    return found


EXPORT_RE = re.compile(r"\bfn\s+(Java_\w+)\s*(?:<[^>(]*>)?\s*\(")
MACRO = "jni_export"
MACRO_DEF_RE = re.compile(r"macro_rules!\s*" + MACRO + r"\s*\{")
# What the macro's expansion must say: unmangled, extern "system", and the parameters it puts
# before the invocation's own (`$(, $arg: $ty)*`).
MACRO_FN_RE = re.compile(r"#\[\s*no_mangle\s*\]\s*pub\s+extern\s+\"system\"\s+fn\s+\$name\s*<\s*\$l\s*>\s*\("
                         r"(.*?)\$\(\s*,\s*\$arg\s*:\s*\$ty\s*\)\*\s*\)", re.S)


def block_end(text, open_brace):
    """Offset just past the brace that closes the one at `open_brace`."""
    depth, i = 0, open_brace
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    return len(text)


def macro_params(jni_dir, problems):
    """The parameters `jni_export!` puts before an export's own, as [type, ...]; None if undefined."""
    for path in sorted(jni_dir.rglob("*.rs")):
        text = strip_comments(path.read_text(encoding="utf-8"), strings=False)  # keeps the ABI string
        m = MACRO_DEF_RE.search(text)
        if not m:
            continue
        body = text[m.end():block_end(text, m.end() - 1)]
        f = MACRO_FN_RE.search(body)
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if not f:
            problems.append(f"{rel}:{line_of(text, m.start())}: {MACRO}! no longer expands to "
                            f"`#[no_mangle] pub extern \"system\" fn $name<$l>(…, $(, $arg: $ty)*)`: "
                            f"update tools/check_jni_exports.py with it")
            return []
        return [p.split(":", 1)[1].strip() for p in split_top(f.group(1))]
    return None


def macro_spans(text):
    """(start, end) of every `jni_export! { … }` invocation in text."""
    spans = []
    for m in re.finditer(r"\b" + MACRO + r"!\s*\{", text):
        spans.append((m.start(), block_end(text, m.end() - 1)))
    return spans


def rust_exports(jni_dir, problems):
    """{export name: Decl} for every `fn Java_…` under jni_dir."""
    found = {}
    inserted = None
    for path in sorted(jni_dir.rglob("*.rs")):
        raw = path.read_text(encoding="utf-8")
        # Same length as `raw`: offsets in one are offsets in the other.
        text = strip_comments(raw)
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        spans = macro_spans(text)
        for m in EXPORT_RE.finditer(text):
            name = m.group(1)
            where = f"{rel}:{line_of(text, m.start(1))}"
            # The parameter list: to the parenthesis that closes the one matched.
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            raw_params = split_top(text[m.end():i - 1])
            params = [p.split(":", 1)[1].strip() if ":" in p else p for p in raw_params]
            rest = text[i:text.find("{", i)]
            ret = rest.split("->", 1)[1].strip() if "->" in rest else "()"
            if any(a < m.start() < b for a, b in spans):
                # jni_export! form: `(env, args…)`; the macro supplies the rest.
                if inserted is None:
                    inserted = macro_params(jni_dir, problems)
                if inserted is None:
                    problems.append(f"{where}: {name} is written in the {MACRO}! form, but no .rs file under "
                                    f"{jni_dir} defines macro_rules! {MACRO}")
                    inserted = []
                if not raw_params or not re.fullmatch(r"\w+", raw_params[0]):
                    problems.append(f"{where}: {name} inside {MACRO}! must name the env first, without a type")
                if name in found:
                    problems.append(f"{where}: {name} is defined twice (also {found[name].where})")
                found[name] = Decl(where, name, [*inserted, *params[1:]], ret, None)
                continue
            # Attributes and qualifiers since the item before, literals kept (the ABI string).
            head = re.sub(r"//[^\n]*|/\*.*?\*/", " ", raw[text.rfind("}", 0, m.start()) + 1:m.start()], flags=re.S)
            if 'extern "system"' not in head:
                problems.append(f"{where}: {name} is not `extern \"system\"`: the JVM cannot call it")
            if not re.search(r"#\[\s*(?:unsafe\s*\(\s*)?no_mangle", head):
                problems.append(f"{where}: {name} has no #[no_mangle]: the library does not export it")
            if name in found:
                problems.append(f"{where}: {name} is defined twice (also {found[name].where})")
            found[name] = Decl(where, name, params, ret, None)
    return found


def base(rust_type):
    """`JObjectArray<'l, JString<'l>>` -> `JObjectArray`; `jni::sys::jint` -> `jint`."""
    t = re.sub(r"<.*>", "", rust_type.replace(" ", ""))
    return t.split("::")[-1]


def reference_ok(jni, java):
    if jni == "JObject":
        return java not in PRIMITIVES
    if jni == "JObjectArray":
        return java.endswith("[]") and java[:-2] not in PRIMITIVES
    return None  # not a type this check knows: no verdict


def type_problem(jni_type, java_type):
    jni = base(jni_type)
    java = re.sub(r"<.*>", "", java_type).replace(" ", "").split(".")[-1]
    if jni in JNI_TO_JAVA:
        want = JNI_TO_JAVA[jni]
        return None if want == java else f"{jni_type} is Java {want}, not {java_type}"
    ok = reference_ok(jni, java)
    return None if ok in (True, None) else f"{jni_type} cannot carry Java {java_type}"


def check(java_dir, jni_dir):
    problems = []
    java = java_natives(java_dir, problems)
    rust = rust_exports(jni_dir, problems)
    for sym in sorted(set(java) - set(rust)):
        d = java[sym]
        problems.append(f"missing export {sym}: {d.where} declares native {d.name}, but no .rs file under "
                        f"{jni_dir.relative_to(ROOT) if jni_dir.is_relative_to(ROOT) else jni_dir} defines it")
    for sym in sorted(set(rust) - set(java)):
        d = rust[sym]
        problems.append(f"extra export {sym}: {d.where} defines it, but no class under "
                        f"{java_dir.relative_to(ROOT) if java_dir.is_relative_to(ROOT) else java_dir} "
                        f"declares the native method")
    for sym in sorted(set(java) & set(rust)):
        j, r = java[sym], rust[sym]
        if len(r.params) < 2:
            problems.append(f"{r.where}: {sym} takes {len(r.params)} parameters; a JNI export takes the env and "
                            f"the class or object first")
            continue
        if len(r.params) - 2 != len(j.params):
            problems.append(f"parameter count of {sym}: {j.where} declares {len(j.params)} "
                            f"({', '.join(j.params) or 'none'}), {r.where} takes {len(r.params) - 2} after the env "
                            f"and class ({', '.join(r.params[2:]) or 'none'})")
            continue
        second = base(r.params[1])
        if j.static and second != "JClass":
            problems.append(f"{r.where}: {sym} is static in Java ({j.where}) and takes a JClass, not {r.params[1]}")
        elif not j.static and second != "JObject":
            problems.append(f"{r.where}: {sym} is an instance method in Java ({j.where}) and takes a JObject, "
                            f"not {r.params[1]}")
        for k, (rt, jt) in enumerate(zip(r.params[2:], j.params), 1):
            p = type_problem(rt, jt)
            if p:
                problems.append(f"parameter {k} of {sym}: {p} ({j.where}, {r.where})")
        p = type_problem(r.ret, j.ret)
        if p:
            problems.append(f"return type of {sym}: {p} ({j.where}, {r.where})")
    return java, rust, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--java", type=Path, default=ROOT / "java/src/main/java", help="Java source root")
    ap.add_argument("--jni", type=Path, default=ROOT / "rust/ffi/src/jni", help="folder of the JNI exports")
    args = ap.parse_args()
    java, rust, problems = check(args.java.resolve(), args.jni.resolve())
    if not java and not rust:
        problems.append(f"no native methods under {args.java} and no exports under {args.jni}: wrong folders?")
    if problems:
        print(f"check_jni_exports: {len(problems)} problem(s) between the Java natives and the JNI exports:",
              file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"check_jni_exports: {len(java)} native methods, {len(rust)} JNI exports: all match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
