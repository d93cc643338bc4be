"""Jitted step throughput of every built-in JAX env: `--batch` episodes stepped at once, `--steps` steps a call.

    python experiments/bench/bench_env_steps.py [--batch 4096] [--steps 100] [--repeats 3] [--envs game_2048,...]

Per env: the starting states of seeds 0..63 (each env's own `reset_from_seeds`, RAGEN's episodes; host-side level
generation is not timed), tiled to --batch rows, then one jitted `lax.scan` of the vmapped `step_env` over
--steps uniformly random actions (a finished row keeps stepping: this times the step function, not episodes).
Prints the median steps/s of --repeats timed calls after a compile call, and the load at the start.
(experiments/bench/bench_envs.py compares Sokoban with gym-sokoban instead.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from envs.registry import make  # noqa: E402
from experiments.bench.quiet import load_line  # noqa: E402

ENVS = ("SimpleSokoban", "FrozenLake", "Bandit", "game_2048", "rubikscube")
START_SEEDS = 64


def start_states(env, batch: int):
    """[batch] starting states: the episodes of seeds 0..63, tiled."""
    seeds = list(range(min(START_SEEDS, batch)))
    if hasattr(env, "reset_from_seeds"):
        states = env.reset_from_seeds(seeds, env.default_params)
    else:
        keys = jnp.stack([env.seed_to_key(s) for s in seeds])
        states = jax.vmap(lambda k: env.reset_env(k, env.default_params)[1])(keys)
    reps = -(-batch // len(seeds))
    return jax.tree.map(lambda x: jnp.concatenate([x] * reps)[:batch], states)


def steps_runner(env, batch: int, steps: int):
    """() -> seconds of one call stepping `batch` episodes `steps` times (compiled on the first call)."""
    params = env.default_params
    state = start_states(env, batch)
    actions = jax.random.randint(jax.random.PRNGKey(0), (steps, batch), 0, int(env.num_actions))
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    step = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))

    @jax.jit
    def rollout(state, actions, keys):
        def body(carry, action):
            state, total, n = carry
            _, state, reward, _, _ = step(jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, n), state, action,
                                          params)
            return (state, total + reward, n + 1), None

        (state, total, _), _ = jax.lax.scan(body, (state, jnp.zeros(batch), jnp.int32(0)), actions)
        return total

    def run() -> float:
        start = time.perf_counter()
        jax.block_until_ready(rollout(state, actions, keys))
        return time.perf_counter() - start

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default=",".join(ENVS), help="registered JAX env names, comma-separated")
    args = parser.parse_args(argv)
    print(f"{jax.devices()[0].platform}, batch {args.batch}, {args.steps} steps a call; {load_line()}")
    for name in [n.strip() for n in args.envs.split(",") if n.strip()]:
        env = make(name)
        run = steps_runner(env, args.batch, args.steps)
        compile_s = run()
        times = sorted(run() for _ in range(args.repeats))
        median = times[len(times) // 2]
        print(f"{name:<16} {args.batch * args.steps / median:>14,.0f} steps/s  (median of {args.repeats}: "
              f"{median * 1e3:.1f} ms a call; first call with compile {compile_s:.1f} s)")


if __name__ == "__main__":
    main()
