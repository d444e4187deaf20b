"""In-tree PEP 517 backend for the `racaffinity` Python package.

Why not maturin's ``bindings = "cffi"`` mode: maturin writes its cffi
declarations from a header that it generates itself, with the cbindgen version
compiled into maturin and with forced overrides of ``rust/ffi/cbindgen.toml``
(no includes, no include guard, no ``cpp_compat``). That is a second header
generator next to the pinned one behind ``make header``, and its header is not
byte-identical to the checked-in ``include/racaffinity.h``. Its only opt-out,
a pre-made ``target/header.h``, needs a step before ``pip`` runs. So this
backend does what maturin's cffi mode does at run time (an out-of-line cffi
*ABI-mode* module plus ``dlopen`` of the bundled library), from the one
checked-in header:

1. ``cargo build --release -p racaffinity-ffi`` (the same command as
   ``make lib``; nothing is rebuilt when the library is up to date);
2. ``ffi.cdef()`` of ``include/racaffinity.h`` with its preprocessor lines
   stripped (``#define NAME <integer>`` constants are kept), then
   ``cffi.recompiler.make_py_source`` writes ``racaffinity/_ffi.py``;
3. a wheel with ``racaffinity/*.py``, ``py.typed``, ``_ffi.py`` and
   ``racaffinity/_native/libracaffinity.so``. The wheel has no Python
   extension module, so it is tagged ``py3-none-<platform>``.

Environment:
- ``CARGO``: the cargo binary (default ``cargo``).
- ``RACAFFINITY_NATIVE_LIB``: bundle this prebuilt ``libracaffinity`` instead of
  running cargo (packagers; it must come from the same checkout as the header).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

PROJECT = Path(__file__).resolve().parent.parent  # python/
DIST_NAME = "racaffinity"
IMPORT_NAME = "racaffinity"
NATIVE_NAMES = {"linux": "libracaffinity.so", "darwin": "libracaffinity.dylib", "win32": "racaffinity.dll"}

# In a source distribution the Rust workspace is carried under `native/`.
SDIST_WORKSPACE = "native"
# What a source distribution carries of the workspace (paths relative to it).
WORKSPACE_FILES = ["Cargo.toml", "Cargo.lock", "rustfmt.toml", "include/racaffinity.h"]
WORKSPACE_TREES = ["rust"]


# ---------------------------------------------------------------------------
# locating things


def _workspace() -> Path:
    for cand in (PROJECT / SDIST_WORKSPACE, PROJECT.parent):
        if (cand / "Cargo.toml").is_file() and (cand / "rust" / "ffi" / "Cargo.toml").is_file():
            return cand
    raise RuntimeError(
        f"racaffinity: cannot find the Rust workspace (looked in {PROJECT / SDIST_WORKSPACE} and "
        f"{PROJECT.parent}); build from a checkout with `pip install ./python`"
    )


def _pyproject() -> dict:
    with open(PROJECT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _version() -> str:
    """The package version is the workspace version (Cargo.toml), so the
    library and the package never disagree."""
    text = (_workspace() / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r"^\[workspace\.package\][^\[]*?^version\s*=\s*\"([^\"]+)\"", text, re.M | re.S)
    if not m:
        raise RuntimeError("racaffinity: no [workspace.package] version in Cargo.toml")
    return m.group(1)


def _platform_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def _native_name() -> str:
    for prefix, name in NATIVE_NAMES.items():
        if sys.platform.startswith(prefix):
            return name
    return NATIVE_NAMES["linux"]


# ---------------------------------------------------------------------------
# the native library and the cffi module


def _build_native() -> Path:
    pre = os.environ.get("RACAFFINITY_NATIVE_LIB")
    if pre:
        p = Path(pre)
        if not p.is_file():
            raise RuntimeError(f"racaffinity: RACAFFINITY_NATIVE_LIB={pre} is not a file")
        return p
    ws = _workspace()
    cargo = os.environ.get("CARGO", "cargo")
    if shutil.which(cargo) is None:
        raise RuntimeError(
            f"racaffinity: `{cargo}` not found. Building the package needs Rust (https://rustup.rs) "
            "to compile libracaffinity, or RACAFFINITY_NATIVE_LIB pointing at a prebuilt library."
        )
    cmd = [cargo, "build", "--release", "-p", "racaffinity-ffi", "--message-format=json-render-diagnostics"]
    print("racaffinity: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ws, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"racaffinity: cargo build failed (exit {proc.returncode}); see the messages above")
    want = _native_name()
    found = None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact":
            continue
        if "cdylib" not in msg.get("target", {}).get("kind", []):
            continue
        for fn in msg.get("filenames", []):
            if Path(fn).name == want:
                found = Path(fn)
    if found is None or not found.is_file():
        raise RuntimeError(f"racaffinity: cargo did not report {want}")
    return found


def cdef_source(header_text: str) -> str:
    """The header as cffi's cdef() accepts it: comments stay (cffi drops them),
    `#define NAME <integer>` stays, every other preprocessor line goes, and so
    does everything inside `#ifdef __cplusplus` … `#endif`."""
    out = []
    skip = 0
    for line in header_text.splitlines():
        s = line.strip()
        if skip:
            if s.startswith("#if"):
                skip += 1
            elif s.startswith("#endif"):
                skip -= 1
            continue
        if s.startswith("#ifdef __cplusplus"):
            skip = 1
            continue
        if s.startswith("#"):
            if re.fullmatch(r"#define\s+[A-Z_][A-Z0-9_]*\s+-?\d+", s) and not s.split()[1].endswith("_H"):
                out.append(s)
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _write_ffi_module(dest: Path) -> None:
    import cffi
    from cffi import recompiler

    header = (_workspace() / "include" / "racaffinity.h").read_text(encoding="utf-8")
    ffi = cffi.FFI()
    ffi.cdef(cdef_source(header))
    recompiler.make_py_source(ffi, f"{IMPORT_NAME}._ffi", str(dest))


# ---------------------------------------------------------------------------
# metadata


def _metadata_text() -> str:
    proj = _pyproject()["project"]
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {proj['name']}",
        f"Version: {_version()}",
    ]
    if "description" in proj:
        lines.append(f"Summary: {proj['description']}")
    lic = proj.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    elif isinstance(lic, str):
        lines.append(f"License: {lic}")
    for url_name, url in proj.get("urls", {}).items():
        lines.append(f"Project-URL: {url_name}, {url}")
    for c in proj.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    if "requires-python" in proj:
        lines.append(f"Requires-Python: {proj['requires-python']}")
    for dep in proj.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    for extra, deps in proj.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            if ";" in dep:
                req, marker = dep.split(";", 1)
                lines.append(f"Requires-Dist: {req.strip()} ; ({marker.strip()}) and extra == \"{extra}\"")
            else:
                lines.append(f"Requires-Dist: {dep} ; extra == \"{extra}\"")
    body = ""
    readme = proj.get("readme")
    if isinstance(readme, str) and (PROJECT / readme).is_file():
        lines.append("Description-Content-Type: text/markdown")
        body = (PROJECT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _wheel_text(tag: str) -> str:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: racaffinity_build\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )


def _dist_info() -> str:
    return f"{DIST_NAME}-{_version()}.dist-info"


# ---------------------------------------------------------------------------
# wheel writing


class _Wheel:
    def __init__(self, path: Path):
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: list[str] = []
        epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
        self.date = time.gmtime(max(epoch, 315532800))[:6]

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        info = zipfile.ZipInfo(arcname, self.date)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, record_name: str) -> None:
        self.records.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, self.date)
        info.external_attr = (0o100000 | 0o644) << 16
        self.zf.writestr(info, "\n".join(self.records) + "\n")
        self.zf.close()


def _package_files() -> list[tuple[str, Path]]:
    src = PROJECT / "src" / IMPORT_NAME
    files = []
    for p in sorted(src.rglob("*")):
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        if p.suffix in (".py", ".pyi") or p.name == "py.typed":
            files.append((f"{IMPORT_NAME}/{p.relative_to(src).as_posix()}", p))
    return files


# ---------------------------------------------------------------------------
# PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = Path(metadata_directory) / _dist_info()
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(_metadata_text(), encoding="utf-8")
    (d / "WHEEL").write_text(_wheel_text(f"py3-none-{_platform_tag()}"), encoding="utf-8")
    return d.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    native = _build_native()
    tag = f"py3-none-{_platform_tag()}"
    name = f"{DIST_NAME}-{_version()}-{tag}.whl"
    out = Path(wheel_directory) / name
    with tempfile.TemporaryDirectory() as tmp:
        ffi_py = Path(tmp) / "_ffi.py"
        _write_ffi_module(ffi_py)
        w = _Wheel(out)
        for arc, path in _package_files():
            w.add(arc, path.read_bytes())
        w.add(f"{IMPORT_NAME}/_ffi.py", ffi_py.read_bytes())
        w.add(f"{IMPORT_NAME}/_native/{_native_name()}", native.read_bytes(), 0o755)
        di = _dist_info()
        w.add(f"{di}/METADATA", _metadata_text().encode())
        w.add(f"{di}/WHEEL", _wheel_text(tag).encode())
        w.add(f"{di}/top_level.txt", f"{IMPORT_NAME}\n".encode())
        w.close(f"{di}/RECORD")
    return name


def build_sdist(sdist_directory, config_settings=None):
    """A source distribution: this directory plus the Rust workspace under
    `native/`, so the wheel can be built without the rest of the checkout."""
    ws = _workspace()
    base = f"{DIST_NAME}-{_version()}"
    name = f"{base}.tar.gz"

    def keep(rel: Path) -> bool:
        return not any(part in ("target", "__pycache__", ".venv", ".pytest_cache") for part in rel.parts)

    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        def add(path: Path, arc: str) -> None:
            info = tf.gettarinfo(str(path), arc)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(path, "rb") as f:
                tf.addfile(info, f)

        for p in sorted(PROJECT.rglob("*")):
            rel = p.relative_to(PROJECT)
            if p.is_file() and keep(rel) and rel.parts[0] != SDIST_WORKSPACE:
                add(p, f"{base}/{rel.as_posix()}")
        for f in WORKSPACE_FILES:
            if (ws / f).is_file():
                add(ws / f, f"{base}/{SDIST_WORKSPACE}/{f}")
        for tree in WORKSPACE_TREES:
            for p in sorted((ws / tree).rglob("*")):
                rel = p.relative_to(ws)
                if p.is_file() and keep(rel):
                    add(p, f"{base}/{SDIST_WORKSPACE}/{rel.as_posix()}")
        pkg_info = _metadata_text().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        info.mtime = int(time.time())
        tf.addfile(info, io.BytesIO(pkg_info))
    return name
