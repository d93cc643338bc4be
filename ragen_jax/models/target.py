"""The platform the compiled programs are built for: the default device's, unless a GPU is named with
`compiling_for` while lowering ahead of time on a host without one (ragen_jax.aot).

Every choice the code makes by platform reads it here: the attention implementation (cuDNN on sm80+ GPUs),
the decode attention (ragged on one CPU), the sampler's out-first decode weights and decode lanes (CPU only).
Outside `compiling_for` these are the device's own facts, so a run never sees a difference.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import jax

_named: tuple[str, str | None] | None = None  # (platform, compute capability) set by `compiling_for`


def device_facts(device=None) -> tuple[str, str | None]:
    """(platform, CUDA compute capability or None) of `device` (default: the first device), or of the target
    `compiling_for` names."""
    if _named is not None:
        return _named
    device = jax.devices()[0] if device is None else device
    return device.platform, getattr(device, "compute_capability", None)


def backend() -> str:
    """The default backend's platform ("cpu", "gpu", "tpu"), or the one `compiling_for` names."""
    return _named[0] if _named is not None else jax.default_backend()


@contextlib.contextmanager
def compiling_for(platform: str = "gpu", compute_capability: str | None = "9.0") -> Iterator[None]:
    """Within it, trace programs as a run on `platform` would (a GPU: "gpu" with its compute capability, e.g. "9.0"
    for H100/H200). Process-wide (not per thread): for ahead-of-time lowering tools and tests, never a run."""
    global _named
    if platform not in ("cpu", "gpu", "tpu"):
        raise ValueError(f"platform must be 'cpu', 'gpu' or 'tpu' (jax's names), got {platform!r}.")
    before, _named = _named, (platform, compute_capability if platform == "gpu" else None)
    try:
        yield
    finally:
        _named = before
