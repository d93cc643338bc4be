"""The StarPO rollout stage: a batch of agents plays episodes turn by turn in lockstep.

Each turn: build every active episode's context (chat template around the exact sampled tokens of
earlier turns), feed only the tokens the KV cache does not hold yet, sample one response per
episode, parse it into actions, step the environments, record rewards and penalties. Finished
episodes stay in the batch, masked (`active`), so shapes never change.

Across hosts each process plays the rows its devices hold (`RolloutEngine.rows`) with its own envs;
the played episodes are then gathered, so every process builds the same batch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Sequence

import jax
import numpy as np

from envs.protocols import EnvBatch
from ragen_jax.rollout import metrics as metrics_lib
from ragen_jax.rollout.batching import build_batch
from ragen_jax.rollout.context import ContextBuilder, common_prefix_length
from ragen_jax.rollout.parsing import parse_response
from ragen_jax.rollout.prompts import TurnRecord, build_messages, system_prompt
from ragen_jax.rollout.types import Episode, RolloutResult
from ragen_jax.sampling import Sampler, SamplingConfig
from ragen_jax.sharding.distributed import agree_any, allgather_objects
from ragen_jax.sharding.placement import global_to_local_rows

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """Rollout settings (RAGEN names in brackets)."""

    max_turn: int = 5
    max_actions_per_turn: int = 2  # [agent_proxy.max_actions_per_turn]
    max_actions_per_traj: int = 10  # [custom_envs.*.max_actions_per_traj]
    response_length: int = 400  # tokens per turn [actor_rollout_ref.rollout.response_length]
    max_model_len: int = 3600  # context + response, tokens [rollout.max_model_len]
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    enable_think: bool = True
    stop_at_answer: bool = True  # stop a turn at "</answer>" (the original has no stop strings)
    context_mode: str = "full"  # full | limited_multi_turn | single_turn
    context_window: int = 1  # turns kept by limited_multi_turn / single_turn [max_context_window]
    prompt_style: str = "ragen"  # ragen | compact (state only; a departure for small models)
    use_turn_scores: bool = False
    format_penalty: float = -0.1
    reward_norm_method: str = "identity"  # identity | mean_std | mean | asym_clip
    reward_norm_grouping: str = "state"  # state | inductive | batch

    def sampling(self, tokenizer, *, temperature: float | None = None, greedy: bool = False) -> SamplingConfig:
        stops = (tuple(tokenizer.encode("</answer>")),) if self.stop_at_answer else ()
        return SamplingConfig(
            max_new_tokens=self.response_length,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p, top_k=self.top_k, greedy=greedy,
            eos_ids=tuple(tokenizer.eos_token_ids), stop_sequences=stops)


class RolloutEngine:
    """Plays batches of episodes with a policy given as split NNX state (`params`).

    With a mesh, this process plays rows `self.rows` of the `batch_size` episodes (all of them with one
    process): its env batch holds `local_batch_size` episodes.
    """

    def __init__(self, graphdef, tokenizer, config: RolloutConfig, batch_size: int, mesh=None):
        self.config = config
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.builder = ContextBuilder(tokenizer, enable_think=config.enable_think)
        self.sampler = Sampler(graphdef, cache_size=config.max_model_len,
                               pad_id=tokenizer.pad_token_id, batch_size=batch_size, mesh=mesh)
        self.rows = self.sampler.rows
        self.local_batch_size = self.sampler.local_batch_size

    # ----------------------------------------------------------------------------------------
    def run(self, params: Any, env: EnvBatch, seeds: Sequence[int], group_ids: Sequence[int],
            key: jax.Array, *, tag: str, temperature: float | None = None, greedy: bool = False,
            row_multiple: int = 1) -> RolloutResult:
        """Play one episode per seed (episodes of a group share a seed) and build the batch.

        seeds, group_ids [batch_size]: the whole batch; `env` holds this process's `local_batch_size` episodes.
        """
        cfg = self.config
        B = self.local_batch_size
        if len(seeds) != self.batch_size or len(group_ids) != self.batch_size or env.batch_size != B:
            raise ValueError(f"Rollout batch is {self.batch_size} episodes ({B} played by this process) but got "
                             f"{len(seeds)} seeds, {len(group_ids)} group ids and an env batch of {env.batch_size}.")
        seeds, group_ids = list(seeds)[self.rows], list(group_ids)[self.rows]
        timing = {"generate": 0.0, "env": 0.0, "glue": 0.0}
        t0 = time.perf_counter()
        # an episode's position in the whole batch; an env may fold it into its randomness (RAGEN's Bandit)
        observations = env.reset(list(map(int, seeds)), instances=list(range(self.rows.start, self.rows.stop)))
        timing["env"] += time.perf_counter() - t0
        names = getattr(env, "prompt_action_names", env.action_names)
        system = system_prompt(env.instruction(), env.legend(), names, cfg.max_actions_per_traj,
                               style=cfg.prompt_style)
        episodes = [Episode(env_tag=tag, seed=int(s), group_id=int(g), system=system, prompt_style=cfg.prompt_style,
                            history=[TurnRecord(state=o, actions_left=cfg.max_actions_per_traj)])
                    for s, g, o in zip(seeds, group_ids, observations)]
        lookups = _row_lookups(env, B)
        sampling = cfg.sampling(self.tokenizer, temperature=temperature, greedy=greedy)
        cache, cache_lens = self.sampler.init_cache()
        cache_lens = np.array(cache_lens, np.int32)
        row_tokens = [np.zeros(0, np.int32) for _ in range(B)]
        active = np.ones(B, bool)
        logprobs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        turn_times = []

        for turn in range(cfg.max_turn):
            if not agree_any(active.any()):  # every process makes the same generate calls
                break
            t_turn = time.perf_counter()
            t0 = time.perf_counter()
            contexts, new_rows = {}, {}
            for b in np.nonzero(active)[0]:
                ctx = self._fit_context(episodes[b])
                # re-feed at least the last token: a context may equal the previous one (unchanged state)
                start = min(int(cache_lens[b]), common_prefix_length(row_tokens[b], ctx), len(ctx) - 1)
                cache_lens[b] = start
                contexts[b], new_rows[b] = ctx, ctx[start:]
            width = max((len(v) for v in new_rows.values()), default=1)
            new_tokens = np.full((B, max(width, 1)), self.tokenizer.pad_token_id, np.int32)
            new_lens = np.zeros(B, np.int32)
            for b, row in new_rows.items():
                new_tokens[b, : len(row)] = row
                new_lens[b] = len(row)
            timing["glue"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            key, sample_key = jax.random.split(key)
            out = self.sampler.generate(params, new_tokens, new_lens, sample_key, sampling,
                                        cache=cache, cache_lens=cache_lens, active=active)
            cache = out.cache
            tokens, lengths, sample_lp, raw_lp, cache_lens = (
                global_to_local_rows(x, self.rows)
                for x in (out.tokens, out.lengths, out.logprobs, out.raw_logprobs, out.cache_lens))
            timing["generate"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            actions: list[list] = [[] for _ in range(B)]
            for b in np.nonzero(active)[0]:
                ep, record = episodes[b], episodes[b].history[-1]
                response = tokens[b, : lengths[b]].astype(np.int32)
                text = self.builder.generation_suffix + self.tokenizer.decode(response.tolist())
                parsed = parse_response(text, action_lookup=lookups[b], max_actions=cfg.max_actions_per_turn,
                                        enable_think=cfg.enable_think)
                record.response_tokens = response.tolist()
                record.context_tokens = contexts[b]
                record.response_text = strip_end_of_turn(text, self.builder.eos_texts)
                record.invalid = not parsed.turn_is_valid
                ep.valid_turns += int(parsed.turn_is_valid)
                if record.invalid:
                    ep.penalty += cfg.format_penalty
                actions[b] = list(parsed.actions)[: cfg.max_actions_per_traj - ep.num_actions]
                logprobs[(b, len(ep.history) - 1)] = (sample_lp[b, : lengths[b]], raw_lp[b, : lengths[b]])
                row_tokens[b] = np.concatenate([contexts[b], response])
            timing["glue"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            result = env.step(actions, active)
            timing["env"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            for b in np.nonzero(active)[0]:
                ep, record = episodes[b], episodes[b].history[-1]
                record.reward = float(result.rewards[b])
                env_valid = result.infos[b].get("action_is_valid", True)
                if not bool(env_valid) and not record.invalid:
                    record.invalid = True  # the env rejected a parsed action (e.g. another episode's arm)
                    ep.penalty += cfg.format_penalty
                    ep.valid_turns -= 1
                ep.num_actions += int(result.actions_executed[b])
                ep.effective_turns += int(result.action_is_effective[b])
                metrics_lib.accumulate_info(ep.info_sums, result.infos[b])
                env_done = bool(result.terminated[b] or result.truncated[b])
                budget_done = ep.num_actions >= cfg.max_actions_per_traj
                if result.errors[b]:
                    ep.error = result.errors[b]
                if env_done or budget_done or result.errors[b] or turn == cfg.max_turn - 1:
                    ep.terminated = bool(result.terminated[b]) and not result.errors[b]
                    ep.truncated = not ep.terminated
                    ep.success = bool(result.success[b]) and ep.terminated
                    active[b] = False
                else:
                    ep.history.append(TurnRecord(
                        state=result.observations[b],
                        actions_left=cfg.max_actions_per_traj - ep.num_actions,
                        warn_invalid=not actions[b]))
            timing["glue"] += time.perf_counter() - t0
            turn_times.append(time.perf_counter() - t_turn)

        t0 = time.perf_counter()
        episodes, logprobs = self._gather(episodes, logprobs)
        batch = build_batch(self.builder, episodes, mode=cfg.context_mode, window=cfg.context_window,
                            max_tokens=cfg.response_length, enable_think=cfg.enable_think,
                            format_penalty=cfg.format_penalty, use_turn_scores=cfg.use_turn_scores,
                            norm_method=cfg.reward_norm_method, norm_grouping=cfg.reward_norm_grouping,
                            logprobs=logprobs, pad_id=self.tokenizer.pad_token_id,
                            row_multiple=row_multiple)
        metrics = metrics_lib.episode_metrics(episodes, tag)
        metrics["response_length"] = float(np.mean([len(r.response_tokens) for ep in episodes
                                                    for r in ep.history if r.response_tokens is not None]))
        timing["glue"] += time.perf_counter() - t0
        return RolloutResult(episodes=episodes, batch=batch, metrics=metrics, timing=timing,
                             extras={"turn_times": turn_times})

    # ----------------------------------------------------------------------------------------
    def _gather(self, episodes: list[Episode], logprobs: dict) -> tuple[list[Episode], dict]:
        """Every process's played rows, in batch order (processes sharing rows contribute them once)."""
        parts = allgather_objects((self.rows.start, episodes, logprobs))
        if len(parts) == 1:
            return episodes, logprobs
        all_episodes: list[Episode] = []
        all_logprobs: dict = {}
        for start, eps, lps in sorted(parts, key=lambda part: part[0]):
            if start < len(all_episodes):
                continue
            all_episodes.extend(eps)
            all_logprobs.update({(b + start, turn): v for (b, turn), v in lps.items()})
        if len(all_episodes) != self.batch_size:
            raise RuntimeError(f"Gathered {len(all_episodes)} episodes from {len(parts)} processes, expected "
                               f"{self.batch_size}: the processes' rows do not tile the batch.")
        return all_episodes, all_logprobs

    def _fit_context(self, ep: Episode) -> np.ndarray:
        return fit_context(self.builder, self.config, ep)


def fit_context(builder: ContextBuilder, cfg: RolloutConfig, ep: Episode) -> np.ndarray:
    """The current turn's context tokens; oldest turns dropped until response_length fits.

    Records the first turn shown on the turn's record (and on the episode in "full" mode).
    """
    record = ep.history[-1]
    turn = len(ep.history) - 1
    start = ep.history_start if cfg.context_mode == "full" else max(0, turn - cfg.context_window + 1)
    while True:
        messages = build_messages(ep.system, ep.history, start, mode=cfg.context_mode,
                                  max_tokens=cfg.response_length, enable_think=cfg.enable_think,
                                  format_penalty=cfg.format_penalty, style=ep.prompt_style)
        for m in messages:
            if m["role"] == "assistant":
                m["tokens"] = m["record"].response_tokens
        tokens, _ = builder.assemble(messages, add_generation_prompt=True)
        if len(tokens) + cfg.response_length <= cfg.max_model_len:
            break
        if start >= turn:
            raise ValueError(
                f"A single turn needs {len(tokens)} context tokens + response_length "
                f"{cfg.response_length} > max_model_len {cfg.max_model_len}. Raise "
                f"rollout.max_model_len or lower rollout.response_length.")
        start += 1
    if cfg.context_mode == "full":
        ep.history_start = start
    record.history_start = start
    return tokens


def _row_lookups(env: EnvBatch, batch_size: int) -> list:
    """Per-episode action lookups (an env may name its actions per episode, e.g. Bandit arms)."""
    per_row = getattr(env, "row_action_lookups", None)
    if callable(per_row):
        return list(per_row())
    return [env.action_lookup] * batch_size


def strip_end_of_turn(text: str, eos_texts: Sequence[str]) -> str:
    """A response's text without the end-of-turn token it may end with."""
    for eos in eos_texts:
        if eos and text.endswith(eos):
            return text[: -len(eos)]
    return text
