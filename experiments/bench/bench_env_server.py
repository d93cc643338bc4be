"""Load benchmark of the env server: N concurrent episodes (threads with RemoteEnv clients) against
`python -m envs.serve` on loopback for a fixed time; reports steps/s and p50/p99 step latency,
and the same random policy run in-process (one thread, no HTTP) as the baseline. The two sides alternate block
by block (--repeats blocks each, the server started once); steps/s are medians over the blocks, latencies pooled;
the 1-minute load average is printed at the start (a warning above 0.5).

    python experiments/bench/bench_env_server.py --env WebShop --episodes 256 --duration 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from envs.protocols import HostEnv  # noqa: E402
from envs.registry import make  # noqa: E402
from envs.serve.client import RemoteEnv, RemoteEnvError  # noqa: E402
from experiments.bench.quiet import load_line  # noqa: E402


def choose_action(obs: str, info: dict[str, Any], env: HostEnv, rng: random.Random) -> str:
    """A random valid-looking action: WebShop's listed actions, named actions, or search/finish."""
    actions = info.get("available_actions")
    if actions:
        action = rng.choice(actions)
        if action == "search[<content>]":
            words = [w for w in obs.split() if w.isalpha() and len(w) > 3]
            action = f"search[{' '.join(rng.sample(words, min(3, len(words))))}]"
        return action
    if env.action_names:
        return rng.choice(env.action_names)
    return rng.choice(["search[capital river town]", "search[company founder]", "finish[yes]"])


def run_episodes(env: HostEnv, rng: random.Random, deadline: float, max_steps: int, seed0: int,
                 latencies: list[float], counts: dict[str, int]) -> None:
    """Play episodes back to back until `deadline`, recording each step's latency (seconds)."""
    seed = seed0
    while time.monotonic() < deadline:
        try:
            obs, info = env.reset(seed)
            for _ in range(max_steps):
                start = time.perf_counter()
                obs, _, terminated, truncated, info = env.step(choose_action(obs, info, env, rng))
                latencies.append(time.perf_counter() - start)
                if terminated or truncated or time.monotonic() >= deadline:
                    break
            counts["episodes"] += 1
        except RemoteEnvError as e:
            counts["errors"] += 1
            counts.setdefault("first_error", str(e))  # type: ignore[arg-type]
            time.sleep(0.05)
        seed += 1


def start_server(env: str, env_kwargs: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "envs.serve", "--env", env, "--port", "0",
                             "--env-kwargs", env_kwargs],
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            stdout=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    if not line or "listening on" not in line[0]:
        proc.kill()
        raise RuntimeError(f"env server did not start: {line}")
    return proc, line[0].rsplit(" ", 1)[-1].strip()


def server_block(envs: list[RemoteEnv], duration: float, max_steps: int, timeout: float, block: int
                 ) -> tuple[list[float], list[dict], float]:
    """One block of load: every client plays episodes for `duration` s. (latencies s, per-client counts, wall s)."""
    lat_lists: list[list[float]] = [[] for _ in envs]
    counts = [{"episodes": 0, "errors": 0} for _ in envs]
    deadline = time.monotonic() + duration
    t0 = time.monotonic()
    threads = [threading.Thread(target=run_episodes, daemon=True, args=(
        env, random.Random(1000 * block + i), deadline, max_steps, 10_000 + 1000 * i + 1_000_000 * block,
        lat_lists[i], counts[i])) for i, env in enumerate(envs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + timeout + 10)
    return [x for xs in lat_lists for x in xs], counts, time.monotonic() - t0


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="WebShop")
    parser.add_argument("--env-kwargs", default="{}")
    parser.add_argument("--episodes", type=int, default=256, help="concurrent episodes (client threads)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per server block")
    parser.add_argument("--baseline-duration", type=float, default=4.0, help="seconds per in-process block")
    parser.add_argument("--repeats", type=int, default=3, help="blocks per side (interleaved; medians)")
    parser.add_argument("--max-steps", type=int, default=15, help="steps per episode before a new reset")
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per call (s)")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; at the start: {load_line()}", flush=True)

    local = make(args.env, **json.loads(args.env_kwargs))
    base_lat: list[float] = []
    base_rates: list[float] = []
    server_lat: list[float] = []
    server_rates: list[float] = []
    counts: list[dict] = []
    proc, url = start_server(args.env, args.env_kwargs)
    try:
        envs = [RemoteEnv(url, timeout_s=args.timeout) for _ in range(args.episodes)]
        for block in range(args.repeats):  # alternate the two sides block by block
            block_lat: list[float] = []
            start = time.monotonic()
            run_episodes(local, random.Random(block), start + args.baseline_duration, args.max_steps,
                         1_000_000 * block, block_lat, {"episodes": 0, "errors": 0})
            base_rates.append(len(block_lat) / (time.monotonic() - start))
            base_lat += block_lat
            block_lat, block_counts, elapsed = server_block(envs, args.duration, args.max_steps, args.timeout, block)
            server_rates.append(len(block_lat) / elapsed)
            server_lat += block_lat
            counts += block_counts
            print(f"block {block + 1}/{args.repeats}: in-process {base_rates[-1]:.1f} steps/s, server "
                  f"{server_rates[-1]:.1f} steps/s", flush=True)
        for env in envs:
            env.close()
    finally:
        proc.terminate()
        proc.wait(10)

    lat = np.array(server_lat) * 1000
    rate, base_rate = float(np.median(server_rates)), float(np.median(base_rates))
    errors = sum(c["errors"] for c in counts)
    result = {
        "env": args.env, "concurrent_episodes": args.episodes, "blocks_per_side": args.repeats,
        "server_block_s": args.duration, "steps": int(len(lat)),
        "episodes_completed": sum(c["episodes"] for c in counts), "errors": errors,
        "server_steps_per_s_median": round(rate, 1),
        "step_latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
        "step_latency_ms_p99": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
        "baseline_inprocess_steps_per_s_median": round(base_rate, 1),
        "baseline_step_latency_ms_p50": round(float(np.percentile(np.array(base_lat) * 1000, 50)), 3)
        if base_lat else None,
        "ratio_server_over_inprocess_steps_per_s": round(rate / base_rate, 3) if base_rate else None,
    }
    if errors:
        result["first_error"] = next(c["first_error"] for c in counts if "first_error" in c)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
