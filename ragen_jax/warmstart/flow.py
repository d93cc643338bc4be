"""The warm start before RL: demonstrations, supervised steps, validation before and after."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from ragen_jax import sharding
from ragen_jax.warmstart.demo_cache import DemoSource, build_demos
from ragen_jax.warmstart.sft import SFTData, _place_batch, make_sft_step, prepare_sft_data, sft_optimizer

logger = logging.getLogger(__name__)
def train_sft(actor, data: SFTData, warmstart: Any, monitor, *, steps: int, max_seconds: float = 0.0,
              log_every: int = 10, mesh=None, callback: Callable[[int, float], Any] | None = None,
              show_progress: bool = True) -> dict[str, float]:
    """Run SFT steps on `actor` (a SplitModel; its trainable state is replaced); `callback(step, train_seconds)`
    after each. warmstart: the config's warmstart section (batch sizes, lr, seed).

    Stops after `steps` or once `max_seconds` (> 0) of step time is spent. Returns the last metrics
    and throughput: tokens/s counts every real row token (shared prefix included).
    """
    w = warmstart
    batch_size = min(int(w.batch_size), data.num_rows)
    micro = min(int(w.micro_batch_size or batch_size), batch_size)  # fewer demo rows than a micro-batch: one step
    batch_size = batch_size // micro * micro
    tx, schedule = sft_optimizer(w, steps)
    step_fn = make_sft_step(actor.graphdef, tx, micro)
    opt_state = tx.init(actor.trainable)
    prefix = jnp.asarray(data.prefix)
    rng = np.random.default_rng(int(w.seed))
    order, cursor = rng.permutation(data.num_rows), 0
    spent, tokens_seen, targets_seen, compile_s = 0.0, 0.0, 0.0, 0.0
    metrics: dict[str, float] = {}
    step, logged = 0, False
    bar = tqdm(range(1, steps + 1), desc="warm start", leave=False, dynamic_ncols=True, disable=not show_progress)
    for step in bar:
        if cursor + batch_size > len(order):
            order, cursor = rng.permutation(data.num_rows), 0
        rows = order[cursor:cursor + batch_size]
        cursor += batch_size
        batch = _place_batch(data.batch(rows), mesh)
        t0 = time.perf_counter()
        actor.trainable, opt_state, out = step_fn(actor.trainable, opt_state, actor.frozen, prefix, batch)
        out = jax.device_get(out)
        dt = time.perf_counter() - t0
        if step == 1:
            compile_s = dt  # the first call compiles; keep it out of throughput
        else:
            spent += dt
            tokens_seen += float(data.real_tokens[rows].sum())
            targets_seen += float(data.target_mask[rows].sum())
        metrics = {f"sft/{k}": float(v) for k, v in out.items()}
        metrics["sft/lr"] = float(schedule(step - 1))
        bar.set_postfix(loss=f"{metrics.get('sft/loss', float('nan')):.3f}")
        logged = step % log_every == 0 or step == 1
        if logged:
            monitor.scalars(metrics, step)
        if callback is not None:
            callback(step, spent + compile_s)
        if max_seconds and sharding.agree_any(spent + compile_s >= max_seconds):  # all hosts stop together
            break
    bar.close()
    if step and not logged:  # the last step's metrics, unless its step logged them (one point per step)
        monitor.scalars(metrics, step)
    metrics.update({"sft/steps": float(step), "sft/train_seconds": spent + compile_s,
                    "sft/compile_seconds": compile_s,
                    "sft/tokens_per_s": tokens_seen / max(spent, 1e-9),
                    "sft/trained_tokens_per_s": targets_seen / max(spent, 1e-9),
                    "sft/step_seconds": spent / max(step - 1, 1)})
    return metrics


@dataclasses.dataclass
class WarmstartResult:
    """The warm start's metrics (`sft/*`, `val_success_before_warmstart`, `val_success_after_warmstart`,
    `val_after_warmstart/*`) and the validation episodes after it."""

    metrics: dict[str, float]
    after_episodes: list


def run_warmstart(models, run: Any, rollout: Any, env_batch, monitor, *, validate: Callable[[], tuple[dict, list]],
                  success_key: str, mesh=None, show_progress: bool = True, num_demos: int | None = None,
                  steps: int | None = None) -> WarmstartResult:
    """Behaviour-clone `models.actor` on demonstrations of the config's env (run: a RunConfig; rollout: its
    RolloutConfig; env_batch: a batch of the training env); `validate()` -> (metrics, episodes) before and after.
    Logs `sft/*` to `monitor`. The caller decides what follows (RL's KL reference and critic start from the
    warm-started policy)."""
    w = run.warmstart
    steps = int(steps if steps is not None else w.steps)
    t0 = time.perf_counter()
    rows = build_demos(DemoSource(run.env, env_batch, w, rollout, models.tokenizer), num_demos)
    data = prepare_sft_data(rows, share_prefix=bool(w.share_prefix))
    demo_s = time.perf_counter() - t0
    logger.info("Warm-start: %d demo rows (shared prefix %d tokens, suffix width %d) in %.1f s.",
                data.num_rows, len(data.prefix), data.tokens.shape[1], demo_s)
    before, _ = validate()
    last_val: dict[int, tuple] = {}  # the latest in-run validation: {step: (metrics, episodes)}

    def validate_during(step: int, spent: float) -> None:
        if w.val_every and step % w.val_every == 0 and step < steps:
            vm, episodes = validate()
            last_val.clear()
            last_val[step] = (vm, episodes)
            monitor.scalars({f"sft/{k}": v for k, v in vm.items()}, step)
            logger.info("Warm-start step %d (%.0f s): val success %.3f.", step, spent, vm.get(success_key, 0.0))

    monitor.scalars({f"sft/{k}": v for k, v in before.items()}, 0)
    metrics = train_sft(models.actor, data, w, monitor, steps=steps, max_seconds=float(w.max_seconds), mesh=mesh,
                        callback=validate_during, show_progress=show_progress)
    last = int(metrics["sft/steps"])
    if last in last_val:  # max_seconds ended the warm start right after a validation: the same weights
        after, after_episodes = last_val[last]
    else:
        after, after_episodes = validate()
        monitor.scalars({f"sft/{k}": v for k, v in after.items()}, last)
    monitor.flush()
    metrics.update({"sft/num_rows": float(data.num_rows), "sft/demo_seconds": demo_s,
                    "val_success_before_warmstart": float(before.get(success_key, 0.0)),
                    "val_success_after_warmstart": float(after.get(success_key, 0.0))})
    metrics.update({f"val_after_warmstart/{k[4:]}": v for k, v in after.items()})
    logger.info("Warm-start: %d steps in %.0f s, loss %.3f, token accuracy %.3f, val success %.3f -> %.3f.",
                metrics["sft/steps"], metrics["sft/train_seconds"], metrics["sft/loss"],
                metrics["sft/token_accuracy"], metrics["val_success_before_warmstart"],
                metrics["val_success_after_warmstart"])
    return WarmstartResult(metrics, after_episodes)
