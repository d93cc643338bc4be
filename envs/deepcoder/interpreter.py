"""The Python interpreter sandboxed programs run on, and the host paths it needs: the sandbox's whole view.

`interpreter_view(interpreter)` lists what a sandbox exposes read-only: the interpreter binary, its
import path (stdlib, lib-dynload, site-packages), the shared libraries it loads, the system library
directories (`/usr/lib`, `/lib*`, kept as symlinks where the host has symlinks) and the few /etc
files the loader and `time` read. Nothing else of the host is visible inside the sandbox.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from typing import Iterable


class SandboxError(RuntimeError):
    """The sandbox itself could not run a program (not a verdict on the program)."""


PROBE_UID = 999_999_999  # an unprivileged uid with no files: what every run's uid can access
SYSTEM_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/lib", "/lib64", "/lib32", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")

# Imports the modules solutions commonly use, then reports the import path and every mapped file.
_PROBE = """
import json, sys
for name in ("math", "collections", "heapq", "bisect", "itertools", "functools", "re", "string", "decimal",
             "fractions", "datetime", "random", "array", "statistics", "typing", "operator", "struct", "hashlib",
             "time", "threading", "copy", "io", "queue", "multiprocessing", "ctypes", "zlib", "unicodedata"):
    try:
        __import__(name)
    except ImportError:
        pass
files = sorted({line.split(None, 5)[5].strip() for line in open("/proc/self/maps") if len(line.split(None, 5)) == 6})
print(json.dumps({"path": [p for p in sys.path if p], "files": [f for f in files if f.startswith("/")]}))
"""


def interpreter_for(uid: int | None) -> str:
    """A Python interpreter that `uid` (None = ourselves) can execute."""
    return os.path.realpath(sys.executable) if uid is None else _unprivileged_interpreter()


@functools.lru_cache(maxsize=1)
def _unprivileged_interpreter() -> str:
    candidates = [os.path.realpath(sys.executable), os.path.realpath(getattr(sys, "_base_executable", ""))]
    candidates += [os.path.realpath(p) for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    for cand in dict.fromkeys(c for c in candidates if c and os.path.isfile(c)):
        try:
            proc = subprocess.run([cand, "-I", "-c", "import json, math, collections"], user=PROBE_UID,
                                  group=PROBE_UID, extra_groups=[], cwd="/", env={}, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0:
            return cand
    raise SandboxError("no Python interpreter is executable by an unprivileged uid; install python3 in /usr/bin "
                       "or set SandboxConfig(drop_privileges=False)")


def _covered(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _resolve(path: str, out: set[str], depth: int = 0) -> None:
    """Add `path` to `out` as its real path plus every symlink met on the way to it."""
    if depth > 40:
        raise SandboxError(f"too many levels of symlinks under {path}")
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if os.path.islink(prefix):
            out.add(prefix)
            target = os.path.join(os.path.dirname(prefix), os.readlink(prefix), *parts[i:])
            _resolve(os.path.normpath(target), out, depth + 1)
            return
    out.add(path)


def minimal_view(paths: Iterable[str]) -> tuple[str, ...]:
    """Existing paths as symlinks (kept as such) and real paths, none inside a listed directory, sorted.

    A path reached through symlinks brings those symlinks and its real path, so the same names resolve
    inside the sandbox; parents sort before children, the order they are mounted in.
    """
    out: set[str] = set()
    for path in paths:
        if os.path.lexists(path):
            _resolve(os.path.abspath(path), out)
    dirs: list[str] = []
    view = []
    for path in sorted(out):
        if _covered(path, dirs):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            dirs.append(path)
        view.append(path)
    return tuple(view)


@functools.lru_cache(maxsize=8)
def interpreter_view(interpreter: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Host paths a sandbox exposes read-only for `interpreter` (plus `extra`), in mount order."""
    try:
        proc = subprocess.run([interpreter, "-I", "-c", _PROBE], cwd="/", env={}, capture_output=True, timeout=60)
        probe = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise SandboxError(f"could not list the paths {interpreter} needs: {e}") from e
    mapped = [f for f in probe["files"] if os.path.isfile(f)]
    return minimal_view([interpreter, *SYSTEM_LIBRARY_DIRS, *probe["path"], *mapped, *ETC_FILES, *extra])
