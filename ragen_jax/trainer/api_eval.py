"""`run.py --mode=eval --config.model.api_base=URL --config.model.api_model=NAME`: the validation episodes played by
any OpenAI-compatible chat-completions endpoint (RAGEN's API evaluation), with no local model.

Each turn sends the RAGEN messages our rollout builds (`build_messages` over the episode's turns, as text) to
POST {api_base}/chat/completions with the val temperature and max_tokens = rollout.response_length; the reply's
text is parsed as a sampled response would be, the env stepped and the turn booked as the rollout books it
(`book_turn`). Requests run on a bounded thread pool (model.api_concurrency), each with a timeout and a bounded
retry; a request that still fails, or a reply with no text, ends only its episode, with the reason recorded (the
metrics leave it out, as they leave out env errors). The `openai` package is the client (pinned in
requirements-test.txt, already used by tests/test_serve_api.py: its timeouts, retries with backoff and error types are
the ones every OpenAI-compatible server is tested with); the key is OPENAI_API_KEY when set, never logged.

Responses have no token ids here: a turn's `response_tokens` is an empty list (it marks the turn as played), so the
token-length metrics are left out and `val/api/completion_tokens` reports the server's `usage` instead.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import time
from typing import Any, Callable, Sequence

import numpy as np

from ragen_jax.config.checks import validation_envs
from ragen_jax.config.sections import env_tag
from ragen_jax.errors import ConfigError
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.episodes import _row_lookups, book_turn, open_episodes
from ragen_jax.rollout.metrics import episode_metrics
from ragen_jax.rollout.parsing import parse_response, recorded_response
from ragen_jax.rollout.prompts import build_messages
from ragen_jax.rollout.rewards import group_seeds
from ragen_jax.rollout.types import Episode


API_ERROR = "ApiError"  # the prefix of an episode's error when its endpoint failed it


class ApiReplyError(RuntimeError):
    """A request that failed after its retries, or a reply with no text: fails one episode."""


class ChatClient:
    """Chat completions of one model at an OpenAI-compatible endpoint -> the reply's text and its token count."""

    def __init__(self, api_base: str, model: str, *, temperature: float, max_tokens: int, top_p: float = 1.0,
                 timeout_s: float = 60.0, retries: int = 2):
        try:
            import openai
        except ImportError as e:
            raise ConfigError("model.api_base needs the `openai` package (requirements-test.txt pins it): "
                              "pip install openai") from e
        self.model, self.temperature, self.max_tokens, self.top_p = model, temperature, max_tokens, top_p
        self._client = openai.OpenAI(base_url=api_base.rstrip("/"), api_key=os.environ.get("OPENAI_API_KEY") or "none",
                                     timeout=timeout_s, max_retries=retries)

    def complete(self, messages: list[dict]) -> tuple[str, int]:
        """The reply to `messages` -> (text, completion tokens, 0 when the server does not say); ApiReplyError
        when the request fails after its retries or the reply holds no text."""
        extra = {} if self.top_p >= 1.0 else {"top_p": self.top_p}
        try:
            reply = self._client.chat.completions.create(model=self.model, messages=messages,
                                                         temperature=self.temperature, max_tokens=self.max_tokens,
                                                         **extra)
            text = reply.choices[0].message.content
        except Exception as e:  # noqa: BLE001 - any failure of the endpoint fails this episode, never the run
            raise ApiReplyError(f"{type(e).__name__}: {_short(str(e))}") from e
        if not isinstance(text, str):
            raise ApiReplyError(f"the reply holds no text (message content {text!r})")
        usage = getattr(reply, "usage", None)
        return text, int(getattr(usage, "completion_tokens", 0) or 0)


def _short(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[:limit] + "..."


def api_messages(ep: Episode, cfg: RolloutConfig) -> list[dict]:
    """The chat messages of episode `ep`'s current turn as text: the rollout's messages (its context mode and
    window), with no token splicing (the endpoint renders its own chat template)."""
    turn = len(ep.history) - 1
    if cfg.context_mode == "full" or cfg.context_window < 0:
        start = 0
    else:
        start = max(0, turn - cfg.context_window + 1)
    messages = build_messages(ep.system, ep.history, start, mode=cfg.context_mode,
                              max_tokens=ep.prompt_max_tokens or cfg.response_length, enable_think=cfg.enable_think,
                              format_penalty=cfg.format_penalty, style=ep.prompt_style)
    ep.history[-1].history_start = start
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _fail(ep: Episode, reason: str) -> None:
    ep.error = f"{API_ERROR}: {reason}"
    ep.terminated, ep.truncated, ep.success = False, True, False


def opened_reply(text: str, cfg: RolloutConfig) -> str:
    """The reply as the rollout parses a sampled response: after the opening tag its generation prompt ends with
    ("<think>", or "<answer>" without thinking), which an endpoint cannot be made to start with; a reply that holds
    the tag itself is taken as it is."""
    tag = "<think>" if cfg.enable_think else "<answer>"
    return text if tag in text else tag + text


def book_reply(ep: Episode, text: str, lookup, cfg: RolloutConfig) -> list:
    """Book `text` as episode `ep`'s response to its current turn, parsed as the rollout parses a sampled one
    (penalty, valid turns; see `opened_reply`) -> the actions it parses to, within the episode's action budget."""
    record = ep.history[-1]
    text = opened_reply(text, cfg)
    record.response_text = text
    record.response_tokens = []  # played; the endpoint gives no token ids
    parsed = parse_response(text, action_lookup=lookup, max_actions=cfg.max_actions_per_turn,
                            enable_think=cfg.enable_think, separator=cfg.action_sep)
    record.recorded_text = recorded_response(text, enable_think=cfg.enable_think,
                                             max_actions=cfg.max_actions_per_turn, separator=cfg.action_sep)
    record.invalid = not parsed.turn_is_valid
    ep.valid_turns += int(parsed.turn_is_valid)
    if record.invalid:
        ep.penalty += cfg.format_penalty
    return list(parsed.actions)[: cfg.max_actions_per_traj - ep.num_actions]


def play_env(env, cfg: RolloutConfig, tag: str, seeds, group_ids, complete: Callable[[list[dict]], tuple[str, int]],
             pool: concurrent.futures.Executor) -> tuple[list[Episode], list[int]]:
    """Play one episode per seed of `env` (an EnvBatch of len(seeds)) through `complete` -> (episodes, the
    completion tokens of every answered turn). Each turn's requests of the open episodes run on `pool`."""
    n = len(seeds)
    observations = env.reset([int(s) for s in seeds], instances=list(range(n)))
    if any(len(pictures) for pictures in getattr(env, "last_images", None) or ()):
        raise ConfigError(f"model.api_base sends text turns, but {tag}'s observations hold images: evaluate a local "
                          "(vision-language) model instead.")
    episodes = open_episodes(env, cfg, tag, seeds, group_ids, observations)
    lookups = _row_lookups(env, n)
    active = np.ones(n, bool)
    for b, error in enumerate(getattr(env, "reset_errors", None) or [""] * n):
        if error:
            episodes[b].error, episodes[b].truncated = error, True
            active[b] = False
    tokens: list[int] = []
    while active.any():
        rows = np.flatnonzero(active)
        futures = {int(b): pool.submit(complete, api_messages(episodes[b], cfg)) for b in rows}
        actions: list = [[] for _ in range(n)]
        stepping = np.zeros(n, bool)
        for b, future in futures.items():
            try:
                text, count = future.result()
            except ApiReplyError as e:
                _fail(episodes[b], str(e))
                active[b] = False
                continue
            tokens.append(count)
            actions[b] = book_reply(episodes[b], text, lookups[b], cfg)
            stepping[b] = True
        if not stepping.any():
            break
        result = env.step(actions, stepping)
        for b in np.flatnonzero(stepping):
            if book_turn(episodes[b], result, int(b), actions[b], cfg):
                active[b] = False
    return episodes, tokens


def api_metrics(per_env: Sequence[tuple[str, list[Episode]]], tokens: Sequence[int]) -> dict[str, float]:
    """`val/{tag}/...` as validation reports them, plus how many episodes the endpoint failed
    (`val/api/failed_episodes`) and the mean completion tokens of an answered turn (`val/api/completion_tokens`)."""
    metrics = {f"val/{k}": v for tag, episodes in per_env for k, v in episode_metrics(episodes, tag).items()}
    everything = [ep for _, episodes in per_env for ep in episodes]
    metrics["val/api/failed_episodes"] = float(sum(ep.error.startswith(API_ERROR) for ep in everything))
    metrics["val/api/completion_tokens"] = float(np.mean(tokens)) if tokens else 0.0
    metrics["eval/num_episodes"] = float(len(everything))
    return metrics


def api_out_dir(workdir: str, model: str) -> str:
    """<workdir>/eval/api_<model, made a folder name>."""
    return os.path.join(os.path.abspath(workdir), "eval", "api_" + (re.sub(r"[^A-Za-z0-9._-]+", "_", model) or "model"))


def run_api_eval(run: Any, workdir: str, client: Any | None = None) -> dict[str, float]:
    """Play every validation env's val.groups x val.group_size episodes through run.model.api_base; write config,
    metrics and rollouts to `api_out_dir` -> the metrics."""
    from ragen_jax.config.files import write_config_json
    from ragen_jax.rollout.dump import dump_kwargs, write_jsonl
    from ragen_jax.trainer.setup import env_batch

    cfg, m, val = RolloutConfig.of(run), run.model, run.val
    if cfg.action_format == "tool_call":
        raise ConfigError("model.api_base evaluates text turns in the answer action format: set "
                         "rollout.action_format='answer' (or evaluate a local model).")
    client = client or ChatClient(m.api_base, m.api_model, temperature=0.0 if val.greedy else val.temperature,
                                  max_tokens=cfg.response_length, top_p=val.top_p, timeout_s=m.api_timeout_s,
                                  retries=m.api_retries)
    names = validation_envs(val.name, run.env.name)
    per_env, tokens = [], []
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=m.api_concurrency) as pool:
        for e, name in enumerate(names):
            seeds, gids = group_seeds(val.seed + e * val.groups, val.groups, val.group_size)
            env = env_batch(run.env, name, len(seeds), val.env_kwargs)
            try:
                episodes, counts = play_env(env, cfg, env_tag(name), seeds, gids, client.complete, pool)
            finally:
                getattr(env, "close", lambda: None)()
            per_env.append((env_tag(name), episodes))
            tokens += counts
    metrics = api_metrics(per_env, tokens)
    episodes = [ep for _, eps in per_env for ep in eps]
    out = api_out_dir(workdir, m.api_model)
    os.makedirs(out, exist_ok=True)
    write_config_json(out, run, {})
    jsonl = write_jsonl(os.path.join(out, "rollouts.jsonl"), episodes, **dump_kwargs(cfg))
    evaluated = f"{m.api_model} at {m.api_base}"
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump({"evaluated": evaluated, **metrics}, f, indent=2)
    print(api_summary(evaluated, per_env, time.perf_counter() - t0) + f"\nRollouts: {jsonl}; metrics: "
          f"{os.path.join(out, 'metrics.json')}")
    return metrics


def api_summary(evaluated: str, per_env: Sequence[tuple[str, list[Episode]]], seconds: float) -> str:
    """Lines: what was evaluated, per env its success over the episodes that finished and how many the endpoint
    failed (with the commonest reason)."""
    lines = [f"Evaluated {evaluated} in {seconds:.1f}s:"]
    for tag, episodes in per_env:
        failed = [ep.error for ep in episodes if ep.error.startswith(API_ERROR)]
        counted = [ep for ep in episodes if not ep.error]
        rate = f"{np.mean([ep.success for ep in counted]):.3f}" if counted else "n/a"
        line = f"  {tag}: success {rate} over {len(counted)} of {len(episodes)} episodes"
        if failed:
            common = max(set(failed), key=failed.count)
            line += f"; {len(failed)} failed at the endpoint (e.g. {common[:200]})"
        lines.append(line)
    return "\n".join(lines)
