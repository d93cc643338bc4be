"""Static shapes from dynamic sizes: round-ups, length buckets and evened chunks.

Compiled programs see a handful of shapes (DESIGN: static shapes, dynamic schedule), so every length a run meets is
padded up to one of a few buckets, and long axes are cut into evened chunks. One module holds the rules, so each
caller names which rule it pads with instead of writing its own.

A fixed chunk length pads n up to its next multiple: 300 positions in chunks of 256 become 512, 70% more work in
the vocabulary head and 2.9x the area of attention's score blocks. Evened chunks keep the same count: 2 x 150.
"""

from __future__ import annotations

import numpy as np

# Prompt and context lengths the sampler compiles for: powers of two up to 1024, then multiples of 512. Long
# prompts are where padding costs most (a 3072-token prefill padded to 4096 does 1.3-1.8x the work), and
# multiples of 512 keep that waste under 1/3 while a 3600-token context still compiles only 5 long buckets.
PROMPT_BUCKETS = dict(minimum=16, pow2_until=1024, step=512)
# Training rows: powers of two up to 256, then multiples of 128 (few update programs, padding under ~1/3 of a row).
ROW_BUCKETS = dict(minimum=32, pow2_until=256, step=128)


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple` (0 stays 0)."""
    return -(-int(n) // multiple) * multiple


def bucket_length(n: int, *, minimum: int = PROMPT_BUCKETS["minimum"], pow2_until: int = PROMPT_BUCKETS["pow2_until"],
                  step: int = PROMPT_BUCKETS["step"]) -> int:
    """The smallest power of two >= max(n, minimum, 1) up to `pow2_until`; above it, the smallest multiple of
    `step` (defaults: PROMPT_BUCKETS; training rows use ROW_BUCKETS)."""
    if n < 0:
        raise ValueError(f"length must be >= 0, got {n}.")
    target = max(int(n), minimum, 1)
    if target > pow2_until:
        return round_up(target, step)
    return 1 << (target - 1).bit_length()


def pad_rows(values) -> np.ndarray:
    """values [R] int32 -> [bucket_length(R, minimum=1)] with zeros after them, so a jitted function of a row set
    compiles a few programs (powers of two), not one per R; slice its results back to [:R]."""
    values = np.asarray(values, np.int32).reshape(-1)
    padded = np.zeros(bucket_length(len(values), minimum=1), np.int32)
    padded[:len(values)] = values
    return padded


def even_chunk(n: int, most: int, multiple: int = 1) -> int:
    """The chunk length for n positions: as few chunks of at most `most` as that allows (ceil(n / most)), each
    ceil(n / count) rounded up to `multiple` (but not above `most`). n <= most gives n rounded up, one chunk."""
    if n < 1 or most < 1 or multiple < 1:
        raise ValueError(f"even_chunk needs n, most and multiple >= 1, got n={n}, most={most}, multiple={multiple}.")
    count = -(-n // most)
    return min(most, round_up(-(-n // count), multiple))
