"""Cost of one RAGEN-2 diagnostics call (MI / H(Z|X) by cross-scoring) at RAGEN's defaults, on the CPU.

The trainer calls `collapse_metrics` at step 1 and every `diagnostics.every` steps (RAGEN: every 5 steps, 64
sampled pairs per sampling). This times that call, both samplings, on synthetic rollouts shaped like RAGEN's
Sokoban step (8 groups x 16 episodes, 5 turns, full-history context: the turn-t prompt is the system prompt plus
t earlier turns; reasonings of ~60 tokens) for a model of the tiny preset's shapes and one of Qwen2.5-0.5B's
(random weights: the cost does not depend on them). Besides seconds it prints the tokens the call runs through
the model (the prompts once each, then every (reasoning, prompt) pair's reasoning) against the tokens of the
step it diagnoses (the rollout's prefill and decode, and the update's 3 forward-equivalents over the rows), so
the share of a step holds on any machine where both are compute-bound; `--step-seconds` turns it into seconds.
With fewer than 64 pairs (a 0.5B call at 64 takes on the order of an hour on a 2-core CPU) it also prints the
cost at 64 pairs, from the tokens that call would score and the rate measured.

    python experiments/bench/bench_diagnostics.py [--models tiny,qwen2.5-0.5b] [--pairs 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.diagnostics import CollapseConfig, collapse_metrics, cross_score  # noqa: E402
from ragen_jax.diagnostics.collapse import RolloutPairs  # noqa: E402
from ragen_jax.diagnostics.pairs import step_rng  # noqa: E402
from ragen_jax.models import CausalLM, tiny_config  # noqa: E402

MODELS = {  # name -> tiny_config overrides
    "tiny": dict(),
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
                         num_kv_heads=2, head_dim=64, rope_theta=1_000_000.0, max_position_embeddings=32768),
}
GROUPS, GROUP_SIZE, TURNS = 8, 16, 5  # RAGEN's Sokoban step
SYSTEM, OBSERVATION, RESPONSE, REASONING = 330, 60, 100, 60  # tokens: first prompt, per-turn state, answer, thinking


def ragen_shaped_pairs(vocab: int, seed: int = 0) -> tuple[RolloutPairs, int]:
    """(pairs of one synthetic RAGEN Sokoban step, tokens its rollout fed and generated). Episodes of a group
    share their first prompt; later prompts hold the episode's own earlier turns, so they are all distinct."""
    rng = np.random.default_rng(seed)
    tokens = lambda n: rng.integers(10, vocab, int(n)).tolist()  # noqa: E731
    first = [tokens(SYSTEM) for _ in range(GROUPS)]
    turn_prompts, turn_reasonings, group_ids, step_tokens = [], [], [], 0
    for g in range(GROUPS):
        for _ in range(GROUP_SIZE):
            prompt, prompts, reasonings = list(first[g]), [], []
            for t in range(TURNS):
                if t:
                    prompt = prompt + tokens(RESPONSE + OBSERVATION)
                prompts.append(prompt)
                reasonings.append(tokens(rng.integers(REASONING // 2, 2 * REASONING)))
            turn_prompts.append(prompts)
            turn_reasonings.append(reasonings)
            group_ids.append(g)
            step_tokens += len(prompts[-1]) + RESPONSE  # the cache keeps the context: each token is fed once
    pairs = RolloutPairs(first_turn_prompts=[p[0] for p in turn_prompts],
                         first_turn_reasonings=[z[0] for z in turn_reasonings], group_ids=group_ids,
                         turn_prompts=turn_prompts, turn_reasonings=turn_reasonings)
    return pairs, step_tokens


def scored_tokens(pairs: RolloutPairs, config: CollapseConfig) -> int:
    """Tokens one call runs through the model: each sampled prompt once, then each (reasoning, prompt) pair's
    reasoning plus the prompt's last token (cross_score's prefix caching)."""
    from ragen_jax.diagnostics.pair_draws import first_turn_pairs, trajectory_uniform_pairs

    rng = step_rng(5)
    total = 0
    samples = [trajectory_uniform_pairs(pairs.turn_prompts, pairs.turn_reasonings, rng, config.num_samples),
               first_turn_pairs(pairs.first_turn_prompts, pairs.first_turn_reasonings, pairs.group_ids, rng,
                                config.num_samples)]
    for s in samples:
        total += sum(len(p) for p in s.prompts) + len(s.prompts) * sum(len(z) + 1 for z in s.reasonings)
    return total


def bench_model(name: str, args) -> None:
    model = CausalLM(tiny_config(**MODELS[name]), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    n_params = sum(x.size for x in __import__("jax").tree.leaves(params))
    pairs, step_tokens = ragen_shaped_pairs(model.config.vocab_size)
    config = CollapseConfig(compute_freq=5, num_samples=args.pairs)
    score = functools.partial(cross_score, graphdef, params, pad_id=0, batch_size=args.batch_size)
    call = lambda: collapse_metrics(pairs, score, config, step_rng(5))[0]  # noqa: E731
    start = time.perf_counter()
    metrics = call()  # compiles
    first = time.perf_counter() - start
    times = {"first_turn": [], "trajectory": []}
    with OtherCpu() as other:
        for _ in range(args.repeats):
            m = call()
            times["first_turn"].append(m["timing_s/collapse_first_turn_step"])
            times["trajectory"].append(m["timing_s/collapse_multi_turn_step"])
    diag = scored_tokens(pairs, config)
    row_tokens = GROUPS * GROUP_SIZE * (SYSTEM + TURNS * (RESPONSE + OBSERVATION))  # full context: a row an episode
    step = step_tokens + 3 * row_tokens
    total = sum(float(np.median(v)) for v in times.values())
    print(f"[{name}] {n_params / 1e6:.1f}M params; {args.pairs} pairs per sampling; first call (compiling) "
          f"{first:.1f} s; then medians of {args.repeats}: first-turn {np.median(times['first_turn']):.2f} s, "
          f"trajectory {np.median(times['trajectory']):.2f} s, both {total:.2f} s per call "
          f"({metrics.get('collapse_first_turn_sample/num_prompts', float('nan')):.0f} first-turn prompt columns)")
    print(f"[{name}] tokens through the model: diagnostics {diag:,} per call; the RAGEN step it diagnoses "
          f"{step:,} (rollout {step_tokens:,} + update 3 x {row_tokens:,}): one call = "
          f"{diag / step:.1%} of a step's tokens, {diag / (5 * step):.1%} of the 5 steps it covers "
          f"at every=5; {other.line()}", flush=True)
    if args.pairs != 64:  # the call's cost grows with the tokens it scores: RAGEN's default, by the measured rate
        at64 = scored_tokens(pairs, CollapseConfig(compute_freq=5, num_samples=64))
        print(f"[{name}] at RAGEN's 64 pairs: {at64:,} tokens, about {total * at64 / diag:.0f} s per call at the "
              f"rate measured here ({diag / total:,.0f} scored tokens/s)")
    if args.step_seconds:
        print(f"[{name}] with a {args.step_seconds:.0f} s step: {total / (5 * args.step_seconds):.1%} of the time "
              f"at every=5")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,qwen2.5-0.5b")
    parser.add_argument("--pairs", type=int, default=64, help="diagnostics.max_pairs (RAGEN: 64)")
    parser.add_argument("--batch-size", type=int, default=32, help="diagnostics.batch_size: pairs per forward")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="a measured step time, for the share")
    args = parser.parse_args(argv)
    print(f"at the start: {load_line()}", flush=True)
    for name in args.models.split(","):
        bench_model(name, args)


if __name__ == "__main__":
    main()
