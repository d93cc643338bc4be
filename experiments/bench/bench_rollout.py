"""Rollout wall time: the continuous engine vs the lockstep engine, same model, seeds and trajectories.

Two workloads, each played by both engines on the same compiled-once model (a warm-up run per engine first,
then `--repeats` timed runs each, interleaved; medians):

  ragen_shaped  RAGEN's Sokoban rollout: 8 groups x 16 CoordSokoban episodes, 5 turns, response_length 400,
                RAGEN's prompts with thinking, full-history context, max_model_len 3600. The model has the tiny
                preset's architecture (its compute per token) with weights set so that every step stops with
                probability p = ln 2 / 100 at temperature 1: responses have a median near 100 tokens and a tail to
                400 (about 6% truncated), as real runs spread them; the tokens it writes are uniform over the rest
                of the vocabulary (their actions are invalid, so every episode plays its 5 turns).
  tiny          The quickstart's rollout (configs/sokoban.py:tiny: 16 x 8 SimpleSokoban, compact prompt,
                response_length 24, single-turn context) with the randomly initialised tiny model, or the
                model exported by a quickstart run (--tiny_model runs/quickstart/hf_export).

For each engine it prints wall seconds (median, min, max), generated tokens, decode steps per generated token
(the waste: slot-steps the decode loop ran per token it kept; 1.00 is none) and whether its trajectories equal
the lockstep engine's token for token. The continuous engine runs with each `--slots` value (0 = the default,
`rollout.continuous.default_slots` of the workload) and each `--lanes` value (0 = the sampler's default decode lanes); the lockstep engine, the
reference, decodes in one lane.

    .venv/bin/python experiments/bench/bench_rollout.py [--repeats 3] [--slots 0,32] [--lanes 1,0] [--chunk 8] \
        [--workloads ragen_shaped,tiny]

Last line: RATIO continuous/lockstep wall: ragen_shaped=N.NNx tiny=N.NNx (lockstep seconds / continuous seconds,
the continuous engine at its best slot count, which the lines above name).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.rollout import RolloutConfig, LockstepEngine, group_seeds  # noqa: E402
from ragen_jax.rollout.continuous import ContinuousEngine  # noqa: E402
from ragen_jax.trainer import setup as setup_lib  # noqa: E402

MEDIAN_RESPONSE = 100  # tokens: the stopping model's median response length


def stopping_model(median: int = MEDIAN_RESPONSE):
    """(graphdef, params, tokenizer): the tiny architecture whose every step stops with p = ln 2 / median.

    The blocks' output projections are zero, so the last hidden state is the normed input embedding; every
    embedding is `e_0` and the end-of-turn ones `(1 + d) e_0`, so all logits are equal except the end-of-turn
    tokens', which are higher by sqrt(hidden) * d. The compute per token is the tiny model's.
    """
    from ragen_jax.models.tiny import make_tiny_model

    model, tokenizer = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    cfg = model.config
    vocab, eos = len(tokenizer), list(tokenizer.eos_token_ids)
    p = math.log(2) / median
    gap = math.log(p * (vocab - len(eos)) / (len(eos) * (1 - p)))  # softmax: len(eos) e^gap / (rest + ...) = p
    embedding = np.zeros((cfg.vocab_size, cfg.hidden_size), np.float32)
    embedding[:, 0] = 1.0
    embedding[eos, 0] = 1.0 + gap / math.sqrt(cfg.hidden_size)

    def set_weights(path, x):
        name = jax.tree_util.keystr(path)
        if "embed_tokens" in name:
            return jnp.asarray(embedding, x.dtype)
        if "o_proj" in name or "down_proj" in name:
            return jnp.zeros_like(x)
        return x

    return graphdef, jax.tree_util.tree_map_with_path(set_weights, params), tokenizer


def tiny_model(path: str | None):
    """(graphdef, params, tokenizer): a model folder (an HF export) or the randomly initialised tiny model."""
    if path:
        from ragen_jax.models.hf import load_model, load_tokenizer

        model, tokenizer = load_model(path), load_tokenizer(path)
    else:
        from ragen_jax.models.tiny import make_tiny_model

        model, tokenizer = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    return graphdef, params, tokenizer


def workload(name: str, args):
    """(graphdef, params, tokenizer, rollout config, env batch, seeds, group ids) of a workload."""
    from configs.sokoban import get_config

    if name == "ragen_shaped":
        graphdef, params, tokenizer = stopping_model()
        cfg = get_config(None)
        rollout = RolloutConfig(max_turn=5, response_length=400, max_model_len=3600, prompt_style="ragen",
                                context_mode="full", enable_think=True, temperature=1.0)
    elif name == "tiny":
        graphdef, params, tokenizer = tiny_model(args.tiny_model)
        cfg = get_config("tiny")
        rollout = RolloutConfig.of(cfg)
    else:
        raise SystemExit(f"unknown workload {name!r}: ragen_shaped or tiny")
    batch = cfg.env.groups * cfg.env.group_size
    env = setup_lib.env_batch(cfg.env, cfg.env.name, batch)
    seeds, group_ids = group_seeds(cfg.env.train_seed, cfg.env.groups, cfg.env.group_size)
    return graphdef, params, tokenizer, rollout, env, seeds, group_ids


def trajectories(result) -> list:
    """Every episode's response tokens, turn by turn (what both engines must agree on)."""
    return [[tuple(np.asarray(r.response_tokens).tolist()) for r in ep.history] for ep in result.episodes]


def bench_workload(name: str, args) -> dict:
    graphdef, params, tokenizer, rollout, env, seeds, group_ids = workload(name, args)
    batch = len(seeds)
    engines = {"lockstep": LockstepEngine(graphdef, tokenizer, rollout, batch, lanes=1)}
    for slots in args.slots:
        for lanes in args.lanes:
            engine = ContinuousEngine(graphdef, tokenizer, rollout, batch, slots=slots, chunk=args.chunk, lanes=lanes)
            engines[f"continuous[slots={engine.slots},lanes={engine.sampler.lanes}]"] = engine
    key = jax.random.key(0)
    reference, out = None, {}
    for label, engine in engines.items():  # warm-up: compile every program, record the trajectories
        t0 = time.perf_counter()
        result = engine.run(params, env, seeds, group_ids, key, tag=name)
        tokens = sum(len(t) for ep in trajectories(result) for t in ep)
        reference = reference if reference is not None else trajectories(result)
        out[label] = dict(times=[], warmup=time.perf_counter() - t0, tokens=tokens,
                          waste=result.extras["decode_steps_per_token"],
                          same=trajectories(result) == reference,
                          response=result.metrics["response_length_per_turn"])
        print(f"  [{name}] warm-up {label}: {out[label]['warmup']:.1f} s, {tokens} tokens", flush=True)
    with OtherCpu() as other:
        for _ in range(args.repeats):  # interleaved timed runs
            for label, engine in engines.items():
                programs = engine.sampler.num_programs
                t0 = time.perf_counter()
                engine.run(params, env, seeds, group_ids, key, tag=name)
                out[label]["times"].append(time.perf_counter() - t0)
                print(f"  [{name}] {label}: {out[label]['times'][-1]:.2f} s", flush=True)
                if engine.sampler.num_programs != programs:
                    extra = engine.sampler.num_programs - programs
                    print(f"  warning: {label} compiled {extra} program(s) while timed")
    print(f"\n{name}: {batch} episodes, {rollout.max_turn} turns, response_length {rollout.response_length}, "
          f"context {rollout.context_mode}, prompt {rollout.prompt_style}; mean response "
          f"{out['lockstep']['response']:.1f} tokens")
    base = statistics.median(out["lockstep"]["times"])
    for label, r in out.items():
        med = statistics.median(r["times"])
        r["median"] = med
        print(f"  {label:24s} wall {med:7.2f} s (min {min(r['times']):.2f}, max {max(r['times']):.2f}; warm-up "
              f"{r['warmup']:.1f}) | {r['tokens']} tokens, {r['tokens'] / med:8.0f} tok/s | decode steps per token "
              f"{r['waste']:.2f} | same trajectories as lockstep: {r['same']} | lockstep/this {base / med:.2f}x")
    print(f"  {other.line()}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="ragen_shaped,tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slots", default="0,32", help="continuous engine slot counts to try (0 = the default: rollout.continuous.default_slots)")
    parser.add_argument("--chunk", type=int, default=8, help="continuous engine decode steps per chunk")
    parser.add_argument("--lanes", default="0", help="continuous engine decode lanes to try (0 = the sampler's "
                        "default); the lockstep reference decodes in one")
    parser.add_argument("--tiny_model", default=None, help="model folder for the tiny workload (default: random tiny)")
    args = parser.parse_args(argv)
    args.slots = [int(s) for s in args.slots.split(",")]
    args.lanes = [int(n) for n in args.lanes.split(",")]
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cores; at the start: {load_line()}",
          flush=True)
    ratios = {}
    for name in args.workloads.split(","):
        out = bench_workload(name, args)
        best = min((label for label in out if label != "lockstep"), key=lambda label: out[label]["median"])
        if not all(r["same"] for r in out.values()):
            print(f"  WARNING: {name}: an engine's trajectories differ from the lockstep engine's")
        ratios[name] = out["lockstep"]["median"] / out[best]["median"]
        print(f"  best continuous: {best}")
    print("RATIO continuous/lockstep wall: " + " ".join(f"{k}={v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
