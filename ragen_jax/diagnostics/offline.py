"""Offline collapse report for saved rollouts (the `python -m ragen_jax.diagnostics` CLI).

Two dump kinds:
- a PKL with played episodes (`rollouts.pkl` of `run.py --mode=eval`, or `rollout.dump.write_pkl`:
  {"episodes": [Episode, ...], ...}): the exact sampled token pairs, as the trainer scores them, so
  with the same policy and `step` the report equals the trainer's metrics of that step;
- a JSONL (one trajectory per line {"custom_id", "messages": [OpenAI chat messages], "metadata":
  {group_id, ...}}; or a pickle of a list of such dicts): each turn's prompt is rebuilt with the
  checkpoint tokenizer's chat template (+ "<think>", as the rollout prompts end). Where the record keeps the
  sampled tokens of each response (metadata.response_tokens, as ragen-jax's dumps do), the earlier responses
  are spliced into the prompt and the reasoning is cut from them, as the trainer does; otherwise (RAGEN's
  dumps keep text only) the text between the think tags is re-tokenized.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ragen_jax.errors import MissingFileError
from ragen_jax.diagnostics.collapse import CollapseConfig, RolloutPairs, collapse_metrics
from ragen_jax.diagnostics.cross_score import cross_score
from ragen_jax.diagnostics.pairs import reasoning_tokens, rollout_pairs, step_rng
from ragen_jax.rollout.dump import recorded_response_tokens
from ragen_jax.rollout.dump import read_jsonl

logger = logging.getLogger(__name__)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def load_dump(path: str) -> tuple[str, list[Any]]:
    """("episodes", [Episode]) from a PKL of played episodes, or ("records", [trajectory dict]) from a
    JSONL or a pickled list of trajectory dicts (or {"trajectories": [...]})."""
    if not os.path.exists(path):
        raise MissingFileError(f"Rollout file {path!r} does not exist.")
    if not path.endswith((".pkl", ".pickle")):
        return "records", _checked_records(read_jsonl(path), path)
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except Exception as e:  # noqa: BLE001 - cut short, not a pickle, or another program's classes: one advice
        raise ValueError(f"{path!r} is not a readable pickle ({type(e).__name__}: {e}); it may be cut short. Pass "
                         "run.py --mode=eval's rollouts.pkl, or a .jsonl dump.") from e
    if isinstance(data, Mapping) and "episodes" in data:
        data = data["episodes"]
    elif isinstance(data, Mapping):
        data = data.get("trajectories", data.get("rollouts"))
    if not isinstance(data, list):
        raise ValueError(f"{path!r} must pickle {{'episodes': [Episode, ...]}} (run.py --mode=eval's "
                         "rollouts.pkl), a list of trajectory dicts, or a dict with 'trajectories'.")
    if data and all(hasattr(ep, "history") and hasattr(ep, "group_id") for ep in data):
        return "episodes", data
    return "records", _checked_records(data, path)


def _checked_records(records: list, path: str) -> list[dict[str, Any]]:
    """The trajectory dicts of a dump, each checked: a 'messages' list of {'role': str, 'content': str} chat
    messages and an integer metadata.group_id if any; an empty dump is an error (before the model loads)."""
    if not records:
        raise ValueError(f"{path!r} holds no trajectories; nothing to diagnose.")
    for n, rec in enumerate(records):
        if not isinstance(rec, Mapping) or not isinstance(rec.get("messages"), list):
            raise ValueError(f"Record {n} of {path!r} has no 'messages' list (OpenAI chat messages).")
        for i, m in enumerate(rec["messages"]):
            if not (isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise ValueError(f"Message {i} of record {n} of {path!r} is not a chat message with string 'role' "
                                 f"and 'content': {str(m)[:120]}")
        meta = rec.get("metadata")
        gid = meta.get("group_id") if isinstance(meta, Mapping) else None
        if gid is not None and not _is_int(gid):
            raise ValueError(f"Record {n} of {path!r} has metadata.group_id {gid!r}, not an integer; give integer "
                             "group ids, or none to group trajectories by their first prompt.")
    return records


def _is_int(value: Any) -> bool:
    try:
        return int(value) == float(value)
    except (TypeError, ValueError, OverflowError):
        return False


def load_rollouts(path: str) -> list[dict[str, Any]]:
    """Trajectory records (text) of a JSONL or pickled dump; see `load_dump` for a PKL of episodes."""
    kind, items = load_dump(path)
    if kind != "records":
        raise ValueError(f"{path!r} holds played episodes, not trajectory records; use load_dump.")
    return items


def think_text(content: str) -> str:
    """Text between <think> and </think>; a reply that starts inside the tag (the generation
    prompt already ended with <think>) counts up to </think>. Empty when there is none."""
    match = _THINK.search(content)
    if match:
        return match.group(1).strip()
    if "</think>" in content:
        return content.split("</think>", 1)[0].strip()
    return ""


def _turns(messages: Sequence[Mapping[str, str]]) -> list[tuple[list[dict], str]]:
    """(context before the assistant message, its content) for every assistant message."""
    return [
        ([dict(m) for m in messages[:i]], m["content"])
        for i, m in enumerate(messages)
        if m.get("role") == "assistant"
    ]


def _with_tokens(context: list[dict], responses: list[list[int]]) -> list[dict]:
    """The context's assistant messages carrying their sampled tokens, in order (ContextBuilder splices them)."""
    out, k = [], 0
    for m in context:
        if m["role"] == "assistant":
            m = {**m, "tokens": responses[k]}
            k += 1
        out.append(m)
    return out


def record_pairs(records: Sequence[Mapping[str, Any]], tokenizer: Any, think_tag: str = "<think>") -> RolloutPairs:
    """Prompts and reasonings of every turn [N]: from the recorded response tokens where a record has them (see the
    module docstring), else re-tokenized; groups from metadata.group_id, else by prompt. A record whose env failed
    (a non-empty metadata.error) is left out and counted in num_failed, as the trainer leaves its episode out."""
    from ragen_jax.rollout.context import ContextBuilder

    builder = ContextBuilder(tokenizer, enable_think=think_tag == "<think>")
    think_close = tokenizer.encode("</think>")
    first_prompts, first_reasonings, group_ids = [], [], []
    turn_prompts, turn_reasonings = [], []
    by_prompt: dict[tuple[int, ...], int] = {}
    num_failed = 0
    for rec in records:
        if (rec.get("metadata") or {}).get("error"):
            num_failed += 1
            continue
        prompts, reasonings = [], []
        turns = _turns(rec["messages"])
        recorded = recorded_response_tokens(rec, len(turns))
        for k, (context, content) in enumerate(turns):
            if recorded is not None:
                tokens, _ = builder.assemble(_with_tokens(context, recorded), add_generation_prompt=True)
                prompts.append(tokens.tolist())
                reasonings.append(reasoning_tokens(recorded[k], think_close, tokenizer.decode))
                continue
            text = tokenizer.apply_chat_template(context, add_generation_prompt=True) + think_tag
            prompts.append(tokenizer.encode(text))
            reasonings.append(tokenizer.encode(think_text(content)))
        if not prompts:
            continue
        turn_prompts.append(prompts)
        turn_reasonings.append(reasonings)
        first_prompts.append(prompts[0])
        first_reasonings.append(reasonings[0])
        gid = (rec.get("metadata") or {}).get("group_id")
        if gid is None:
            gid = by_prompt.setdefault(tuple(prompts[0]), len(by_prompt))
        group_ids.append(int(gid))
    if not first_prompts:
        failed = f" ({num_failed} of {len(records)} failed in their env and are left out)" if num_failed else ""
        raise ValueError(f"No trajectory has an assistant message{failed}; nothing to diagnose.")
    return RolloutPairs(first_prompts, first_reasonings, group_ids, turn_prompts, turn_reasonings, num_failed)


def dump_pairs(kind: str, items: list[Any], tokenizer: Any) -> RolloutPairs:
    """The (prompt, reasoning) pairs of `load_dump`'s result: exact tokens for episodes; for records, their
    recorded tokens, else re-tokenized text."""
    if kind == "episodes":
        return rollout_pairs(items, tokenizer.encode("</think>"), tokenizer.decode)
    return record_pairs(items, tokenizer)


def offline_report(
    rollouts: str,
    checkpoint: str,
    *,
    num_samples: int | None = 64,
    seed: int = 0,
    step: int | None = None,
    batch_size: int = 16,
    sampling: str = "both",
    thresholds: Mapping[str, Any] | None = None,
    temperature: float = 1.0,
    std_eps: float = 1e-3,
    checkpoint_step: int | None = None,
) -> dict[str, float]:
    """Collapse metrics of saved rollouts under the policy of `checkpoint` (a Hugging Face folder or a run
    folder; `checkpoint_step` picks a run folder's checkpoint). `step` draws the pairs as the trainer does at
    that step (else a generator seeded by `seed`). A policy from a checkpoint brings the trainer's EMA of the
    marginals' std saved with it, so the *_ema z-scores continue the run's (with checkpoint N-1 and the
    rollouts of step N, the trainer's numbers); other folders start the EMA at this call's std."""
    from flax import nnx

    from ragen_jax.diagnostics.policy import load_policy

    if sampling not in ("both", "first_turn", "trajectory"):
        raise ValueError(f"sampling={sampling!r} must be 'both', 'first_turn' or 'trajectory'.")
    kind, items = load_dump(rollouts)  # a bad dump fails before the model loads
    model, tokenizer, source = load_policy(checkpoint, checkpoint_step)
    ema = saved_ema(checkpoint, checkpoint_step)
    if kind == "episodes":
        what = "episodes, exact sampled tokens"
    else:
        exact = sum(recorded_response_tokens(r, len(_turns(r["messages"]))) is not None for r in items)
        what = ("trajectories, recorded sampled tokens" if exact == len(items) else
                f"trajectories, re-tokenized text ({exact} with recorded tokens)" if exact else
                "trajectories, re-tokenized text")
    logger.info("policy: %s\nrollouts: %s (%d %s)", source, rollouts, len(items), what)
    graphdef, params = nnx.split(model)
    pairs = dump_pairs(kind, items, tokenizer)
    score_fn = functools.partial(
        cross_score, graphdef, params, pad_id=tokenizer.pad_token_id, batch_size=batch_size, temperature=temperature
    )
    config = CollapseConfig(
        first_turn_enabled=sampling in ("both", "first_turn"),
        multi_turn_enabled=sampling in ("both", "trajectory"),
        num_samples=num_samples,
        std_eps=std_eps,
        thresholds=thresholds,
    )
    rng = step_rng(step) if step is not None else np.random.default_rng(seed)
    metrics, _ = collapse_metrics(pairs, score_fn, config, rng, ema)
    metrics["collapse/num_trajectories"] = float(len(pairs.group_ids))
    return metrics


def saved_ema(checkpoint: str, step: int | None) -> dict[str, tuple[float, float]] | None:
    """The diagnostics' EMA state (per sampling, the marginals' std and sequence std) saved with the checkpoint
    the policy comes from; None for a Hugging Face folder (or a checkpoint saved before the diagnostics ran)."""
    from ragen_jax.diagnostics.policy import checkpoint_meta, pick_checkpoint, resolve_policy

    if step is None and resolve_policy(checkpoint)[0] != "orbax":
        return None
    state = checkpoint_meta(checkpoint, pick_checkpoint(checkpoint, step)).get("collapse") or {}
    ema = {k: (float(v[0]), float(v[1])) for k, v in (state.get("ema") or {}).items()}
    if ema:
        logger.info("EMA z-scores continue the EMA saved with the checkpoint: %s",
                    ", ".join(f"{k} std {v[0]:.4g}" for k, v in ema.items()))
    return ema or None


def run_settings(checkpoint: str) -> dict[str, Any]:
    """The trainer's diagnostics settings from a run folder's config.json ({} for any other folder):
    num_samples, sampling, thresholds, std_eps and the scoring temperature, as `offline_report` takes them."""
    from ragen_jax.diagnostics.policy import is_hf_folder

    path = os.path.join(checkpoint, "config.json")
    if is_hf_folder(checkpoint) or not os.path.isfile(path):
        return {}
    with open(path) as f:
        run = json.load(f)
    d, rollout, algo = (run.get(key) for key in ("diagnostics", "rollout", "algo"))
    if not isinstance(d, Mapping):
        return {}
    rollout, algo = (x if isinstance(x, Mapping) else {} for x in (rollout, algo))
    first_turn, trajectory = d.get("first_turn", True), d.get("trajectory", True)
    settings: dict[str, Any] = {
        "num_samples": d.get("max_pairs"),
        "sampling": "trajectory" if trajectory and not first_turn else "first_turn" if not trajectory else "both",
        "thresholds": {k: v for k, v in (("conditional_entropy", d.get("entropy_threshold")),
                                         ("mi", d.get("mi_threshold")), ("mi_relative", d.get("mi_relative")))
                       if v is not None},
        "std_eps": d.get("std_eps"),
        "temperature": (rollout.get("temperature") if algo.get("temperature_in_logprobs", True) else 1.0),
    }
    return {k: v for k, v in settings.items() if v is not None}
