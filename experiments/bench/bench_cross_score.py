"""Cross-scoring cost: prefix-cached `cross_score` vs a naive full-sequence scorer, same model.

The naive scorer runs every (reasoning, prompt) pair as one right-padded [x_j | z_i] sequence (what RAGEN
does); ours prefills each prompt once and runs only the reasoning tokens per pair. Prints the median seconds
per R x C matrix of both (interleaved call by call after one untimed call), the speed-up, the load and the CPU
other processes used (`experiments/bench/quiet.py`), and exits 1 when the two scores differ by more than --atol.
Usage: python experiments/bench/bench_cross_score.py [--pairs 16] [--prompt-len 192] [--reason-len 48]
    [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.diagnostics.cross_score import cross_score  # noqa: E402
from ragen_jax.models import make_tiny_model  # noqa: E402


@functools.partial(jax.jit, static_argnums=0)
def _naive_batch(graphdef, params, tokens, mask, target_mask):
    model = nnx.merge(graphdef, params)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    logits, _ = model(tokens, positions, attention_mask=mask)
    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    tgt = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(target_mask[:, 1:], tgt, 0.0), axis=-1)


def naive_cross_score(graphdef, params, prompts, reasonings, batch_size):
    """Summed log p(z_i | x_j) [R, C] by one full forward per pair."""
    width = 1 << (max(map(len, prompts)) + max(map(len, reasonings)) - 1).bit_length()
    pairs = [(i, j) for i in range(len(reasonings)) for j in range(len(prompts))]
    pairs += [pairs[-1]] * (-len(pairs) % batch_size)
    out = np.zeros(len(pairs))
    for lo in range(0, len(pairs), batch_size):
        tok = np.zeros((batch_size, width), np.int32)
        mask = np.zeros((batch_size, width), bool)
        tmask = np.zeros((batch_size, width), bool)
        for b, (i, j) in enumerate(pairs[lo : lo + batch_size]):
            seq = prompts[j] + reasonings[i]
            tok[b, : len(seq)], mask[b, : len(seq)] = seq, True
            tmask[b, len(prompts[j]) : len(seq)] = True
        out[lo : lo + batch_size] = np.asarray(_naive_batch(graphdef, params, tok, mask, tmask))
    n = len(reasonings) * len(prompts)
    return out[:n].reshape(len(reasonings), len(prompts))


def interleaved(calls: dict, repeats: int) -> tuple[dict[str, float], dict, str]:
    """Each named () -> result call once untimed (compiles), then alternating call by call `repeats` times:
    (median seconds, the last result of each, the other-CPU line)."""
    results = {name: call() for name, call in calls.items()}
    times = {name: [] for name in calls}
    with OtherCpu() as other:
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.perf_counter()
                results[name] = call()
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, results, other.line()


def random_tokens(rng, vocab: int, length: int) -> list[int]:
    """Random ids in [1, vocab) for a row of up to `length` tokens, up to 15 (and under half) shorter, so rows
    are ragged; at least one token."""
    return rng.integers(1, vocab, length - rng.integers(0, min(16, length // 2 + 1))).tolist()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=16, help="R = C")
    p.add_argument("--prompt-len", type=int, default=192)
    p.add_argument("--reason-len", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--atol", type=float, default=1e-3,
                   help="largest |difference| of a summed log-prob the two scorers may show (float32 sums)")
    args = p.parse_args(argv)
    if args.pairs < 1 or args.prompt_len < 1 or args.reason_len < 1:
        p.error("--pairs, --prompt-len and --reason-len must be >= 1")
    print(f"backend={jax.default_backend()}; at the start: {load_line()}", flush=True)
    model, tok = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompts = [random_tokens(rng, vocab, args.prompt_len) for _ in range(args.pairs)]
    reasonings = [random_tokens(rng, vocab, args.reason_len) for _ in range(args.pairs)]
    medians, results, other = interleaved({
        "ours": lambda: cross_score(graphdef, params, prompts, reasonings, 0, args.batch_size)[1],
        "naive": lambda: naive_cross_score(graphdef, params, prompts, reasonings, args.batch_size),
    }, args.repeats)
    err = float(np.abs(results["ours"] - results["naive"]).max())
    print(f"R=C={args.pairs} prompt~{args.prompt_len} reasoning~{args.reason_len}, medians of {args.repeats} "
          f"interleaved calls; {other}")
    print(f"prefix-cached cross_score: {medians['ours']:.3f} s   naive full-sequence: {medians['naive']:.3f} s   "
          f"speed-up (naive / ours time, above 1: ours faster) x{medians['naive'] / medians['ours']:.2f}   "
          f"max |diff| {err:.2e}")
    if not err <= args.atol:
        raise SystemExit(f"the two scorers disagree: max |diff| of a summed log-prob {err:.2e} > --atol "
                         f"{args.atol:g}; the timings compare different computations")


if __name__ == "__main__":
    main()
