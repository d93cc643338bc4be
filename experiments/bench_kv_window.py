"""Decode with an attention window over the KV cache vs attending over every cache slot (the baseline).

The rollout engine allocates `rollout.max_model_len` slots per row (RAGEN's default 3600) while early
turns fill a few hundred; with the window (Sampler's default) attention reads only the first power of two
>= the longest row's end. Same model, prompts and greedy tokens; prints decode tokens/s of both and the ratio.

    python experiments/bench_kv_window.py                       # CPU-sized model, cache 3600
    python experiments/bench_kv_window.py --hidden 896 --layers 24 --heads 14 --head-dim 64 --dtype bfloat16  # GPU
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_gpu import bench_decode  # noqa: E402
from ragen_jax.models import CausalLM, ModelConfig  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--cache", type=int, default=3600, help="slots per row (rollout.max_model_len)")
    args = p.parse_args(argv)
    config = ModelConfig(architecture="qwen2", vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=4 * args.hidden, num_layers=args.layers, num_heads=args.heads,
                         num_kv_heads=args.kv_heads, head_dim=args.head_dim, attention_bias=True,
                         param_dtype=args.dtype, dtype=args.dtype)
    graphdef, params = nnx.split(CausalLM(config, rngs=nnx.Rngs(0)))
    shape = (args.batch, args.prompt, args.new, args.cache)
    full = bench_decode(graphdef, params, config, *shape, kv_window=False)
    windowed = bench_decode(graphdef, params, config, *shape, kv_window=True)
    same = bool(np.array_equal(full.pop("tokens"), windowed.pop("tokens")))
    ratio = windowed["decode_tokens_per_s"] / full["decode_tokens_per_s"]
    print(f"batch {args.batch}, prompt {args.prompt}, {args.new} new tokens, cache {args.cache} slots, "
          f"{args.layers} layers x {args.hidden} ({args.dtype})")
    print(f"decode tokens/s  windowed: {windowed['decode_tokens_per_s']:.1f}  every slot (baseline): "
          f"{full['decode_tokens_per_s']:.1f}  ratio {ratio:.2f}x  | same greedy tokens: {same}")
    return {"windowed": windowed, "full": full, "ratio": ratio, "same_tokens": same}


if __name__ == "__main__":
    main()
