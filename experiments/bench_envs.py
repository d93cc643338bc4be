"""Sokoban throughput: our vmapped JAX steps and host level generation vs gym-sokoban, same process.

    python experiments/bench_envs.py [--batch 1024] [--steps 200] [--levels 400] [--repeats 3]

Step throughput: a jitted `lax.scan` of random actions over a batch of 6x6 episodes (gymnax
`step`, auto-reset included) vs gym-sokoban's `SokobanEnv.step` in a Python loop (the env RAGEN
wraps; RAGEN calls it with the default rgb_array observation; the tiny mode is shown too).
Level generation: our `generate_level` (cold, no cache) vs gym-sokoban's `generate_room`, both
seeded per level like RAGEN's `all_seed`. Every measurement runs --repeats times, interleaved with the
others, and prints its median, with the load at the start and the CPU other processes used meanwhile. The
last line prints the ratios. (The two sides step random actions: there is no common result to compare.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from envs.sokoban import Sokoban  # noqa: E402
from envs.sokoban.generator import GeneratorConfig, generate_level  # noqa: E402
from experiments.quiet import OtherCpu, load_line  # noqa: E402


def import_gym_sokoban():
    """gym-sokoban's modules, or None when it is not installed / does not import."""
    spec = importlib.util.find_spec("gym_sokoban")
    if spec is None:
        return None
    if "pkg_resources" not in sys.modules:  # removed from recent setuptools; gym-sokoban only needs this helper
        stub = types.ModuleType("pkg_resources")
        stub.resource_filename = lambda pkg, path: os.path.join(os.path.dirname(importlib.util.find_spec(pkg).origin), path)
        sys.modules["pkg_resources"] = stub
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from gym_sokoban.envs import room_utils, sokoban_env
        return room_utils, sokoban_env
    except Exception as e:  # noqa: BLE001
        print(f"gym-sokoban does not import: {e}")
        return None


def ours_steps_runner(batch: int, steps: int):
    """() -> steps/s of one jitted scan of `steps` random actions over `batch` episodes (compiled here)."""
    env = Sokoban(bank_size=1024)
    params = env.default_params

    @jax.jit
    def rollout(key):
        key, reset_key = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, batch), params)

        def body(carry, _):
            state, key, total = carry
            key, k_act, k_step = jax.random.split(key, 3)
            actions = jax.random.randint(k_act, (batch,), 0, 4)
            _, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, batch), state, actions, params)
            return (state, key, total + reward.sum()), None

        (_, _, total), _ = jax.lax.scan(body, (state, key, jnp.float32(0)), None, length=steps)
        return total

    rollout(jax.random.PRNGKey(0)).block_until_ready()  # compile

    def run() -> float:
        start = time.perf_counter()
        rollout(jax.random.PRNGKey(1)).block_until_ready()
        return batch * steps / (time.perf_counter() - start)
    return run


def bench_gym_steps(sokoban_env, steps: int, mode: str) -> float:
    random.seed(0)
    np.random.seed(0)
    env = sokoban_env.SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=100, reset=False)
    env.reset(render_mode=mode)
    rng = np.random.default_rng(0)
    actions = rng.integers(1, 5, steps)
    start = time.perf_counter()
    for a in actions:
        _, _, done, _ = env.step(int(a), observation_mode=mode)
        if done:
            env.reset(render_mode=mode)
    return steps / (time.perf_counter() - start)


def bench_ours_generation(levels: int, cfg: GeneratorConfig) -> float:
    start = time.perf_counter()
    for seed in range(levels):
        generate_level(seed, cfg)
    return levels / (time.perf_counter() - start)


def bench_gym_generation(room_utils, levels: int, cfg: GeneratorConfig) -> float:
    made, seed = 0, 0
    start = time.perf_counter()
    while made < levels:
        random.seed(seed)
        np.random.seed(seed)
        seed += 1
        try:
            room_utils.generate_room(dim=cfg.dim_room, num_steps=cfg.walk_steps, num_boxes=cfg.num_boxes)
            made += 1
        except (RuntimeError, RuntimeWarning):
            pass  # a failed seed costs time too, as in RAGEN's retrying reset
    return levels / (time.perf_counter() - start)


def interleaved(calls: dict, repeats: int) -> tuple[dict[str, float], str]:
    """Median of each named () -> rate call, alternating call by call `repeats` times; and the other-CPU line."""
    rates = {name: [] for name in calls}
    with OtherCpu() as other:
        for _ in range(repeats):
            for name, call in calls.items():
                rates[name].append(call())
    return {name: float(np.median(r)) for name, r in rates.items()}, other.line()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--levels", type=int, default=400)
    parser.add_argument("--baseline-steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; batch {args.batch}, {args.steps} steps; "
          f"medians of {args.repeats} interleaved repeats; at the start: {load_line()}", flush=True)
    simple, larger = GeneratorConfig((6, 6), 1, 300), GeneratorConfig((8, 8), 2, 10)
    calls = {"ours step": ours_steps_runner(args.batch, args.steps),
             "ours gen 6x6": lambda: bench_ours_generation(args.levels, simple),
             "ours gen 8x8": lambda: bench_ours_generation(max(args.levels // 2, 1), larger)}
    gym = import_gym_sokoban()
    if gym is not None:
        room_utils, sokoban_env = gym
        calls.update({"gym step": lambda: bench_gym_steps(sokoban_env, args.baseline_steps, "rgb_array"),
                      "gym step tiny": lambda: bench_gym_steps(sokoban_env, args.baseline_steps, "tiny_rgb_array"),
                      "gym gen 6x6": lambda: bench_gym_generation(room_utils, args.levels, simple)})
    rate, other = interleaved(calls, args.repeats)
    print(other)
    print(f"ours   vmapped Sokoban step: {rate['ours step']:,.0f} steps/s")
    print(f"ours   level generation 6x6/1 box: {rate['ours gen 6x6']:,.0f} levels/s (cold, no cache)")
    print(f"ours   level generation 8x8/2 boxes: {rate['ours gen 8x8']:,.0f} levels/s")
    if gym is None:
        print("baseline unavailable: pip install gym-sokoban to compare (no ratios)")
        return
    print(f"gym-sokoban step (rgb_array obs, as RAGEN calls it): {rate['gym step']:,.0f} steps/s")
    print(f"gym-sokoban step (tiny_rgb_array obs): {rate['gym step tiny']:,.0f} steps/s")
    print(f"gym-sokoban generate_room 6x6/1 box: {rate['gym gen 6x6']:,.0f} levels/s")
    step, tiny = rate["ours step"] / rate["gym step"], rate["ours step"] / rate["gym step tiny"]
    print(f"RATIOS ours / gym-sokoban rate (above 1: ours faster): step throughput {step:,.0f}x "
          f"(vs tiny obs {tiny:,.0f}x; "
          f"target >= 100x); level generation {rate['ours gen 6x6'] / rate['gym gen 6x6']:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
