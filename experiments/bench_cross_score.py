"""Cross-scoring cost: prefix-cached `cross_score` vs a naive full-sequence scorer, same model.

Prints seconds per R x C matrix for both and the speed-up, and checks they agree. The naive
scorer runs every (reasoning, prompt) pair as one right-padded [x_j | z_i] sequence (what RAGEN
does); ours prefills each prompt once and runs only the reasoning tokens per pair.
Usage (repo root): PYTHONPATH=. python experiments/bench_cross_score.py [--pairs 16] [--prompt-len 192] [--reason-len 48]
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.diagnostics.cross_score import cross_score
from ragen_jax.models import make_tiny_model


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


def _time(fn, repeats):
    fn()  # compile
    start = time.perf_counter()
    for _ in range(repeats):
        result = fn()
    return (time.perf_counter() - start) / repeats, result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=16, help="R = C")
    p.add_argument("--prompt-len", type=int, default=192)
    p.add_argument("--reason-len", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    model, tok = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompts = [rng.integers(1, vocab, args.prompt_len - rng.integers(0, 16)).tolist() for _ in range(args.pairs)]
    reasonings = [rng.integers(1, vocab, args.reason_len - rng.integers(0, 16)).tolist() for _ in range(args.pairs)]
    ours_s, (_, ours) = _time(
        lambda: cross_score(graphdef, params, prompts, reasonings, 0, args.batch_size), args.repeats
    )
    naive_s, naive = _time(
        lambda: naive_cross_score(graphdef, params, prompts, reasonings, args.batch_size), args.repeats
    )
    err = float(np.abs(ours - naive).max())
    print(f"backend={jax.default_backend()} R=C={args.pairs} prompt~{args.prompt_len} reasoning~{args.reason_len}")
    print(f"prefix-cached cross_score: {ours_s:.3f} s   naive full-sequence: {naive_s:.3f} s   "
          f"speed-up x{naive_s / ours_s:.2f}   max |diff| {err:.2e}")


if __name__ == "__main__":
    main()
