"""Rollout cost on CPU with the tiny model: generate / env / host glue, and per-turn time vs turn.

Plays `groups x group_size` Sokoban episodes for `max_turn` turns (full-history context) twice per
setting, after a warm-up run that compiles every program: once with KV-cache continuation (each
turn prefills only the new tokens) and once as the baseline that re-prefills the whole context
every turn (the sampler's returned cache_lens are reset to 0, so the engine feeds everything).

    /work/venv/bin/python experiments/bench_rollout.py [--envs SimpleSokoban,CoordSokoban]
        [--response_lengths 64,32] [--groups 8 --group_size 16 --max_turn 5] [--profile]

Last line: turn-5/turn-1 time with and without continuation and the no-cache/cache rollout ratio.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from envs.batch import make_env_batch  # noqa: E402
from ragen_jax.models.tiny import make_tiny_model  # noqa: E402
from ragen_jax.rollout import RolloutConfig, RolloutEngine, group_seeds  # noqa: E402
from ragen_jax.sampling import SampleOutput, Sampler, bucket_length  # noqa: E402

TINY_RESPONSE_LENGTH = 32  # configs/base.py apply_tiny: rollout.response_length


class TimedSampler:
    """Wraps the engine's Sampler: times each generate call (blocking) and can drop the cache.

    With `continue_cache=False` every call reports cache_lens 0, so the engine feeds the whole
    context on the next turn: the no-continuation baseline on the same compiled programs.
    """

    def __init__(self, sampler, *, continue_cache: bool):
        self.sampler, self.continue_cache = sampler, continue_cache
        self.calls: list[tuple[float, int]] = []  # (seconds, prefill width) per turn

    def init_cache(self):
        return self.sampler.init_cache()

    def generate(self, params, new_tokens, new_lens, key, config, *, cache, cache_lens, active):
        t0 = time.perf_counter()
        out = self.sampler.generate(params, new_tokens, new_lens, key, config, cache=cache,
                                    cache_lens=cache_lens, active=active)
        jax.block_until_ready(out.tokens)
        self.calls.append((time.perf_counter() - t0, int(np.max(np.where(active, new_lens, 0)))))
        if not self.continue_cache:
            out = out.replace(cache_lens=jnp.zeros_like(out.cache_lens))
        return out


class ScriptedSampler(TimedSampler):
    """No model: every active row "samples" `response_length` random non-eos tokens.

    Used for a dry run that measures the longest context (to size the KV cache) and the prefill
    widths of both modes (to compile every prefill bucket before timing).
    """

    def __init__(self, batch: int, tokenizer, *, continue_cache: bool):
        super().__init__(None, continue_cache=continue_cache)
        self.batch, self.pad = batch, tokenizer.pad_token_id
        self.allowed = np.setdiff1d(np.arange(len(tokenizer)), list(tokenizer.eos_token_ids) + [self.pad])
        self.rng = np.random.default_rng(0)
        self.longest = 0  # longest context fed so far (cached + new tokens)

    def init_cache(self):
        return None, np.zeros(self.batch, np.int32)

    def generate(self, params, new_tokens, new_lens, key, config, *, cache, cache_lens, active):
        n = config.max_new_tokens
        self.calls.append((0.0, int(np.max(np.where(active, new_lens, 0)))))
        self.longest = max(self.longest, int(np.max(np.where(active, cache_lens + new_lens, 0))))
        tokens = np.where(active[:, None], self.rng.choice(self.allowed, (self.batch, n)), self.pad)
        lengths = np.where(active, n, 0).astype(np.int32)
        lens = cache_lens + new_lens + lengths - 1 if self.continue_cache else np.zeros_like(cache_lens)
        zeros = np.zeros((self.batch, n), np.float32)
        return SampleOutput(tokens=tokens.astype(np.int32), lengths=lengths, logprobs=zeros,
                            raw_logprobs=zeros, finish_reason=np.zeros(self.batch, np.int32), cache=None,
                            cache_lens=np.where(active, lens, cache_lens).astype(np.int32))


def dry_run(graphdef, tokenizer, env, cfg: RolloutConfig, seeds, group_ids) -> tuple[int, dict, float]:
    """(longest context + response_length, prefill widths per mode, host seconds of the scripted rollout)."""
    engine = RolloutEngine(graphdef, tokenizer, cfg, len(seeds))
    widths, longest, host = {}, 0, 0.0
    for name, continue_cache in (("cache", True), ("no_cache", False)):
        engine.sampler = scripted = ScriptedSampler(len(seeds), tokenizer, continue_cache=continue_cache)
        t0 = time.perf_counter()
        engine.run(None, env, seeds, group_ids, jax.random.key(0), tag="dry")
        host = host or time.perf_counter() - t0  # the cached mode's
        widths[name] = [w for _, w in scripted.calls]
        longest = max(longest, scripted.longest)
    return longest + cfg.response_length, widths, host


def warm_prefill(sampler: Sampler, params, widths, sampling, seen: set[int]) -> None:
    """Compile (and run once) the prefill program of every bucket in `widths` not in `seen`."""
    for bucket in sorted({bucket_length(w) for w in widths} - seen):
        cache, lens = sampler.init_cache()
        width = min(bucket, sampler.cache_size - sampling.max_new_tokens)
        tokens = np.zeros((sampler.batch_size, width), np.int32)
        out = sampler.generate(params, tokens, np.full(sampler.batch_size, width, np.int32),
                               jax.random.key(1), sampling, cache=cache, cache_lens=lens)
        jax.block_until_ready(out.tokens)
        seen.add(bucket)


def bench_one(env, env_name: str, response_length: int, args, graphdef, params, tokenizer) -> dict:
    """Dry run, warm-up, then one timed rollout with and one without cache continuation."""
    batch = args.groups * args.group_size
    seeds, group_ids = group_seeds(10000, args.groups, args.group_size)
    cfg = RolloutConfig(max_turn=args.max_turn, response_length=response_length,
                        max_model_len=args.max_model_len or 4096, context_mode="full")
    need, widths, host = dry_run(graphdef, tokenizer, env, cfg, seeds, group_ids)
    if not args.max_model_len:  # smallest multiple of 128 that never truncates (decode cost grows with it)
        cfg = dataclasses.replace(cfg, max_model_len=-(-need // 128) * 128)
    engine = RolloutEngine(graphdef, tokenizer, cfg, batch)
    shared = engine.sampler
    key = jax.random.key(0)
    out = {"cache_size": cfg.max_model_len, "need": need, "dry_host": host}
    seen: set[int] = set()
    for name, continue_cache in (("cache", True), ("no_cache", False)):
        if continue_cache:  # a full warm-up rollout: compiles decode, env, and the cache-mode buckets
            engine.sampler = warm = TimedSampler(shared, continue_cache=True)
            engine.run(params, env, seeds, group_ids, key, tag=env_name)
            seen |= {bucket_length(w) for _, w in warm.calls}
        warm_prefill(shared, params, widths[name], cfg.sampling(tokenizer), seen)
        programs = shared.num_programs
        engine.sampler = timed = TimedSampler(shared, continue_cache=continue_cache)
        profiler = cProfile.Profile() if args.profile and continue_cache else None
        if profiler:
            profiler.enable()
        t0 = time.perf_counter()
        result = engine.run(params, env, seeds, group_ids, key, tag=env_name)
        total = time.perf_counter() - t0
        if profiler:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
            print(text.getvalue())
        if shared.num_programs != programs:
            print(f"  warning: {shared.num_programs - programs} program(s) compiled during the timed run")
        seen |= {bucket_length(w) for _, w in timed.calls}
        out[name] = dict(total=total, timing=result.timing, turns=np.asarray(result.extras["turn_times"]),
                         gen_turns=[t for t, _ in timed.calls], widths=[w for _, w in timed.calls],
                         resp=result.metrics["response_length"], samples=result.batch.num_samples,
                         length=result.batch.length,
                         truncated=sum(ep.history_start > 0 for ep in result.episodes))
    return out


def _report(env_name: str, response_length: int, res: dict) -> None:
    c = res["cache"]
    print(f"\n{env_name}, response_length {response_length}: KV cache {res['cache_size']} "
          f"(longest context + response {res['need']}), {len(c['turns'])} turns, mean response "
          f"{c['resp']:.1f} tokens, batch {c['samples']} x {c['length']}, truncated episodes {c['truncated']}; "
          f"scripted (model-free) rollout {res['dry_host']:.2f} s")
    for name in ("cache", "no_cache"):
        r = res[name]
        t = r["timing"]
        total = r["total"]
        print(f"  {name:8s} rollout {total:7.2f} s | generate {t['generate']:7.2f} ({t['generate'] / total:5.1%}) "
              f"env {t['env']:6.2f} ({t['env'] / total:5.1%}) glue {t['glue']:6.2f} ({t['glue'] / total:5.1%})")
        print("           turn s   " + " ".join(f"{x:6.2f}" for x in r["turns"])
              + f"   last/first {r['turns'][-1] / r['turns'][0]:.2f}  last/second {r['turns'][-1] / r['turns'][1]:.2f}")
        print("           gen s    " + " ".join(f"{x:6.2f}" for x in r["gen_turns"]))
        print("           prefill  " + " ".join(f"{w:6d}" for w in r["widths"]) + "  tokens (widest row)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="SimpleSokoban,CoordSokoban")
    parser.add_argument("--response_lengths", default=f"64,{TINY_RESPONSE_LENGTH}")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group_size", type=int, default=16)
    parser.add_argument("--max_turn", type=int, default=5)
    parser.add_argument("--max_model_len", type=int, default=0,
                        help="KV cache size; 0 = the smallest multiple of 128 that never truncates")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed cached rollouts")
    args = parser.parse_args()
    if args.max_turn < 2:
        parser.error("--max_turn must be >= 2 to compare turns.")

    model, tokenizer = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; tiny model "
          f"{sum(x.size for x in jax.tree.leaves(params)) / 1e6:.2f}M params; "
          f"{args.groups}x{args.group_size} episodes, {args.max_turn} turns, full-history context", flush=True)
    summary = []
    for env_name in args.envs.split(","):
        env = make_env_batch(env_name, args.groups * args.group_size)  # one env: its jitted fns compile once
        for response_length in map(int, args.response_lengths.split(",")):
            res = bench_one(env, env_name, response_length, args, graphdef, params, tokenizer)
            _report(env_name, response_length, res)
            c, n = res["cache"], res["no_cache"]
            summary.append((env_name, response_length, c["turns"][-1] / c["turns"][0],
                            n["turns"][-1] / n["turns"][0], n["total"] / c["total"],
                            c["timing"]["glue"] / c["total"]))
            sys.stdout.flush()
    print()
    for env_name, r, flat, grow, speedup, glue in summary:
        print(f"{env_name} R={r}: turn-{args.max_turn}/turn-1 cache {flat:.2f}, no-cache {grow:.2f}; "
              f"no-cache/cache rollout time {speedup:.2f}; host glue {glue:.1%} of the cached rollout")
    print("ratios: " + "; ".join(f"{e}/R{r} turn{args.max_turn}/turn1 cache={f:.2f} no_cache={g:.2f} "
                                 f"no_cache/cache={s:.2f} glue={gl:.1%}"
                                 for e, r, f, g, s, gl in summary))


if __name__ == "__main__":
    main()
