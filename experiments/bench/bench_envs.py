"""Sokoban throughput: our vmapped JAX steps and host level generation vs gym-sokoban, same process.

    python experiments/bench/bench_envs.py [--batch 1024] [--steps 100] [--levels 400] [--baseline-episodes 30]
                                     [--repeats 3]

Step throughput: both sides play the levels of seeds 0, 1, ... (RAGEN's level of each seed, from our generator)
with the same actions (one fixed [episodes, steps] draw), each episode until it is done (solved, or --steps
steps: the env's step cap). Ours: one jitted `lax.scan` of `step_level` over --batch episodes at once; gym-sokoban:
`SokobanEnv.step` in a Python loop over the first --baseline-episodes of them (the env RAGEN wraps; RAGEN calls it
with the default rgb_array observation; the tiny mode is shown too), its state set to the level as a reset would
leave it, so neither side's rate includes level generation. Rates count the steps each episode took. The two sides
must agree on every compared episode's return, length and final room, else the script exits 1 (the rates would
time different work).
Level generation: our `generate_level` (cold, no cache) vs gym-sokoban's `generate_room`, both
seeded per level like RAGEN's `all_seed`. Every measurement runs --repeats times, interleaved with the
others, and prints its median, with the load at the start and the CPU other processes used meanwhile. The
last line prints the ratios.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from envs.sokoban import Sokoban  # noqa: E402
from envs.sokoban.env import step_level  # noqa: E402
from envs.sokoban.generator import GeneratorConfig, generate_level  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402


def import_gym_sokoban():
    """gym-sokoban's modules, or None when it is not installed / does not import."""
    spec = importlib.util.find_spec("gym_sokoban")
    if spec is None:
        return None
    if "pkg_resources" not in sys.modules:  # removed from recent setuptools; gym-sokoban only needs this helper
        stub = types.ModuleType("pkg_resources")
        stub.resource_filename = lambda pkg, path: os.path.join(
            os.path.dirname(importlib.util.find_spec(pkg).origin), path)
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


def episode_actions(episodes: int, steps: int, seed: int = 0) -> np.ndarray:
    """[episodes, steps] int32 action ids 0..3 (Up, Down, Left, Right; gym-sokoban's push ids minus one)."""
    return np.random.default_rng(seed).integers(0, 4, (episodes, steps), dtype=np.int32)


def ours_steps_runner(env: Sokoban, actions: np.ndarray):
    """() -> (steps/s, result) of one jitted scan of `actions` [E, T] over the levels of seeds 0..E-1, each episode
    frozen once done (solved or `env.max_steps` steps). result: returns [E] float32, lengths [E] int32 (steps
    taken), rooms [E, H, W] int8 (final). Compiled here."""
    start = env.reset_from_seeds(range(actions.shape[0]))
    max_steps = env.max_steps

    @jax.jit
    def rollout(state, actions):
        def body(carry, action):  # action [E]
            state, live, ret, length = carry
            new, reward, _ = jax.vmap(step_level)(state, action)
            state = jax.tree.map(lambda n, o: jnp.where(live.reshape(live.shape + (1,) * (n.ndim - 1)), n, o),
                                 new, state)
            ret, length = ret + jnp.where(live, reward, 0.0), length + live.astype(jnp.int32)
            return (state, live & ~new.solved & (new.time < max_steps), ret, length), None

        e = actions.shape[0]
        init = (state, jnp.ones((e,), bool), jnp.zeros((e,), jnp.float32), jnp.zeros((e,), jnp.int32))
        (state, _, ret, length), _ = jax.lax.scan(body, init, actions.T)
        return ret, length, state.room

    device_actions = jnp.asarray(actions)
    jax.block_until_ready(rollout(start, device_actions))  # compile

    def run() -> tuple[float, dict[str, np.ndarray]]:
        t0 = time.perf_counter()
        out = jax.block_until_ready(rollout(start, device_actions))
        spent = time.perf_counter() - t0
        result = dict(zip(("returns", "lengths", "rooms"), (np.asarray(x) for x in out)))
        return float(result["lengths"].sum()) / spent, result
    return run


def gym_steps_runner(sokoban_env, fixed: np.ndarray, rooms: np.ndarray, actions: np.ndarray, max_steps: int,
                     mode: str):
    """() -> (steps/s, result) of gym-sokoban stepping each level (fixed, rooms [E, H, W]) with its row of
    `actions` [E, T] until done; result as `ours_steps_runner`'s."""
    env = sokoban_env.SokobanEnv(dim_room=tuple(fixed.shape[1:]), num_boxes=1, max_steps=max_steps, reset=False)

    def run() -> tuple[float, dict[str, np.ndarray]]:
        returns, lengths, finals = [], [], []
        t0 = time.perf_counter()
        for level_fixed, level_room, row in zip(fixed, rooms, actions):
            env.room_fixed, env.room_state = level_fixed.astype(int), level_room.astype(int)  # as reset leaves them
            env.player_position = np.argwhere(env.room_state == 5)[0]
            env.num_env_steps, env.boxes_on_target, env.reward_last = 0, int(np.sum(level_room == 3)), 0
            total, taken = 0.0, 0
            for a in row:
                _, reward, done, _ = env.step(int(a) + 1, observation_mode=mode)
                total, taken = total + reward, taken + 1
                if done:
                    break
            returns.append(total)
            lengths.append(taken)
            finals.append(env.room_state.copy())
        spent = time.perf_counter() - t0
        return sum(lengths) / spent, dict(returns=np.array(returns, np.float32), lengths=np.array(lengths, np.int32),
                                          rooms=np.array(finals, np.int8))
    return run


def step_mismatches(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> list[str]:
    """Where theirs' n episodes differ from ours' first n: steps taken, return (to 1e-4), final room."""
    found = []
    for i in range(len(theirs["lengths"])):
        if ours["lengths"][i] != theirs["lengths"][i]:
            found.append(f"episode {i}: {ours['lengths'][i]} steps (ours) vs {theirs['lengths'][i]} (gym-sokoban)")
        elif abs(float(ours["returns"][i]) - float(theirs["returns"][i])) > 1e-4:
            found.append(f"episode {i}: return {ours['returns'][i]:.4f} (ours) vs {theirs['returns'][i]:.4f}")
        elif not np.array_equal(ours["rooms"][i], theirs["rooms"][i]):
            found.append(f"episode {i}: the final rooms differ")
    return found


def bench_ours_generation(levels: int, cfg: GeneratorConfig) -> tuple[float, None]:
    start = time.perf_counter()
    for seed in range(levels):
        generate_level(seed, cfg)
    return levels / (time.perf_counter() - start), None


def bench_gym_generation(room_utils, levels: int, cfg: GeneratorConfig) -> tuple[float, None]:
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
    return levels / (time.perf_counter() - start), None


def interleaved(calls: dict, repeats: int) -> tuple[dict[str, float], dict, str]:
    """Median rate of each named () -> (rate, result) call, alternating call by call `repeats` times; each call's
    last result; and the other-CPU line."""
    rates, results = {name: [] for name in calls}, {}
    with OtherCpu() as other:
        for _ in range(repeats):
            for name, call in calls.items():
                rate, results[name] = call()
                rates[name].append(rate)
    return {name: float(np.median(r)) for name, r in rates.items()}, results, other.line()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024, help="our episodes (seeds 0..batch-1)")
    parser.add_argument("--steps", type=int, default=100, help="actions per episode: the step cap (RAGEN's 100)")
    parser.add_argument("--levels", type=int, default=400)
    parser.add_argument("--baseline-episodes", type=int, default=30, help="gym-sokoban's: the first of ours")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if not 1 <= args.baseline_episodes <= args.batch:
        parser.error(f"--baseline-episodes must be in [1, --batch={args.batch}] (gym-sokoban replays the first of "
                     f"our episodes), got {args.baseline_episodes}")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; batch {args.batch}, {args.steps} steps; "
          f"medians of {args.repeats} interleaved repeats; at the start: {load_line()}", flush=True)
    simple, larger = GeneratorConfig((6, 6), 1, 300), GeneratorConfig((8, 8), 2, 10)
    env = Sokoban(dim_room=simple.dim_room, num_boxes=simple.num_boxes, max_steps=args.steps, bank_size=1)
    actions = episode_actions(args.batch, args.steps)
    calls = {"ours step": ours_steps_runner(env, actions),
             "ours gen 6x6": lambda: bench_ours_generation(args.levels, simple),
             "ours gen 8x8": lambda: bench_ours_generation(max(args.levels // 2, 1), larger)}
    gym = import_gym_sokoban()
    if gym is not None:
        room_utils, sokoban_env = gym
        start = env.reset_from_seeds(range(args.baseline_episodes))
        fixed, rooms, acts = np.asarray(start.fixed), np.asarray(start.room), actions[:args.baseline_episodes]
        calls.update({"gym step": gym_steps_runner(sokoban_env, fixed, rooms, acts, args.steps, "rgb_array"),
                      "gym step tiny": gym_steps_runner(sokoban_env, fixed, rooms, acts, args.steps, "tiny_rgb_array"),
                      "gym gen 6x6": lambda: bench_gym_generation(room_utils, args.levels, simple)})
    rate, results, other = interleaved(calls, args.repeats)
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
    found = [f"{mode}: {m}" for mode in ("gym step", "gym step tiny")
             for m in step_mismatches(results["ours step"], results[mode])]
    theirs = results["gym step"]
    print(f"same results: {'no' if found else 'yes'} ({len(theirs['lengths'])} episodes, "
          f"{int(theirs['lengths'].sum())} steps compared: steps taken, returns, final rooms)")
    if found:
        raise SystemExit(f"[steps] ours and gym-sokoban disagree on the same levels and actions ({len(found)} "
                         f"episodes; first: {found[0]}): the rates time different work.")
    step, tiny = rate["ours step"] / rate["gym step"], rate["ours step"] / rate["gym step tiny"]
    print(f"RATIOS ours / gym-sokoban rate (above 1: ours faster): step throughput {step:,.0f}x "
          f"(vs tiny obs {tiny:,.0f}x; "
          f"target >= 100x); level generation {rate['ours gen 6x6'] / rate['gym gen 6x6']:.1f}x (target >= 10x)")


if __name__ == "__main__":
    main()
