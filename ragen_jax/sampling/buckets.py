"""Length bucketing: pad prompt lengths to a few shapes so a run compiles a bounded number of programs."""

from __future__ import annotations

MIN_BUCKET = 16


def bucket_length(n: int, *, minimum: int = MIN_BUCKET) -> int:
    """The smallest power of two >= max(n, minimum)."""
    if n < 0:
        raise ValueError(f"length must be >= 0, got {n}.")
    target = max(n, minimum, 1)
    return 1 << (target - 1).bit_length()
