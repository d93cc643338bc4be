"""Optimizers from config: AdamW with warmup + constant/cosine schedule and global-norm clipping."""

from __future__ import annotations

from typing import Any, Mapping

import optax


def make_schedule(cfg: Mapping[str, Any], total_updates: int) -> optax.Schedule:
    """Linear warmup over `warmup_steps` updates, then constant or cosine decay to 0."""
    lr, warmup = float(cfg["lr"]), int(cfg["warmup_steps"])
    kind = cfg["schedule"]
    if kind == "constant":
        main = optax.constant_schedule(lr)
    elif kind == "cosine":
        main = optax.cosine_decay_schedule(lr, max(total_updates - warmup, 1))
    else:
        raise ValueError(f"Unknown lr schedule {kind!r}; use 'constant' or 'cosine'.")
    if warmup <= 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])


def make_optimizer(cfg: Mapping[str, Any], total_updates: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optimizer, schedule): clip_by_global_norm(grad_clip) then AdamW(schedule)."""
    schedule = make_schedule(cfg, total_updates)
    parts = []
    if cfg["grad_clip"] and cfg["grad_clip"] > 0:
        parts.append(optax.clip_by_global_norm(float(cfg["grad_clip"])))
    parts.append(optax.adamw(schedule, b1=float(cfg["b1"]), b2=float(cfg["b2"]), eps=float(cfg["eps"]),
                             weight_decay=float(cfg["weight_decay"])))
    return optax.chain(*parts), schedule
