"""Asynchronous StarPO against the synchronous run: wall seconds per RL step, and host env latency off the
critical path.

steps    The quickstart's RL steps (configs/sokoban.py:tiny, from its warm-started policy: one `--mode=sft` run
         first, then every timed run starts from that export, with validation off) under each schedule:
           sync            rollout, then scoring and update (the reference)
           async_threads   trainer.schedule=async, max_staleness 1, both roles on the one CPU device (threads)
           async_devices   the same with two forced host devices: one samples, one learns (mesh.rollout_devices=1)
         Each run is a subprocess (the device count is fixed when JAX starts); runs are interleaved, `--repeats`
         each; a run's figure is the median `timing_s/step` over its steps after `--skip` (compiles). Prints each
         schedule's median over repeats and RATIO sync/async (>1: async is faster).
latency  The continuous engine's rollout wall with a host env that sleeps `--latency_ms` per step against the same
         env without the sleep (the same episodes: 64 x up to 5 turns, the tiny model): env steps off the critical
         path keep the ratio near 1.

    .venv/bin/python experiments/bench/bench_async.py [--repeats 3] [--steps 14] [--parts steps,latency]

Measure on a quiet machine (experiments/bench/quiet.py): nothing else running, load below 0.5.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.bench.quiet import load_line  # noqa: E402

SCHEDULES = {
    "sync": ([], 1),
    "async_threads": (["--config.trainer.schedule=async", "--config.trainer.max_staleness=1"], 1),
    "async_devices": (["--config.trainer.schedule=async", "--config.trainer.max_staleness=1",
                       "--config.mesh.rollout_devices=1", "--config.mesh.data=1"], 2),
}


def warm_start(workdir: Path) -> Path:
    """The quickstart's warm-started policy as a Hugging Face folder (made once)."""
    export = workdir / "sft" / "hf_export"
    if not (export / "config.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "run.py"), "--config=configs/sokoban.py:tiny", "--mode=sft",
                        f"--workdir={workdir / 'sft'}"], cwd=ROOT, check=True, capture_output=True)
    return export


def timed_run(schedule: str, export: Path, workdir: Path, steps: int, skip: int) -> float:
    """Median seconds per RL step of one subprocess run under `schedule`."""
    flags, devices = SCHEDULES[schedule]
    out = workdir / f"{schedule}_{time.time_ns()}"
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}
    args = [sys.executable, __file__, "--child", str(out), "--steps", str(steps), "--skip", str(skip), "--",
            "--config=configs/sokoban.py:tiny", f"--config.model.path={export}", "--config.model.preset=",
            "--config.warmstart.enabled=False", "--config.val.every=0", "--config.val.at_start=False",
            "--config.trainer.export_hf=False", f"--config.trainer.total_steps={steps}", *flags]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{schedule} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["median_step_s"]


def child(out: str, steps: int, skip: int, overrides: list[str]) -> None:
    """One run in this process: the RL steps of the config the overrides give; prints the median step seconds."""
    from absl import flags
    from ml_collections import config_flags

    from ragen_jax.trainer import Trainer
    from ragen_jax.trainer.interrupt import StopRequests
    from ragen_jax.trainer.run_loop import rl_steps

    config = config_flags.DEFINE_config_file("config", None, "config")
    flags.FLAGS(["bench", *overrides])
    times = []
    trainer = Trainer(config.value, out)
    scalars = trainer.monitor.scalars
    trainer.monitor.scalars = lambda m, s: (times.append(m["timing_s/step"]), scalars(m, s))

    class Bar(list):
        def set_postfix(self, *_):
            pass

    with trainer.activate_mesh():
        rl_steps(trainer, Bar(range(steps)), StopRequests())
    trainer.close()
    print(json.dumps({"median_step_s": statistics.median(times[skip:]), "steps": times}))


class SleepyWalk:
    """A host env whose every step takes `delay` seconds (a sandbox, a web page, a remote service)."""

    action_lookup = {"up": 0, "down": 1, "left": 2, "right": 3}
    action_names = ["Up", "Down", "Left", "Right"]
    step_timeout_s = 60.0

    def __init__(self, delay: float):
        self.delay, self.pos = delay, 0

    def instruction(self) -> str:
        return "Walk five steps."

    def legend(self) -> str:
        return ""

    def reset(self, seed: int):
        self.pos = 0
        return "position 0", {}

    def step(self, action: str):
        time.sleep(self.delay)
        self.pos += 1
        return f"position {self.pos}", 0.0, self.pos >= 5, False, {}

    def close(self) -> None:
        pass


def latency_part(repeats: int, latency_ms: float) -> float:
    """Continuous-engine rollout wall with a sleeping host env / without the sleep (medians)."""
    import jax
    from flax import nnx

    from envs.host_batch import HostEnvBatch
    from ragen_jax.models.tiny import make_tiny_model
    from ragen_jax.rollout import ContinuousEngine, RolloutConfig, group_seeds

    model, tok = make_tiny_model(seed=0)
    tok.decode = lambda ids: "</think><answer>Up</answer>"  # every turn moves, so every turn steps the env
    graphdef, params = nnx.split(model)
    cfg = RolloutConfig(max_turn=5, max_actions_per_turn=1, max_actions_per_traj=5, response_length=24,
                        max_model_len=512, prompt_style="compact", context_mode="single_turn", context_window=1)
    batch = 64
    engine = ContinuousEngine(graphdef, tok, cfg, batch)
    seeds, gids = group_seeds(0, 8, 8)
    walls = {0.0: [], latency_ms: []}
    for r in range(repeats + 1):
        for ms in walls:
            env = HostEnvBatch([SleepyWalk(ms / 1000) for _ in range(batch)])
            t0 = time.perf_counter()
            engine.run(params, env, seeds, gids, jax.random.key(0), tag="walk")
            if r:  # the first round compiles
                walls[ms].append(time.perf_counter() - t0)
    fast, slow = statistics.median(walls[0.0]), statistics.median(walls[latency_ms])
    print(f"latency: rollout wall {fast:.2f} s without env latency, {slow:.2f} s with {latency_ms:g} ms a step "
          f"(medians of {repeats}); RATIO slow/fast {slow / fast:.2f}x")
    return slow / fast


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--skip", type=int, default=3, help="first steps left out of a run's median (compiles)")
    parser.add_argument("--parts", default="steps,latency")
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    parser.add_argument("--latency_ms", type=float, default=50.0)
    parser.add_argument("--workdir", default="/tmp/bench_async")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.child:
        child(args.child, args.steps, args.skip, [a for a in rest if a != "--"])
        return
    print(load_line())
    parts = args.parts.split(",")
    if "steps" in parts:
        workdir = Path(args.workdir)
        export = warm_start(workdir)
        schedules = args.schedules.split(",")
        results: dict[str, list[float]] = {s: [] for s in schedules}
        for r in range(args.repeats):
            for schedule in schedules:
                results[schedule].append(timed_run(schedule, export, workdir, args.steps, args.skip))
                print(f"repeat {r + 1} {schedule}: {results[schedule][-1]:.3f} s a step", flush=True)
        medians = {s: statistics.median(v) for s, v in results.items()}
        for s, m in medians.items():
            print(f"{s:14s} median {m:.3f} s a step (runs: {', '.join(f'{v:.3f}' for v in results[s])})")
        if "sync" in medians:
            ratios = " ".join(f"{s}={medians['sync'] / m:.2f}x" for s, m in medians.items() if s != "sync")
            print(f"RATIO sync/async wall per step: {ratios}")
    if "latency" in parts:
        latency_part(args.repeats, args.latency_ms)
    print(load_line())


if __name__ == "__main__":
    main()
