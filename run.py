"""ragen-jax entry point: train or evaluate an agent from a config file.

  python run.py --config configs/sokoban.py:tiny
  python run.py --config configs/sokoban.py --config.trainer.total_steps=50 --workdir runs/s50
  python run.py --config configs/sokoban.py:tiny --mode=eval
"""

from __future__ import annotations

import json
import logging
import os

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file[:variants].", lock_config=True)
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval", "sft"], "train (StarPO), eval (validation "
                          "rollouts + metrics + JSONL), or sft (warm-start on demonstrations only).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (TensorBoard, checkpoints, rollouts). "
                               "Default: config.workdir.")
flags.mark_flag_as_required("config")


def main(argv):
    del argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cfg = _CONFIG.value
    from ragen_jax.config_check import validate_config

    validate_config(cfg)
    workdir = _WORKDIR.value or cfg.workdir
    from ragen_jax.trainer.loop import Trainer

    trainer = Trainer(cfg, workdir)
    if _MODE.value == "eval":
        from ragen_jax.trainer.evaluate import run_eval

        metrics = run_eval(trainer)
        print(json.dumps(metrics, indent=2))
        return
    if _MODE.value == "sft":
        from ragen_jax.trainer.warmstart import run_warmstart

        run_warmstart(trainer)
        return
    summary = trainer.train()
    from ragen_jax.trainer.report import print_summary

    print_summary(summary, os.path.join(trainer.workdir, "tb"))


if __name__ == "__main__":
    app.run(main)
