"""Decode lanes against one program over the whole batch: `Sampler.generate` with lanes=1 and with lanes=N, same
model, prompts and keys, interleaved call by call, medians; greedy tokens compared. Cases: model x batch.

    python experiments/bench/bench_lanes.py                      # tiny at 8 / 16 / 32 / 64 / 128 rows, medium at 16 / 64
    python experiments/bench/bench_lanes.py --cases tiny:64 --lanes 2 --repeats 7

The default rule (`sampling.lanes.decode_lanes`) is set from these figures; the last line prints each ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models import CausalLM, tiny_config  # noqa: E402
from ragen_jax.sampling import Sampler, SamplingConfig  # noqa: E402
from ragen_jax.sampling.lanes import decode_lanes, decode_step_weight_bytes  # noqa: E402

MODELS = {
    "tiny": {},
    "medium": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_layers=8, num_heads=8,
                   num_kv_heads=2, head_dim=64),  # bench_train.py's medium
}
PROMPT, NEW = 128, 64


def runner(graphdef, params, prompts: np.ndarray, lanes: int):
    """() -> (seconds, tokens [B, NEW]) of one greedy Sampler.generate call in `lanes` lanes (compiled first)."""
    batch = prompts.shape[0]
    sampler = Sampler(graphdef, cache_size=PROMPT + NEW, pad_id=0, batch_size=batch, lanes=lanes)
    config = SamplingConfig(max_new_tokens=NEW, greedy=True)
    lens = np.full((batch,), PROMPT, np.int32)

    def call() -> tuple[float, np.ndarray]:
        start = time.perf_counter()
        out = sampler.generate(params, prompts, lens, jax.random.key(0), config)
        tokens = np.asarray(out.tokens)
        return time.perf_counter() - start, tokens
    call()
    return call


def run_case(case: str, lanes: int | None, repeats: int) -> float:
    name, batch = case.split(":")
    batch = int(batch)
    model = CausalLM(tiny_config(**MODELS[name]), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    n = lanes or max(decode_lanes(model.config, "cpu", batch), 2)
    prompts = np.random.default_rng(0).integers(1, model.config.vocab_size, (batch, PROMPT)).astype(np.int32)
    one, laned = runner(graphdef, params, prompts, 1), runner(graphdef, params, prompts, n)
    times: dict[str, list[float]] = {"one": [], "laned": []}
    with OtherCpu() as other:
        for _ in range(repeats):
            elapsed, tokens_one = one()
            times["one"].append(elapsed)
            elapsed, tokens_laned = laned()
            times["laned"].append(elapsed)
    t_one, t_laned = (float(np.median(times[k])) for k in ("one", "laned"))
    print(f"[{case}] {decode_step_weight_bytes(model.config) / 2**20:.1f} MiB of weights a step; prompt {PROMPT}, "
          f"{NEW} new tokens, medians of {repeats}: one program {batch * NEW / t_one:.0f} tok/s, {n} lanes "
          f"{batch * NEW / t_laned:.0f} tok/s: {t_one / t_laned:.2f}x (default rule: "
          f"{decode_lanes(model.config, 'cpu', batch)} lanes); greedy tokens identical: "
          f"{np.mean(tokens_one == tokens_laned):.1%}; {other.line()}", flush=True)
    return t_one / t_laned


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny:8,tiny:16,tiny:32,tiny:64,tiny:128,medium:16,medium:64")
    parser.add_argument("--lanes", type=int, default=0, help="lanes to compare with one (0: the default rule, >= 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per side (interleaved; medians)")
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; at the start: {load_line()}",
          flush=True)
    ratios = {case: run_case(case, args.lanes or None, args.repeats) for case in args.cases.split(",")}
    print("RATIO lanes/one program: " + ", ".join(f"{c}={r:.2f}x" for c, r in ratios.items()))


if __name__ == "__main__":
    main()
