"""Level banks: levels for a range of seeds, generated on the host and cached on disk.

A bank file holds the levels of seeds [start, start + count) for one generator config, under
`$RAGEN_JAX_CACHE` (default ~/.cache/ragen_jax)/sokoban/. Seeds are grouped into aligned chunks
so any set of seeds maps onto a few reusable files.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import tempfile
import zipfile
from typing import Sequence

import numpy as np

from envs.sokoban.generator import GeneratorConfig, generate_level

CHUNK = 256
# Bump when generation changes, so stale cached banks are never reused.
GENERATOR_VERSION = 1


def cache_dir() -> pathlib.Path:
    root = os.environ.get("RAGEN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "ragen_jax"))
    return pathlib.Path(root) / "sokoban"


def config_key(cfg: GeneratorConfig) -> str:
    """A short stable hash of the generator parameters (and generator version)."""
    blob = json.dumps({**dataclasses.asdict(cfg), "version": GENERATOR_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def generate_bank(cfg: GeneratorConfig, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Levels of seeds [start, start + count): (fixed [N, H, W], room [N, H, W]) int8, no caching."""
    levels = [generate_level(seed, cfg) for seed in range(start, start + count)]
    return np.stack([f for f, _ in levels]), np.stack([r for _, r in levels])


def load_bank(cfg: GeneratorConfig, start: int, count: int, use_cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Like `generate_bank`, read from / written to the disk cache (atomic write) when `use_cache`."""
    if not use_cache:
        return generate_bank(cfg, start, count)
    path = cache_dir() / f"{config_key(cfg)}_{start}_{count}.npz"
    if path.exists():
        cached = _read_bank(path, (count, *cfg.dim_room))
        if cached is not None:
            return cached
    fixed, room = generate_bank(cfg, start, count)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
            tmp_name = tmp.name
            np.savez(tmp, fixed=fixed, room=room)
        os.replace(tmp_name, path)
    except OSError:  # a read-only or full cache only costs regeneration time
        if tmp_name is not None and os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return fixed, room


def _read_bank(path: pathlib.Path, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """A cached bank (fixed, room) of `shape` [N, H, W], or None when the file is damaged (cut short, empty,
    not an npz, other arrays): the caller regenerates and rewrites it."""
    try:
        with np.load(path) as data:
            fixed, room = data["fixed"], data["room"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if fixed.shape != shape or room.shape != shape:
        return None
    return fixed, room


@functools.lru_cache(maxsize=64)
def _chunk(cfg: GeneratorConfig, chunk_index: int, use_cache: bool) -> tuple[np.ndarray, np.ndarray]:
    return load_bank(cfg, chunk_index * CHUNK, CHUNK, use_cache)


def levels_for_seeds(cfg: GeneratorConfig, seeds: Sequence[int],
                     use_cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """RAGEN's level for each seed: (fixed [B, H, W], room [B, H, W]) int8."""
    seeds = [int(s) for s in seeds]
    if any(s < 0 for s in seeds):
        raise ValueError(f"Sokoban seeds must be >= 0, got {min(seeds)}.")
    if not use_cache and len(set(s // CHUNK for s in seeds)) * CHUNK > 4 * len(seeds):
        levels = [generate_level(s, cfg) for s in seeds]  # few scattered seeds: skip whole chunks
        return np.stack([f for f, _ in levels]), np.stack([r for _, r in levels])
    out = [(_chunk(cfg, s // CHUNK, use_cache), s % CHUNK) for s in seeds]
    return np.stack([c[0][i] for c, i in out]), np.stack([c[1][i] for c, i in out])
