"""Sokoban throughput: our vmapped JAX steps and host level generation vs gym-sokoban, same process.

    python experiments/bench_envs.py [--batch 1024] [--steps 200] [--levels 400]

Step throughput: a jitted `lax.scan` of random actions over a batch of 6x6 episodes (gymnax
`step`, auto-reset included) vs gym-sokoban's `SokobanEnv.step` in a Python loop (the env RAGEN
wraps; RAGEN calls it with the default rgb_array observation; the tiny mode is shown too).
Level generation: our `generate_level` (cold, no cache) vs gym-sokoban's `generate_room`, both
seeded per level like RAGEN's `all_seed`. The last line prints the ratios.
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


def bench_ours_steps(batch: int, steps: int) -> float:
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
    start = time.perf_counter()
    rollout(jax.random.PRNGKey(1)).block_until_ready()
    return batch * steps / (time.perf_counter() - start)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--levels", type=int, default=400)
    parser.add_argument("--baseline-steps", type=int, default=3000)
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; batch {args.batch}, {args.steps} steps")

    ours_steps = bench_ours_steps(args.batch, args.steps)
    print(f"ours   vmapped Sokoban step: {ours_steps:,.0f} steps/s")
    simple, larger = GeneratorConfig((6, 6), 1, 300), GeneratorConfig((8, 8), 2, 10)
    ours_gen = bench_ours_generation(args.levels, simple)
    print(f"ours   level generation 6x6/1 box: {ours_gen:,.0f} levels/s (cold, no cache)")
    print(f"ours   level generation 8x8/2 boxes: {bench_ours_generation(args.levels // 2, larger):,.0f} levels/s")

    gym = import_gym_sokoban()
    if gym is None:
        print("baseline unavailable: pip install gym-sokoban to compare (no ratios)")
        return
    room_utils, sokoban_env = gym
    gym_steps = bench_gym_steps(sokoban_env, args.baseline_steps, "rgb_array")
    gym_tiny = bench_gym_steps(sokoban_env, args.baseline_steps, "tiny_rgb_array")
    print(f"gym-sokoban step (rgb_array obs, as RAGEN calls it): {gym_steps:,.0f} steps/s")
    print(f"gym-sokoban step (tiny_rgb_array obs): {gym_tiny:,.0f} steps/s")
    gym_gen = bench_gym_generation(room_utils, args.levels, simple)
    print(f"gym-sokoban generate_room 6x6/1 box: {gym_gen:,.0f} levels/s")
    print(f"RATIOS: step throughput {ours_steps / gym_steps:,.0f}x (vs tiny obs {ours_steps / gym_tiny:,.0f}x; "
          f"target >= 100x); level generation {ours_gen / gym_gen:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
