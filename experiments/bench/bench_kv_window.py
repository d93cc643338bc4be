"""Decode with an attention window over the KV cache vs attending over every cache slot (the baseline).

The rollout engine allocates `rollout.max_model_len` slots per row (RAGEN's default 3600) while early
turns fill a few hundred; with the window (Sampler's default) attention reads only the first power of two
>= the longest row's end. Same model, prompts and greedy tokens (checked on the untimed first calls, before
timing); the two sides alternate call by call over --repeats calls (a full call and a 1-token call each:
decode time = median full - median 1-token) and medians are printed with the 1-minute load average, the CPU
other processes used while timing (`experiments/bench/quiet.py`) and, on a CPU, each side's matmul FLOP/s against
the measured GEMM bound. Last line: decode tokens/s of both and the ratio windowed/baseline.

    python experiments/bench/bench_kv_window.py                       # CPU-sized model, cache 3600
    python experiments/bench/bench_kv_window.py --hidden 896 --layers 24 --heads 14 --head-dim 64 --dtype bfloat16  # GPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from experiments.bench.compute_bound import bound_line, forward_flops  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models import CausalLM, ModelConfig  # noqa: E402
from ragen_jax.sampling import SamplingConfig, Sampler  # noqa: E402


def runner(graphdef, params, prompts: np.ndarray, new: int, cache: int, kv_window: bool):
    """(call(max_new_tokens) -> (seconds, tokens [B, N]), slots attention reads at the mean decode step).
    Both programs (full and 1-token) are compiled here by one untimed call each."""
    batch, prompt = prompts.shape
    sampler = Sampler(graphdef, cache_size=cache, pad_id=0, batch_size=batch, kv_window=kv_window)
    lens = np.full((batch,), prompt, np.int32)
    configs = {n: SamplingConfig(max_new_tokens=n, greedy=True) for n in (new, 1)}

    def call(n: int) -> tuple[float, np.ndarray]:
        start = time.perf_counter()
        out = sampler.generate(params, prompts, lens, jax.random.PRNGKey(0), configs[n])
        tokens = np.asarray(out.tokens)
        return time.perf_counter() - start, tokens
    call(1)
    return call, sampler.window_length(prompt + new)


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
    p.add_argument("--repeats", type=int, default=3, help="timed calls per side (interleaved; medians)")
    args = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs; at the start: {load_line()}",
          flush=True)
    config = ModelConfig(architecture="qwen2", vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=4 * args.hidden, num_layers=args.layers, num_heads=args.heads,
                         num_kv_heads=args.kv_heads, head_dim=args.head_dim, attention_bias=True,
                         param_dtype=args.dtype, dtype=args.dtype)
    graphdef, params = nnx.split(CausalLM(config, rngs=nnx.Rngs(0)))
    prompts = np.random.default_rng(0).integers(1, args.vocab, (args.batch, args.prompt)).astype(np.int32)
    sides = {"windowed": runner(graphdef, params, prompts, args.new, args.cache, True),
             "every slot (baseline)": runner(graphdef, params, prompts, args.new, args.cache, False)}
    first = {name: call(args.new)[1] for name, (call, _) in sides.items()}  # compiles; tokens compared before timing
    same = bool(np.array_equal(*first.values()))
    if not same:
        print("WARNING: the two sides' greedy tokens differ: they do not compute the same thing", flush=True)
    times = {(name, n): [] for name in sides for n in (args.new, 1)}
    with OtherCpu() as other:
        for _ in range(args.repeats):  # alternate the sides call by call
            for n in (args.new, 1):
                for name, (call, _) in sides.items():
                    times[name, n].append(call(n)[0])
    med = {key: float(np.median(t)) for key, t in times.items()}
    rates, lines = {}, []
    for name, (_, attended) in sides.items():
        decode = med[name, args.new] - med[name, 1]  # the new - 1 decode steps after prefill + first token
        rates[name] = args.batch * (args.new - 1) / decode if decode > 0 else float("nan")
        line = (f"  {name:<22} call {med[name, args.new] * 1e3:8.1f} ms, 1-token call {med[name, 1] * 1e3:8.1f} ms: "
                f"{rates[name]:9.1f} decode tokens/s (attends over {attended} slots)")
        if jax.default_backend() == "cpu" and decode > 0:
            flops = forward_flops(config, args.batch * (args.new - 1), attended)
            line += f"; decode matmuls {bound_line(flops, decode)}"
        lines.append(line)
    ratio = rates["windowed"] / rates["every slot (baseline)"]
    print(f"batch {args.batch}, prompt {args.prompt}, {args.new} greedy tokens, cache {args.cache} slots, "
          f"{args.layers} layers x {args.hidden} ({args.dtype}), medians of {args.repeats}; same greedy tokens: "
          f"{same}; {other.line()}")
    print("\n".join(lines))
    print(f"decode tokens/s  windowed: {rates['windowed']:.1f}  every slot (baseline): "
          f"{rates['every slot (baseline)']:.1f}  ratio windowed/baseline {ratio:.2f}x  | same greedy tokens: {same}",
          flush=True)
    return {"rates": rates, "ratio": ratio, "same_tokens": same}


if __name__ == "__main__":
    main()
