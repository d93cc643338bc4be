"""RAGEN's full-size Sokoban step through run.py with a 2-layer random checkpoint: this code vs a baseline checkout.

Writes a random Hugging Face checkpoint of the tiny preset's shapes (Qwen2, 2 layers, 128 wide) with the built-in
1,119-token BPE (no downloads), then runs `run.py --config configs/sokoban.py` (CoordSokoban, PPO with a critic,
RAGEN's prompts, full-history context, max_model_len 3600) on 8 episodes with response_length 64 for `--steps`
steps. RAGEN's prompts in a small byte-level vocabulary and a model that writes to the cap make rows of ~3,600
tokens (perf-facts' setup). The same command runs in this checkout (`--repo`) and in a baseline (`--baseline`: a
checkout folder, or a git revision of this repository unpacked to a temporary folder; by default d8cb961, the dense
[T, S] attention scores that the blockwise attention was written to beat), alternating run by run, --repeats times;
before any run, each side's own run.py checks the command (its flags parse, the config validates, the checkpoint
loads) without training, so a flag or checkpoint a side refuses fails in seconds, with nothing timed.
Each run's rollout, scoring, update and step seconds and trained tokens are read back from its TensorBoard events;
step 1 compiles, so a run's figure is its median over steps 2..--steps, and each side's the median over its runs.
Prints the load at the start, the CPU other processes used meanwhile, both sides' medians and, last, the ratios
baseline / ours of the seconds (above 1: ours faster). The two codes may sample different tokens (trained tokens
are printed for both), so the rows they time are alike, not identical.

    .venv/bin/python experiments/bench/long_rows_step.py [--steps 3] [--repeats 3] [--baseline REV_OR_PATH] [--repo PATH]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import tarfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402

TAGS = ("timing_s/rollout", "timing_s/score_and_adv", "timing_s/update", "timing_s/step", "perf/trained_tokens")
SECONDS = TAGS[:4]
DEFAULT_BASELINE = "d8cb961"  # dense attention scores, before ragen_jax/models/attention.py's blockwise kernel


def write_checkpoint(folder: str) -> None:
    from flax import nnx

    from ragen_jax.models import CausalLM, save_pretrained, tiny_config
    from ragen_jax.models.tiny import load_tiny_tokenizer

    config = tiny_config()
    save_pretrained(CausalLM(config, rngs=nnx.Rngs(0)), folder)
    load_tiny_tokenizer().save(folder)


def scalars(workdir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(workdir, "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    have = set(acc.Tags()["scalars"])
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in TAGS if tag in have}


def run_command(model: str, workdir: str, steps: int) -> list[str]:
    """run.py's arguments for the long-row Sokoban run (the same for both sides)."""
    return [sys.executable, "run.py", "--config", "configs/sokoban.py", f"--workdir={workdir}",
            f"--config.model.path={model}", "--config.model.param_dtype=float32",
            "--config.env.groups=1", "--config.env.group_size=8", "--config.rollout.response_length=64",
            "--config.trainer.mini_batch_size=8", "--config.trainer.micro_batch_size=4",
            f"--config.trainer.total_steps={steps}", "--config.val.every=0", "--config.val.at_start=False",
            "--config.trainer.save_every=0", "--config.diagnostics.every=0"]


# Run in a checkout's folder with the arguments of run_command: that checkout's own run.py parses them, its
# validate_config checks the config and its trainer loads the checkpoint, then it exits without training.
_PREFLIGHT = """
import sys
import run
run.parse_flags(["run.py", *sys.argv[1:]])
from ragen_jax.config import validate_config
from ragen_jax.trainer.setup import load_policy_and_tokenizer
validate_config(run._CONFIG.value)
load_policy_and_tokenizer(run._CONFIG.value.model)
"""


def preflight(repo: str, command: list[str]) -> None:
    """Checks in checkout `repo`, in seconds and without training, that its run.py accepts `command`
    (run_command's list): the flags parse, the config validates, the model and tokenizer load."""
    out = subprocess.run([command[0], "-c", _PREFLIGHT, *command[2:]], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": repo})
    if out.returncode:
        lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {out.returncode}"
        raise SystemExit(f"{repo}: its run.py refuses the long-row run's command ({why}); nothing was timed. "
                         f"Command: {' '.join(command[1:])}")


def run_once(repo: str, model: str, workdir: str, steps: int) -> dict[str, list[tuple[int, float]]]:
    """One run.py run in checkout `repo` -> its TensorBoard scalars of TAGS as (step, value) lists."""
    subprocess.run(run_command(model, workdir, steps), cwd=repo, check=True, env={**os.environ, "PYTHONPATH": repo})
    return scalars(workdir)


def baseline_checkout(baseline: str, folder: str) -> str:
    """`baseline` itself when it is a folder holding run.py; else the git revision `baseline` of this repository
    unpacked into `folder` (returned)."""
    if os.path.isdir(baseline):
        if not os.path.isfile(os.path.join(baseline, "run.py")):
            raise SystemExit(f"--baseline {baseline} is a folder without run.py: give a checkout of ragen-jax or a "
                             "git revision of this repository.")
        return baseline
    out = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", baseline], capture_output=True)
    if out.returncode:
        raise SystemExit(f"--baseline {baseline!r} is neither a folder nor a git revision of {ROOT} "
                         f"({out.stderr.decode().strip()}): give a checkout folder or a commit.")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def steady_medians(found: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    """Median of each tag over the steps after the first (TensorBoard's step 1 compiles); tags without such steps
    are left out."""
    medians = {}
    for tag, values in found.items():
        later = [v for step, v in values if step >= 2]
        if later:
            medians[tag] = float(np.median(later))
    return medians


def side_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Median over a side's runs of each tag every run has."""
    tags = [t for t in TAGS if all(t in r for r in runs)]
    return {t: float(np.median([r[t] for r in runs])) for t in tags}


def interleaved_runs(sides: dict[str, str], repeats: int, runner) -> dict[str, list[dict[str, float]]]:
    """`runner(repo, run_name)` -> scalars, alternating side by side `repeats` times -> each side's steady medians
    (one dict per run)."""
    runs = {name: [] for name in sides}
    for i in range(repeats):
        for name, repo in sides.items():
            runs[name].append(steady_medians(runner(repo, f"{name}_{i}")))
    return runs


def report_lines(ours: dict[str, float], base: dict[str, float]) -> list[str]:
    """Both sides' medians and, last, the ratios baseline / ours of the seconds (above 1: ours faster)."""
    def row(side):
        return "  ".join(f"{t.split('/')[-1]} {side[t]:.2f}" for t in TAGS if t in side)
    ratios = [f"{t.split('/')[-1]} {base[t] / ours[t]:.2f}x" for t in SECONDS
              if t in ours and t in base and ours[t] > 0]
    return [f"ours     {row(ours)}", f"baseline {row(base)}",
            "RATIOS baseline / ours seconds (above 1: ours faster): " + (", ".join(ratios) or "none measured")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="RL steps per run (step 1 compiles: not counted)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side, alternating; medians")
    parser.add_argument("--repo", default=str(ROOT), help="the checkout measured as 'ours'")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="a checkout folder or a git revision")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        parser.error(f"--steps must be >= 2 (step 1 compiles and is not counted) and --repeats >= 1, got "
                     f"{args.steps} and {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"ours": args.repo, "baseline": baseline_checkout(args.baseline, os.path.join(tmp, "baseline"))}
        model = os.path.join(tmp, "model")
        write_checkpoint(model)
        for repo in sides.values():  # a flag or checkpoint a side refuses fails here, not after minutes of runs
            preflight(repo, run_command(model, os.path.join(tmp, "preflight"), args.steps))
        print(" ".join(run_command(model, "WORKDIR", args.steps)[1:]), flush=True)
        print(f"ours {args.repo}, baseline {args.baseline}; medians over steps 2-{args.steps} of each run, then over "
              f"{args.repeats} alternating runs per side; at the start: {load_line()}", flush=True)

        def runner(repo: str, run_name: str) -> dict:
            return run_once(repo, model, os.path.join(tmp, run_name), args.steps)

        t0 = time.perf_counter()
        with OtherCpu() as other:
            runs = interleaved_runs(sides, args.repeats, runner)
    print(f"\nwall {time.perf_counter() - t0:.0f} s; {other.line()}")
    for line in report_lines(side_medians(runs["ours"]), side_medians(runs["baseline"])):
        print(line)


if __name__ == "__main__":
    main()
