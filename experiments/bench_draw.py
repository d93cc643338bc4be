"""The sampler's token draw alone: `inverse_cdf_categorical` (two inverse-CDF draws, a block then a token in it)
against the single inverse-CDF draw it replaced and `jax.random.categorical` (Gumbel), jitted, interleaved call by
call, medians. Also prints each draw's exact error: the total variation between softmax and the distribution the
draw implies over every float32 uniform it can get.

    python experiments/bench_draw.py                  # 64 x 1,119 (tiny) and 8 x 151,936 (Qwen's vocabulary)
    python experiments/bench_draw.py --repeats 101
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.sampling.filters import inverse_cdf_categorical  # noqa: E402

CASES = ((64, 1_119), (8, 151_936))
UNIFORMS = np.arange(2**23, dtype=np.float32) * np.float32(2.0**-23)  # every float32 jax.random.uniform gives


def single_draw(key: jax.Array, logits: jax.Array) -> jax.Array:
    """The draw before the two-stage one: one uniform per row against the running sum of all V weights."""
    u = jax.random.uniform(key, (logits.shape[0], 1), jnp.float32)
    cdf = jnp.cumsum(jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True)), axis=-1)
    return jnp.minimum(jnp.sum(cdf <= u * cdf[:, -1:], axis=-1), logits.shape[1] - 1).astype(jnp.int32)


def single_draw_tv(logits: np.ndarray) -> float:
    """Exact TV of `single_draw` on one row [V]: it picks i for u * total between the i-th and (i+1)-th smallest
    running sums."""
    cdf = np.asarray(jax.jit(jnp.cumsum)(jnp.exp(jnp.asarray(logits) - logits.max())))
    below = np.searchsorted(UNIFORMS * cdf[-1], np.sort(cdf), side="left")
    implied = np.diff(np.concatenate([[0], below])) / 2.0**23
    exact = np.exp(logits.astype(np.float64) - logits.max())
    return 0.5 * float(np.abs(implied - exact / exact.sum()).sum())


def time_ms(fn, key, logits) -> float:
    start = time.perf_counter()
    fn(key, logits).block_until_ready()
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=61)
    args = parser.parse_args()
    print(load_line())
    draws = {"two-stage (ours)": jax.jit(inverse_cdf_categorical), "single draw": jax.jit(single_draw),
             "jax.random.categorical": jax.jit(lambda key, x: jax.random.categorical(key, x, axis=-1))}
    for batch, vocab in CASES:
        logits = jnp.asarray(np.random.RandomState(0).randn(batch, vocab).astype(np.float32))
        for fn in draws.values():
            time_ms(fn, jax.random.key(0), logits)
        times = {name: [] for name in draws}
        with OtherCpu() as other:
            for r in range(args.repeats):
                for name, fn in draws.items():
                    times[name].append(time_ms(fn, jax.random.key(r), logits))
        medians = {name: float(np.median(t)) for name, t in times.items()}
        print(f"{batch} x {vocab:,}: " + ", ".join(f"{n} {m:.3f} ms" for n, m in medians.items())
              + f"; ours / single {medians['two-stage (ours)'] / medians['single draw']:.2f}x  ({other.line()})")
        print(f"  exact TV of the single draw on row 0: {single_draw_tv(np.asarray(logits[0])):.2e} "
              "(two-stage: tests/test_sampling_filters.py holds it < 1e-4 at 151,936)")


if __name__ == "__main__":
    main()
