"""One process of the multi-host trainer test: `python tests/multihost_trainer_worker.py WORKDIR`.

With JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID set it joins a jax.distributed run (2 CPU
devices per process); without them it is the single-process reference (4 CPU devices). Either way it runs
`Trainer.train()` on Sokoban with the tiny model over a (data 1, fsdp 2, tensor 2) mesh: a warm start, PPO
with a critic and a KL reference, the filter, validation, checkpoints and the Hugging Face export. Process 0
writes WORKDIR/result.npz (parameters at the start, after the warm start and at the end) and result.json
(per-step metrics, validation history) for the test to compare; with a second argument `resume` it continues
one step from the last checkpoint (resumed.*); with `signal`, process 1 alone gets a SIGTERM during the first RL
step (no warm start, validation or diagnostics) and every process writes signal_<process>.json (steps run, the
stop it reports).
"""

from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np

from ragen_jax.sharding import gather_to_host, maybe_initialize_distributed
from ragen_jax.sharding.rules import path_str

DISTRIBUTED = maybe_initialize_distributed(None)  # before anything (gymnax, in the envs) touches a device

from configs.base import apply_tiny, get_base_config  # noqa: E402
from ragen_jax.config import validate_config  # noqa: E402
from ragen_jax.trainer import Trainer  # noqa: E402


def config(workdir: str):
    c = get_base_config()
    apply_tiny(c)
    c.env.name = "SimpleSokoban"
    c.env.groups, c.env.group_size = 2, 4
    c.env.max_turn = 2
    c.val.groups, c.val.group_size, c.val.batch_size, c.val.every = 4, 2, 8, 1
    c.rollout.response_length = 16
    c.rollout.max_model_len = 512
    c.rollout.temperature = 1.0
    c.trainer.total_steps = 2
    c.trainer.mini_batch_size = c.trainer.micro_batch_size = 4
    c.trainer.save_every = 1
    c.trainer.export_hf = True
    c.algo.use_kl_loss = True
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 1.0, True  # keeps every group
    c.warmstart.enabled = True
    c.warmstart.reasoning_text = "The box goes up."  # responses then carry reasoning: the MI diagnostics run
    c.diagnostics.every, c.diagnostics.max_pairs = 1, 8
    c.warmstart.num_demos, c.warmstart.steps, c.warmstart.batch_size, c.warmstart.micro_batch_size = 64, 40, 8, 8
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 1, 2, 2
    c.workdir = workdir
    validate_config(c)
    return c


def stop_by_a_signal_to_one_process(workdir: str) -> None:
    """A scheduler's SIGTERM reaching one host only: every process must stop after the same step and save it."""
    import signal

    cfg = config(workdir)
    cfg.warmstart.enabled, cfg.val.every, cfg.diagnostics.every = False, 0, 0
    cfg.trainer.total_steps, cfg.trainer.save_every = 4, 0
    trainer = Trainer(cfg)
    train_step, steps = trainer.train_step, []

    def step_then_signal(step: int) -> dict:
        metrics = train_step(step)
        steps.append(step)
        if step == 0 and jax.process_index() == 1:
            signal.raise_signal(signal.SIGTERM)
        return metrics

    trainer.train_step = step_then_signal
    summary = trainer.train()
    with open(os.path.join(workdir, f"signal_{jax.process_index()}.json"), "w") as f:
        json.dump({"steps": steps, "stopped_by_signal": summary["stopped_by_signal"],
                   "stop_reason": summary["stop_reason"]}, f)


def asynchronous(workdir: str) -> None:
    """An asynchronous run (trainer.schedule=async) across the processes: each host samples its share of a step's
    episodes on its first device and learns on the other (mesh fsdp over the learners of every host); every
    process writes async_<process>.json with its per-step metrics and a digest of the final parameters."""
    cfg = config(workdir)
    cfg.warmstart.enabled, cfg.val.every, cfg.diagnostics.every, cfg.trainer.export_hf = False, 0, 0, False
    cfg.trainer.total_steps, cfg.trainer.save_every = 3, 2
    cfg.trainer.schedule, cfg.trainer.max_staleness = "async", 1
    cfg.mesh.rollout_devices, cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = 1, 1, -1, 1
    trainer = Trainer(cfg)
    steps = []
    scalars = trainer.monitor.scalars

    def recording(metrics, step):
        if step > 0:  # the steps' metrics, not the validation's
            steps.append({k: float(v) for k, v in metrics.items()
                          if k.startswith(("actor/", "train/", "async/staleness"))})
        scalars(metrics, step)

    trainer.monitor.scalars = recording
    summary = trainer.train()
    digest = float(sum(np.abs(x).sum() for x in jax.tree.leaves(gather_to_host(trainer.models.actor.trainable))))
    with open(os.path.join(workdir, f"async_{jax.process_index()}.json"), "w") as f:
        json.dump({"steps": steps, "digest": digest, "steps_run": summary["steps_run"],
                   "rollout_index": trainer.state.rollout_index, "local_episodes": trainer.train_env.batch_size,
                   "learner_devices": trainer.mesh.size, "rollout_devices": trainer.rollout_mesh.size}, f)


if __name__ == "__main__":
    workdir, resume = sys.argv[1], sys.argv[2:] == ["resume"]
    assert jax.device_count() == 4, jax.devices()
    if sys.argv[2:] in (["signal"], ["async"]):
        (stop_by_a_signal_to_one_process if sys.argv[2] == "signal" else asynchronous)(workdir)
        if DISTRIBUTED:
            jax.distributed.shutdown()
        sys.exit(0)
    cfg = config(workdir)
    if resume:  # one more step from the last checkpoint
        cfg.trainer.resume, cfg.trainer.total_steps = True, cfg.trainer.total_steps + 1
    trainer = Trainer(cfg)
    steps = []
    train_step = trainer.train_step

    def parameters(prefix: str = "") -> dict:
        """Host copies of the actor's and critic's trainable arrays (a collective: every process calls it)."""
        out = {}
        for name, state in (("param", trainer.models.actor.trainable), ("critic", trainer.models.critic.trainable)):
            out.update({f"{prefix}{name}/{path_str(p)}": x
                        for p, x in jax.tree_util.tree_leaves_with_path(gather_to_host(state))})
        return out

    snapshots = parameters("initial/")  # before the warm start; "rl_start/": after it, before RL step 1

    def recording_step(step: int) -> dict:
        if not any(k.startswith("rl_start/") for k in snapshots):
            snapshots.update(parameters("rl_start/"))
        metrics = train_step(step)
        steps.append({k: v for k, v in metrics.items() if not k.startswith(("timing_s/", "perf/"))})
        return metrics

    trainer.train_step = recording_step
    summary = trainer.train()
    final = parameters()
    if jax.process_index() == 0:
        tag = "resumed" if resume else "result"
        np.savez(os.path.join(workdir, f"{tag}.npz"), **final, **snapshots, start_step=trainer.state.start_step,
                 processes=jax.process_count(), local_episodes=trainer.train_env.batch_size,
                 rows=np.array([trainer.engine.rows.start, trainer.engine.rows.stop]))
        with open(os.path.join(workdir, f"{tag}.json"), "w") as f:
            json.dump({"steps": steps, "summary": {k: summary[k] for k in ("val_history", "val_success_final")}}, f)
    if DISTRIBUTED:
        jax.distributed.shutdown()
