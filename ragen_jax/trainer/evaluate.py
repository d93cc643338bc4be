"""`run.py --mode=eval`: validation rollouts of the current policy, metrics, JSONL/PKL dumps."""

from __future__ import annotations

import os
import pickle

from ragen_jax.rollout.dump import write_jsonl


def run_eval(trainer, *, output: str = "both") -> dict[str, float]:
    """Play the validation episodes, write rollouts under workdir/eval, return the metrics."""
    metrics, episodes = trainer.run_validation(step=0)
    out_dir = os.path.join(trainer.workdir, "eval")
    if trainer.is_main:
        os.makedirs(out_dir, exist_ok=True)
        if output in ("jsonl", "both"):
            write_jsonl(os.path.join(out_dir, "rollouts.jsonl"), episodes, **trainer._dump_kwargs())
        if output in ("pkl", "both"):
            with open(os.path.join(out_dir, "rollouts.pkl"), "wb") as f:
                pickle.dump({"episodes": episodes, "metrics": metrics}, f)
        trainer.monitor.scalars(metrics, 0)
        trainer.monitor.flush()
    metrics["eval/num_episodes"] = float(len(episodes))
    return metrics
