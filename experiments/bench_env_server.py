"""Load benchmark of the env server: N concurrent episodes (threads with RemoteEnv clients) against
`python -m envs.serve` on loopback for a fixed time; reports steps/s and p50/p99 step latency,
and the same random policy run in-process (one thread, no HTTP) as the baseline.

    /work/venv/bin/python experiments/bench_env_server.py --env WebShop --episodes 256 --duration 20
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.protocols import HostEnv  # noqa: E402
from envs.registry import make  # noqa: E402
from envs.serve.client import RemoteEnv, RemoteEnvError  # noqa: E402


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
    proc = subprocess.Popen([sys.executable, "-m", "envs.serve", "--env", env, "--port", "0", "--env-kwargs", env_kwargs],
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            stdout=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    if not line or "listening on" not in line[0]:
        proc.kill()
        raise RuntimeError(f"env server did not start: {line}")
    return proc, line[0].rsplit(" ", 1)[-1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="WebShop")
    parser.add_argument("--env-kwargs", default="{}")
    parser.add_argument("--episodes", type=int, default=256, help="concurrent episodes (client threads)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--baseline-duration", type=float, default=4.0)
    parser.add_argument("--max-steps", type=int, default=15, help="steps per episode before a new reset")
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per call (s)")
    args = parser.parse_args()

    local = make(args.env, **json.loads(args.env_kwargs))
    base_lat: list[float] = []
    base_counts = {"episodes": 0, "errors": 0}
    start = time.monotonic()
    run_episodes(local, random.Random(0), start + args.baseline_duration, args.max_steps, 0, base_lat, base_counts)
    base_rate = len(base_lat) / (time.monotonic() - start)

    proc, url = start_server(args.env, args.env_kwargs)
    try:
        lat_lists: list[list[float]] = [[] for _ in range(args.episodes)]
        counts = [{"episodes": 0, "errors": 0} for _ in range(args.episodes)]
        envs = [RemoteEnv(url, timeout_s=args.timeout) for _ in range(args.episodes)]
        deadline = time.monotonic() + args.duration
        t0 = time.monotonic()
        threads = [threading.Thread(target=run_episodes, daemon=True, args=(
            envs[i], random.Random(i), deadline, args.max_steps, 10_000 + 1000 * i, lat_lists[i], counts[i]))
            for i in range(args.episodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.duration + args.timeout + 10)
        elapsed = time.monotonic() - t0
        for env in envs:
            env.close()
    finally:
        proc.terminate()
        proc.wait(10)

    lat = np.array([x for xs in lat_lists for x in xs]) * 1000
    rate = len(lat) / elapsed
    errors = sum(c["errors"] for c in counts)
    result = {
        "env": args.env, "concurrent_episodes": args.episodes, "duration_s": round(elapsed, 1),
        "steps": int(len(lat)), "episodes_completed": sum(c["episodes"] for c in counts), "errors": errors,
        "server_steps_per_s": round(rate, 1),
        "step_latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
        "step_latency_ms_p99": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
        "baseline_inprocess_steps_per_s": round(base_rate, 1),
        "baseline_step_latency_ms_p50": round(float(np.percentile(np.array(base_lat) * 1000, 50)), 3),
        "ratio_server_over_inprocess": round(rate / base_rate, 3) if base_rate else None,
    }
    if errors:
        result["first_error"] = next(c["first_error"] for c in counts if "first_error" in c)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
