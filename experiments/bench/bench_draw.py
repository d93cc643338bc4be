"""The sampler's token draw alone: `inverse_cdf_categorical` (ours: two inverse-CDF stages, a block of ~sqrt(V)
tokens by mass, then a token in it, each with its own uniform) against the single draw it replaced (one uniform
against the running sum of all V weights: off softmax by 3.3e-3 in total variation at 151,936 tokens where ours is
off by 1.4e-5; see docs/performance.md), the count before that (the number of running sums <= u * total, which can
land on a masked token where XLA's running sum dips) and `jax.random.categorical` (Gumbel), jitted, interleaved call
by call, medians. Also prints both inverse-CDF draws' exact error: the total variation between softmax and the
distribution each draw implies over every float32 uniform it can get.

    python experiments/bench/bench_draw.py                  # 64 x 1,119 (tiny) and 8 x 151,936 (Qwen's vocabulary)
    python experiments/bench/bench_draw.py --repeats 101
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.sampling.logits import draw_block_size, draw_index, inverse_cdf_categorical  # noqa: E402

CASES = ((64, 1_119), (8, 151_936))
UNIFORMS = np.arange(2**23, dtype=np.float32) * np.float32(2.0**-23)  # every float32 jax.random.uniform gives


def single_draw(key: jax.Array, logits: jax.Array) -> jax.Array:
    """The draw before the two stages: one uniform against the running sum of all V weights (`draw_index`)."""
    u = jax.random.uniform(key, (logits.shape[0], 1), jnp.float32)
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    return jnp.minimum(draw_index(u, weights), logits.shape[1] - 1)


def count_draw(key: jax.Array, logits: jax.Array) -> jax.Array:
    """The draw before `draw_index`: the number of running sums at or below u * total."""
    u = jax.random.uniform(key, (logits.shape[0], 1), jnp.float32)
    cdf = jnp.cumsum(jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True)), axis=-1)
    return jnp.minimum(jnp.sum(cdf <= u * cdf[:, -1:], axis=-1), logits.shape[1] - 1).astype(jnp.int32)


def grid_probabilities(weights: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    """weights [N] and their running sum cdf [N] (float32, as `draw_index` computes it) -> [N] float64: the share
    of UNIFORMS for which `draw_index` picks each index. It picks i when x = u * total lies in [m[i-1], cdf[i]), m
    the running max of the cdf over positive weights (tests/test_sampling_filters.py checks this against the draw)."""
    positive = weights > 0
    cdf = np.where(positive, cdf, 0).astype(np.float32)
    floor = np.concatenate([[0], np.maximum.accumulate(cdf)[:-1]]).astype(np.float32)
    x = UNIFORMS * cdf.max()
    share = np.searchsorted(x, cdf, side="left") - np.searchsorted(x, floor, side="left")
    return np.where(positive, np.maximum(share, 0), 0) / 2.0**23


running_sum = jax.jit(lambda w: jnp.cumsum(w, axis=-1))  # as the draws compute it


def two_stage_grid_probabilities(logits: np.ndarray) -> np.ndarray:
    """The distribution `inverse_cdf_categorical` draws from on one row of logits [V] float32, over every pair of
    float32 uniforms -> [V] float64 (its blocks, weights and running sums computed as the draw computes them)."""
    w = jnp.exp(jnp.asarray(logits) - jnp.max(jnp.asarray(logits)))
    size = draw_block_size(logits.shape[0])
    blocks = jnp.pad(w, (0, -(-w.shape[0] // size) * size - w.shape[0])).reshape(-1, size)
    mass = jnp.sum(blocks, axis=-1)
    p_block = grid_probabilities(np.asarray(mass), np.asarray(running_sum(mass)))
    in_block = np.asarray(running_sum(blocks))
    two = np.concatenate([p * grid_probabilities(bw, c) for p, bw, c in zip(p_block, np.asarray(blocks), in_block)])
    return two[:logits.shape[0]]


def exact_tvs(logits: np.ndarray) -> tuple[float, float]:
    """(single draw, ours): each one's exact TV from softmax on one row of logits [V]."""
    exact = np.exp(logits.astype(np.float64) - logits.max())
    exact /= exact.sum()
    w = jnp.exp(jnp.asarray(logits) - logits.max())
    single = grid_probabilities(np.asarray(w), np.asarray(running_sum(w)))
    two = two_stage_grid_probabilities(logits)
    return 0.5 * float(np.abs(single - exact).sum()), 0.5 * float(np.abs(two - exact).sum())


def time_ms(fn, key, logits) -> float:
    start = time.perf_counter()
    fn(key, logits).block_until_ready()
    return 1e3 * (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=61)
    args = parser.parse_args(argv)
    print(f"medians of {args.repeats} interleaved calls per draw; at the start: {load_line()}")
    draws = {"ours (two stages)": jax.jit(inverse_cdf_categorical), "single draw (before)": jax.jit(single_draw),
             "count (before that)": jax.jit(count_draw),
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
              + f"; time ratios (below 1: ours is faster): ours / single draw "
              f"{medians['ours (two stages)'] / medians['single draw (before)']:.2f}x, ours / categorical "
              f"{medians['ours (two stages)'] / medians['jax.random.categorical']:.2f}x  ({other.line()})")
        single, two = exact_tvs(np.asarray(logits[0]))
        print(f"  exact TV from softmax on row 0: ours {two:.2e}, single draw {single:.2e}")


if __name__ == "__main__":
    main()
