"""RAGEN's full-size Sokoban step through run.py with a 2-layer random checkpoint: where a long-row step's time goes.

Writes a random Hugging Face checkpoint of the tiny preset's shapes (Qwen2, 2 layers, 128 wide) with the built-in
1,119-token BPE (no downloads), then runs `run.py --config configs/sokoban.py` (CoordSokoban, PPO with a critic,
RAGEN's prompts, full-history context, max_model_len 3600) on 8 episodes with response_length 64 for `--steps`
steps. RAGEN's prompts in a small byte-level vocabulary and a model that writes to the cap make rows of ~3,600
tokens (perf-facts' setup). Prints, per step, the rollout, scoring and update seconds and the trained tokens,
read back from the run's TensorBoard events. The first step includes compilation; later steps do not.

    .venv/bin/python experiments/long_rows_step.py [--steps 2] [--repo PATH]   # PATH: another checkout's run.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.quiet import load_line  # noqa: E402

TAGS = ("timing_s/rollout", "timing_s/score_and_adv", "timing_s/update", "perf/trained_tokens")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repo", default=str(ROOT), help="checkout whose run.py runs (e.g. an older commit)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, workdir = os.path.join(tmp, "model"), os.path.join(tmp, "run")
        write_checkpoint(model)
        cmd = [sys.executable, "run.py", "--config", "configs/sokoban.py", f"--workdir={workdir}",
               f"--config.model.path={model}", "--config.model.param_dtype=float32",
               "--config.env.groups=1", "--config.env.group_size=8", "--config.rollout.response_length=64",
               "--config.trainer.mini_batch_size=8", "--config.trainer.micro_batch_size=4",
               f"--config.trainer.total_steps={args.steps}", "--config.val.every=0", "--config.val.at_start=False",
               "--config.trainer.save_every=0", "--config.diagnostics.every=0"]
        print(" ".join(cmd[1:]), flush=True)
        print(f"at the start: {load_line()}", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=args.repo, check=True, env={**os.environ, "PYTHONPATH": args.repo})
        wall = time.perf_counter() - t0
        found = scalars(workdir)
    print(f"\nwall {wall:.0f} s; 1-minute load average {os.getloadavg()[0]:.2f}")
    steps = sorted({s for values in found.values() for s, _ in values})
    for step in steps:
        row = {tag: dict(found.get(tag, [])).get(step) for tag in TAGS}
        print(f"step {step}: " + "  ".join(f"{tag.split('/')[-1]} {v:.1f}" for tag, v in row.items() if v is not None))


if __name__ == "__main__":
    main()
