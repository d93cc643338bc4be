"""A persistent XLA compilation cache for runs: a rerun, a sweep's next point or an evaluation with the same model
and shapes reads its compiled programs from disk instead of compiling them again (compiling is a visible share of
a short CPU run: docs/performance.md, "Compile time").

JAX keys each entry by the program's HLO, the compile options, the device kind and the jax/jaxlib versions, so a
changed model, shape, flag or upgrade compiles afresh; only programs that took at least `MIN_COMPILE_SECONDS` to
compile are stored. Deleting the folder is always safe.
"""

from __future__ import annotations

import logging
import os
import tempfile

import jax
from jax.experimental.compilation_cache import compilation_cache

log = logging.getLogger(__name__)

ENV_VAR = "RAGEN_JAX_COMPILE_CACHE"  # a folder, or empty to turn the cache off
JAX_DIR_VAR = "JAX_COMPILATION_CACHE_DIR"  # JAX's own setting: used when ENV_VAR is not set
JAX_MIN_SECONDS_VAR = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # JAX's own threshold: kept when set
# a few large programs hold most of a run's compile time, and the many tiny ones cost more to read than to compile
MIN_COMPILE_SECONDS = 0.1


def default_dir() -> str:
    """Where run.py keeps the cache: $RAGEN_JAX_COMPILE_CACHE when set (empty: off), else JAX's own
    $JAX_COMPILATION_CACHE_DIR when set, else $XDG_CACHE_HOME/ragen_jax/xla (default ~/.cache/ragen_jax/xla)."""
    if ENV_VAR in os.environ:
        return os.environ[ENV_VAR]
    if os.environ.get(JAX_DIR_VAR):
        return os.environ[JAX_DIR_VAR]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ragen_jax", "xla")


def _point_at(path: str | None) -> None:
    """Sets JAX's cache folder (None: off). JAX opens its cache once, at the first program it stores or reads, so
    a change of folder also drops the opened one."""
    if jax.config.jax_compilation_cache_dir != path:
        jax.config.update("jax_compilation_cache_dir", path)
        compilation_cache.reset_cache()


def enable(directory: str, *, min_compile_seconds: float | None = None) -> str | None:
    """Points JAX's persistent compilation cache at `directory` (created if missing) and returns its absolute
    path; "" turns the cache off and returns None. min_compile_seconds: programs that compiled faster are not
    stored (default MIN_COMPILE_SECONDS, or $JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS when set). A folder that
    cannot be created or written turns the cache off with one warning (JAX would warn on every program it failed to
    store): a run never fails for want of a cache."""
    if not directory:
        _point_at(None)
        return None
    path = os.path.abspath(os.path.expanduser(directory))
    try:
        os.makedirs(path, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=path, prefix=".write_probe_")
        os.close(handle)
        os.remove(probe)
    except OSError as e:
        log.warning("XLA compilation cache off: cannot write to %s (%s); pass --compile_cache=<a writable folder> or "
                    "--compile_cache='' to silence this.", path, e)
        _point_at(None)
        return None
    if min_compile_seconds is None:
        min_compile_seconds = MIN_COMPILE_SECONDS if JAX_MIN_SECONDS_VAR not in os.environ else None
    if min_compile_seconds is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    _point_at(path)
    return path
