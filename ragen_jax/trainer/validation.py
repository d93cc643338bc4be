"""Validation: the validation envs' episodes played with the current policy, and their metrics."""

from __future__ import annotations

import logging
from typing import Any, Sequence

import jax
from tqdm import tqdm

from ragen_jax.rollout import group_seeds
from ragen_jax.rollout.metrics import episode_metrics, response_length, response_length_per_turn

logger = logging.getLogger(__name__)

VALIDATION_KEY_OFFSET = 10_000_000  # validation keys fold in 10M + the RL step: apart from every training key


def validation_key(base_key: jax.Array, step: int, chunk: int) -> jax.Array:
    """The sampling key of chunk `chunk` of the validation after RL step `step` (every run and eval alike)."""
    return jax.random.fold_in(jax.random.fold_in(base_key, VALIDATION_KEY_OFFSET + step), chunk)


def run_validation(engine, params: Any, envs: Sequence, tags: Sequence[str], val: Any, batch: int,
                   base_key: jax.Array, step: int, context_mode: str, *, show_progress: bool = True
                   ) -> tuple[dict[str, float], list]:
    """Validation episodes of each validation env -> (metrics, episodes). val: the config's val section; batch: the
    episodes a chunk plays. Env e's groups take seeds val.seed + e * val.groups + g, as RAGEN numbers the groups of
    all its validation tags. An env's metrics are under `val/{tag}/`, over its val.groups groups (a last chunk's
    extra groups are played, not kept); the untagged ones (response_length, response_length_per_turn) are over
    every env's episodes."""
    per_chunk_groups = batch // val.group_size
    kept: list[list] = [[] for _ in envs]
    chunks = [(e, first) for e in range(len(envs)) for first in range(0, val.groups, per_chunk_groups)]
    bar = tqdm(list(enumerate(chunks)), desc=f"validate after step {step}" if step else "validate", leave=False,
               unit="chunk", disable=not show_progress, dynamic_ncols=True)
    for c, (e, first_group) in bar:
        seeds, gids = group_seeds(val.seed + e * val.groups + first_group, per_chunk_groups, val.group_size)
        res = engine.run(params, envs[e], seeds, gids + first_group, validation_key(base_key, step, c), tag=tags[e],
                         **val_sampling(val))
        kept[e].extend(res.episodes[: val.groups * val.group_size - first_group * val.group_size])
    metrics = {f"val/{k}": value for e, episodes in enumerate(kept)
               for k, value in episode_metrics(episodes, tags[e]).items()}
    episodes = [ep for env_episodes in kept for ep in env_episodes]
    metrics["val/response_length"] = response_length(episodes, context_mode)
    metrics["val/response_length_per_turn"] = response_length_per_turn(episodes)
    return metrics, episodes


def val_sampling(val: Any) -> dict[str, Any]:
    """The sampling keywords of a validation rollout (engine.run's): config.val's temperature, greedy, top_p and
    top_k, never the training rollout's top_p / top_k (RAGEN validates with veRL's val_kwargs)."""
    return dict(temperature=val.temperature, greedy=val.greedy, top_p=val.top_p, top_k=val.top_k)


def report_env_errors(episodes: Sequence, when: str, outcome: str) -> None:
    """One warning: how many `episodes` failed in their env, and the three commonest errors."""
    failed = [ep for ep in episodes if ep.error]
    if not failed:
        return
    kinds: dict[str, int] = {}
    for ep in failed:
        kinds[ep.error] = kinds.get(ep.error, 0) + 1
    shown = "; ".join(f"{n} x {text[:200]}" for text, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
    logger.warning("%s: %d of %d episodes failed in the env and are %s: %s", when, len(failed), len(episodes),
                   outcome, shown)
