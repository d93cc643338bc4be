"""Decode weights laid out [out, in] against the model's own [in, out] layout, on CPU.

A decode step multiplies a few rows (the batch) by every weight, and the weights stream from memory each step.
Two measurements, each side alternating call by call after one untimed call, medians printed with the load and
the CPU other processes used (`experiments/bench/quiet.py`):

1. `--part gemm`: a stack of SwiGLU MLPs of Qwen2.5-0.5B's shapes (24 x [896 -> 2 x 4864 -> 896], 1.25 GB in
   float32) at `--rows` rows, as `x @ w` (the model's layout) and as `out_first_matmul` (weights [out, in]);
   printed as the rate each reads the weights at, next to the rate XLA streams a 1 GiB array. The two outputs
   must agree to 1e-5 of their largest value (float32 rounding: ~2e-7).
2. `--part decode`: `Sampler.generate` of Qwen2.5-0.5B's shapes (random weights, batch 8, prompt 128, greedy),
   with `out_first_weights` off and on; a decode step's time is (64-token call - 1-token call) / 63. Greedy
   tokens must agree.

The script exits 1 when either check fails (the timings would compare different computations).

    python experiments/bench/bench_decode_layout.py [--part gemm,decode] [--rows 8] [--repeats 5]
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
from flax import nnx  # noqa: E402

from experiments.bench.compute_bound import stream_bytes_per_s  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models import CausalLM, ModelConfig  # noqa: E402
from ragen_jax.models.linear import out_first_matmul  # noqa: E402
from ragen_jax.sampling import Sampler, SamplingConfig  # noqa: E402

QWEN25_05B = ModelConfig("qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                         num_heads=14, num_kv_heads=2, head_dim=64, rope_theta=1e6, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, attention_bias=True, max_position_embeddings=32768)


def interleaved(calls: dict, repeats: int) -> tuple[dict[str, float], str]:
    """Medians (seconds) of each named () -> None call, alternating call by call; and the other-CPU line."""
    times = {name: [] for name in calls}
    with OtherCpu() as other:
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, other.line()


def mlp_stack(matmul, layers: int):
    """x [M, D] through `layers` SwiGLU blocks whose three weights are multiplied by `matmul(x, w)`."""
    def run(x, weights):
        for gate, up, down in weights:
            x = x + 0.01 * matmul(jax.nn.silu(matmul(x, gate)) * matmul(x, up), down)
        return x
    return jax.jit(run)


def gemm_part(rows: int, repeats: int) -> None:
    cfg = QWEN25_05B
    d, f = cfg.hidden_size, cfg.intermediate_size
    rng = np.random.default_rng(0)
    weights = [tuple(jnp.asarray(rng.standard_normal(shape, np.float32) * 0.02) for shape in ((d, f), (d, f), (f, d)))
               for _ in range(cfg.num_layers)]
    weights_t = [tuple(w.T.copy() for w in layer) for layer in weights]  # [out, in], materialised
    nbytes = sum(w.nbytes for layer in weights for w in layer)
    x = jnp.asarray(rng.standard_normal((rows, d), np.float32))
    own, out_first = mlp_stack(jnp.matmul, cfg.num_layers), mlp_stack(out_first_matmul, cfg.num_layers)
    want, got = own(x, weights), out_first(x, weights_t)
    calls = {"x @ w [in, out]": lambda: own(x, weights).block_until_ready(),
             "out_first [out, in]": lambda: out_first(x, weights_t).block_until_ready()}
    medians, other = interleaved(calls, repeats)
    stream = stream_bytes_per_s()
    diff, scale = float(jnp.abs(got - want).max()), float(jnp.abs(want).max())
    print(f"[gemm] {cfg.num_layers} SwiGLU blocks [{d} -> 2 x {f} -> {d}] at {rows} rows, {nbytes / 2**20:.0f} MiB "
          f"of float32 weights, medians of {repeats} (XLA streams a 1 GiB array at {stream / 1e9:.1f} GB/s); "
          f"max difference {diff:.1e}; {other}")
    for name, seconds in medians.items():
        print(f"[gemm]   {name:<22} {seconds * 1e3:7.1f} ms  weights read at {nbytes / seconds / 1e9:5.1f} GB/s "
              f"({nbytes / seconds / stream:.0%} of streaming)")
    print(f"[gemm] ratio out_first / x @ w speed (above 1: out_first faster): "
          f"{medians['x @ w [in, out]'] / medians['out_first [out, in]']:.2f}x", flush=True)
    if not diff <= 1e-5 * max(scale, 1.0):
        raise SystemExit(f"[gemm] the two layouts' outputs differ by {diff:.1e} (scale {scale:.1e}): out_first_matmul "
                         "does not compute x @ w")


def decode_part(repeats: int) -> None:
    cfg, batch, prompt_len, new = QWEN25_05B, 8, 128, 64
    graphdef, params = nnx.split(CausalLM(cfg, rngs=nnx.Rngs(0)))
    prompts = np.random.RandomState(0).randint(1, cfg.vocab_size, (batch, prompt_len)).astype(np.int32)
    lens = np.full((batch,), prompt_len, np.int32)
    tokens, calls = {}, {}
    for laid in (False, True):
        sampler = Sampler(graphdef, cache_size=prompt_len + new, pad_id=0, batch_size=batch, out_first_weights=laid)
        for n in (1, new):
            config = SamplingConfig(max_new_tokens=n, greedy=True)

            def call(sampler=sampler, config=config):
                return sampler.generate(params, prompts, lens, jax.random.key(0), config).tokens.block_until_ready()
            tokens[laid, n] = np.asarray(call())  # compiles
            calls[laid, n] = call
    medians, other = interleaved(calls, repeats)
    same = float((tokens[False, new] == tokens[True, new]).mean())
    print(f"[decode] Qwen2.5-0.5B shapes (random weights, float32), batch {batch}, prompt {prompt_len}, {new} greedy "
          f"tokens, medians of {repeats}; greedy tokens identical: {same:.1%}; {other}")
    step = {}
    for laid in (False, True):
        one, full = medians[laid, 1], medians[laid, new]
        step[laid] = (full - one) / (new - 1)
        name = "out_first [out, in]" if laid else "own [in, out]"
        print(f"[decode]   {name:<22} call {full:6.2f} s ({batch * new / full:5.1f} tok/s), 1-token call "
              f"{one:5.2f} s, a decode step {step[laid] * 1e3:6.1f} ms")
    print(f"[decode] ratio out_first / own speed (above 1: out_first faster): decode step "
          f"{step[False] / step[True]:.2f}x, whole call {medians[False, new] / medians[True, new]:.2f}x", flush=True)
    if same < 1.0:
        raise SystemExit(f"[decode] greedy tokens differ between the layouts ({same:.1%} identical): the timings "
                         "compare different computations")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", default="gemm,decode")
    p.add_argument("--rows", type=int, default=8, help="rows of the gemm part (the decode batch)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs; at the start: {load_line()}",
          flush=True)
    parts = args.part.split(",")
    if "gemm" in parts:
        gemm_part(args.rows, args.repeats)
    if "decode" in parts:
        decode_part(args.repeats)


if __name__ == "__main__":
    main()
