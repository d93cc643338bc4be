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
import math
import time
from typing import Any, Sequence

import jax
import numpy as np

from envs.protocols import EnvBatch
from ragen_jax.rollout import metrics as metrics_lib
from ragen_jax.rollout.batching import build_batch, turn_scores_problem
from ragen_jax.rollout.context import ContextBuilder, common_prefix_length
from ragen_jax.rollout.parsing import ACTION_SEP, case_insensitive_lookup, parse_response, recorded_response
from ragen_jax.rollout.prompts import TurnRecord, build_messages, system_prompt
from ragen_jax.rollout.types import Episode, RolloutResult
from ragen_jax.sampling import Sampler, SamplingConfig, episode_turn_keys
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
    action_sep: str = ACTION_SEP  # between an answer's actions [agent_proxy.action_sep]
    context_mode: str = "full"  # full | limited_multi_turn | single_turn
    context_window: int = 1  # turns kept by limited_multi_turn / single_turn, -1 = all [max_context_window]
    prompt_style: str = "ragen"  # ragen | compact (state only; a departure for small models)
    prompt_max_tokens: int = 0  # prompts' "Max response length"; 0: the env's (RAGEN's max_tokens) or response_length
    use_turn_scores: bool = False
    format_penalty: float = -0.1
    reward_norm_method: str = "identity"  # identity | mean_std | mean | asym_clip
    reward_norm_grouping: str = "state"  # state | inductive | batch

    def __post_init__(self):
        problem = turn_scores_problem(self.context_mode, self.use_turn_scores)
        if problem:
            raise ValueError(problem)
        if not (self.context_window >= 1 or self.context_window == -1):
            raise ValueError(f"RolloutConfig.context_window={self.context_window} shows no turn at all (a prompt "
                             "without the current state): use the number of turns to show (>= 1, the current one "
                             "included) or -1 for every turn.")

    def stop_sequences(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """The token sequences that end a response besides the end-of-turn ids (an engine computes them once)."""
        return stop_sequences_for(tokenizer, "</answer>") if self.stop_at_answer else ()

    def stop_gates(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """With thinking, "</answer>" ends a response only after "</think>": RAGEN's parse reads the answer after
        the reasoning, so an "</answer>" the reasoning quotes must not end the turn (an engine computes them once)."""
        return stop_sequences_for(tokenizer, "</think>") if self.stop_at_answer and self.enable_think else ()

    def sampling(self, tokenizer, stop_sequences: tuple[tuple[int, ...], ...], *, temperature: float | None = None,
                 greedy: bool = False, top_p: float | None = None, top_k: int | None = None,
                 stop_after: tuple[tuple[int, ...], ...] = ()) -> SamplingConfig:
        """The sampler's settings for a turn; temperature, top_p and top_k given here replace this config's (a
        validation samples with its own, as veRL's val_kwargs)."""
        return SamplingConfig(
            max_new_tokens=self.response_length,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p if top_p is None else top_p, top_k=self.top_k if top_k is None else top_k, greedy=greedy,
            eos_ids=tuple(tokenizer.eos_token_ids), stop_sequences=stop_sequences, stop_after=stop_after)


STOP_CONTEXTS = (("", ""), (" ", ""), ("\n", ""), ("", "\n"), (" ", "\n"), ("\n", "\n"))


def stop_sequences_for(tokenizer, text: str) -> tuple[tuple[int, ...], ...]:
    """The token sequences that end a response with `text`: its own tokens first, then its tokens after a space or
    a newline and before a newline, each the shortest run of tokens whose text holds `text`. A byte-level BPE
    merges a space into the punctuation after it (Qwen's " </" is one token, not " " + "</"), so `<answer> Up
    </answer>` never ends in the tokens of "</answer>" alone; vLLM's stop strings match the decoded text instead."""
    found: dict[tuple[int, ...], None] = {}
    for before, after in STOP_CONTEXTS:
        ids = list(tokenizer.encode(before + text + after))
        start = max((i for i in range(len(ids)) if text in tokenizer.decode(ids[i:])), default=None)
        if start is None:  # the context changed how `text` itself decodes; nothing to match on
            continue
        end = next(j for j in range(start + 1, len(ids) + 1) if text in tokenizer.decode(ids[start:j]))
        found[tuple(ids[start:end])] = None
    return tuple(found)


class RolloutEngine:
    """Plays batches of episodes with a policy given as split NNX state (`params`).

    With a mesh, this process plays rows `self.rows` of the `batch_size` episodes (all of them with one
    process): its env batch holds `local_batch_size` episodes.
    """

    def __init__(self, graphdef, tokenizer, config: RolloutConfig, batch_size: int, mesh=None, lanes: int = 0):
        self.config = config
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.builder = ContextBuilder(tokenizer, enable_think=config.enable_think)
        self.stop_sequences = config.stop_sequences(tokenizer)
        self.stop_after = config.stop_gates(tokenizer)
        self.sampler = Sampler(graphdef, cache_size=config.max_model_len,
                               pad_id=tokenizer.pad_token_id, batch_size=batch_size, mesh=mesh, lanes=lanes or None)
        self.rows = self.sampler.rows
        self.local_batch_size = self.sampler.local_batch_size

    # ----------------------------------------------------------------------------------------
    def run(self, params: Any, env: EnvBatch, seeds: Sequence[int], group_ids: Sequence[int],
            key: jax.Array, *, tag: str, temperature: float | None = None, greedy: bool = False,
            top_p: float | None = None, top_k: int | None = None, row_multiple: int = 1) -> RolloutResult:
        """Play one episode per seed (episodes of a group share a seed) and build the batch.

        seeds, group_ids [batch_size]: the whole batch; `env` holds this process's `local_batch_size` episodes.
        temperature, top_p, top_k: None = the config's (a validation passes its own).
        """
        cfg = self.config
        B = self.local_batch_size
        play = EpisodeBook.start(self, env, seeds, group_ids, tag, first_episode=self.rows.start)
        sampling = cfg.sampling(self.tokenizer, self.stop_sequences, temperature=temperature, greedy=greedy,
                                top_p=top_p, top_k=top_k, stop_after=self.stop_after)
        cache, cache_lens = self.sampler.init_cache()
        cache_lens = np.array(cache_lens, np.int32)
        active = play.opened.copy()
        turn_times = []
        slot_steps = generated = 0

        for _ in range(cfg.max_turn):
            if not agree_any(active.any()):  # every process makes the same generate calls
                break
            t_turn = time.perf_counter()
            t0 = time.perf_counter()
            new_rows = {}
            for b in np.nonzero(active)[0]:
                cache_lens[b], new_rows[b] = play.next_context(b, int(cache_lens[b]))
            width = max((len(v) for v in new_rows.values()), default=1)
            new_tokens = np.full((B, max(width, 1)), self.tokenizer.pad_token_id, np.int32)
            new_lens = np.zeros(B, np.int32)
            for b, row in new_rows.items():
                new_tokens[b, : len(row)] = row
                new_lens[b] = len(row)
            play.timing["glue"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            keys = episode_turn_keys(key, play.episode_ids(), play.turns())
            out = self.sampler.generate(params, new_tokens, new_lens, keys, sampling,
                                        cache=cache, cache_lens=cache_lens, active=active)
            cache = out.cache
            tokens, lengths, sample_lp, raw_lp, cache_lens = (
                global_to_local_rows(x, self.rows)
                for x in (out.tokens, out.lengths, out.logprobs, out.raw_logprobs, out.cache_lens))
            play.timing["generate"] += time.perf_counter() - t0

            rows = np.nonzero(active)[0]
            slot_steps += int(lengths[rows].max(initial=0)) * B  # every row rides the loop to the slowest one
            generated += int(lengths[rows].sum())
            t0 = time.perf_counter()
            actions = [[] for _ in range(B)]
            for b in rows:
                n = lengths[b]
                actions[b] = play.record_response(b, tokens[b, :n], sample_lp[b, :n], raw_lp[b, :n])
            play.timing["glue"] += time.perf_counter() - t0
            play.step_envs(rows, actions, active)
            turn_times.append(time.perf_counter() - t_turn)

        t0 = time.perf_counter()
        episodes, logprobs = self._gather(play.episodes, play.logprobs)
        result = finish_rollout(self.builder, cfg, self.tokenizer, episodes, logprobs, tag, play.timing, row_multiple)
        result.timing["glue"] += time.perf_counter() - t0
        result.extras["turn_times"] = turn_times
        result.extras["decode_steps_per_token"] = slot_steps / max(generated, 1)
        return result

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


def open_episodes(env: EnvBatch, cfg: RolloutConfig, tag: str, seeds, group_ids, observations) -> list[Episode]:
    """Episodes at their first turn: RAGEN's system prompt of `env`, and the "Max response length" the prompts
    state: `cfg.prompt_max_tokens`, else the env variant's (RAGEN's envs.yaml `max_tokens`), else response_length."""
    names = getattr(env, "prompt_action_names", env.action_names)
    # The legend in every observation_format, as in RAGEN's runs: its ctx_manager gates it on a format read from
    # the custom_envs entry, while its configs set the format in env_config (docs/custom_envs.md).
    system = system_prompt(env.instruction(), env.legend(), names, cfg.max_actions_per_traj, cfg.action_sep,
                           style=cfg.prompt_style)
    shown = cfg.prompt_max_tokens or getattr(env, "prompt_max_tokens", None) or cfg.response_length
    return [Episode(env_tag=tag, seed=int(s), group_id=int(g), system=system, prompt_style=cfg.prompt_style,
                    prompt_max_tokens=int(shown), history=[TurnRecord(state=o, actions_left=cfg.max_actions_per_traj)])
            for s, g, o in zip(seeds, group_ids, observations)]


class ContextOverflowError(ValueError):
    """A turn's context cannot fit max_model_len even with every earlier turn dropped."""


def fit_context(builder: ContextBuilder, cfg: RolloutConfig, ep: Episode) -> np.ndarray:
    """The current turn's context tokens; oldest turns dropped until response_length fits.

    Records the first turn shown on the turn's record (and on the episode in "full" mode).
    Raises ContextOverflowError when the current turn alone does not fit.
    """
    record = ep.history[-1]
    turn = len(ep.history) - 1
    if cfg.context_mode == "full":
        start = ep.history_start
    else:  # the last context_window turns; -1: every turn (RAGEN's max_context_window < 0)
        start = 0 if cfg.context_window < 0 else max(0, turn - cfg.context_window + 1)
    while True:
        messages = build_messages(ep.system, ep.history, start, mode=cfg.context_mode,
                                  max_tokens=ep.prompt_max_tokens or cfg.response_length, enable_think=cfg.enable_think,
                                  format_penalty=cfg.format_penalty, style=ep.prompt_style)
        for m in messages:
            if m["role"] == "assistant":
                m["tokens"] = m["record"].response_tokens
        tokens, _ = builder.assemble(messages, add_generation_prompt=True)
        if len(tokens) + cfg.response_length <= cfg.max_model_len:
            break
        if start >= turn:
            raise ContextOverflowError(
                f"A single turn needs {len(tokens)} context tokens + response_length "
                f"{cfg.response_length} > max_model_len {cfg.max_model_len}. Raise "
                f"rollout.max_model_len or lower rollout.response_length.")
        start += 1
    if cfg.context_mode == "full":
        ep.history_start = start
    record.history_start = start
    return tokens


class EpisodeBook:
    """The host-side bookkeeping of a batch of episodes that both engines share: contexts, responses,
    actions, env results, penalties and the end of each episode, exactly as RAGEN books them."""

    def __init__(self, engine, env: EnvBatch, episodes: list[Episode], first_episode: int):
        self.cfg, self.builder, self.tokenizer = engine.config, engine.builder, engine.tokenizer
        self.env = env
        self.episodes = episodes
        self.first_episode = first_episode  # global index of episodes[0] (for keys and env instances)
        self.lookups = _row_lookups(env, len(episodes))
        self.fed = [np.zeros(0, np.int32) for _ in episodes]  # each episode's tokens as last fed + sampled
        self.contexts: list[np.ndarray | None] = [None] * len(episodes)
        self.ready: list[np.ndarray | None] = [None] * len(episodes)  # each open turn's fitted context
        self.opened = np.ones(len(episodes), bool)  # episodes whose first turn fits (the others ended at start)
        self.logprobs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.timing = {"generate": 0.0, "env": 0.0, "glue": 0.0}

    @classmethod
    def start(cls, engine, env: EnvBatch, seeds, group_ids, tag: str, first_episode: int = 0) -> "EpisodeBook":
        """Reset `env` (one episode per seed of this process's rows) and open the first turn of each."""
        cfg = engine.config
        B = engine.local_batch_size
        if len(seeds) != engine.batch_size or len(group_ids) != engine.batch_size or env.batch_size != B:
            raise ValueError(f"Rollout batch is {engine.batch_size} episodes ({B} played by this process) but got "
                             f"{len(seeds)} seeds, {len(group_ids)} group ids and an env batch of {env.batch_size}.")
        seeds = list(seeds)[first_episode:first_episode + B]
        group_ids = list(group_ids)[first_episode:first_episode + B]
        t0 = time.perf_counter()
        # an episode's position in the whole batch; an env may fold it into its randomness (RAGEN's Bandit)
        observations = env.reset(list(map(int, seeds)), instances=list(range(first_episode, first_episode + B)))
        spent = time.perf_counter() - t0
        episodes = open_episodes(env, cfg, tag, seeds, group_ids, observations)
        book = cls(engine, env, episodes, first_episode)
        book.timing["env"] += spent
        reset_errors = list(getattr(env, "reset_errors", None) or [""] * B)  # HostEnvBatch reports them there
        book.opened = np.array([book._open_turn(b) if not reset_errors[b] else book._fail_at_reset(b, reset_errors[b])
                                for b in range(B)], bool)
        if B and all(ep.error.startswith("ContextOverflowError") for ep in episodes):
            # every episode, so no one env's fault: the config's lengths are too small
            raise ContextOverflowError(episodes[0].error.split(": ", 1)[1])
        return book

    def _fail_at_reset(self, b: int, error: str) -> bool:
        """Episode b's env failed to reset: the episode ends with that error before any turn is sampled (it
        opened on an empty observation and spent a generation first). -> False (not open)."""
        ep = self.episodes[b]
        ep.error = error
        ep.terminated, ep.truncated, ep.success = False, True, False
        return False

    def _open_turn(self, b: int) -> bool:
        """Fit episode b's current turn into max_model_len. An observation too long for it (an env's fault) ends
        only that episode, with the error recorded, so it is never trained on. -> whether the turn is open."""
        ep = self.episodes[b]
        try:
            self.ready[b] = fit_context(self.builder, self.cfg, ep)
            return True
        except ContextOverflowError as e:
            ep.error = f"ContextOverflowError: the env's observation is too long: {e}"
            ep.terminated, ep.truncated, ep.success = False, True, False
            return False

    def episode_ids(self, rows=None) -> np.ndarray:
        rows = np.arange(len(self.episodes)) if rows is None else np.asarray(rows)
        return self.first_episode + rows

    def turns(self, rows=None) -> list[int]:
        rows = range(len(self.episodes)) if rows is None else rows
        return [len(self.episodes[b].history) - 1 for b in rows]

    def next_context(self, b: int, cache_len: int) -> tuple[int, np.ndarray]:
        """Episode b's context for its current turn -> (tokens the cache keeps, the new tokens to feed)."""
        ctx = self.ready[b] if self.ready[b] is not None else fit_context(self.builder, self.cfg, self.episodes[b])
        self.ready[b] = None
        # re-feed at least the last token: a context may equal the previous one (unchanged state)
        start = min(cache_len, common_prefix_length(self.fed[b], ctx), len(ctx) - 1)
        self.contexts[b] = ctx
        return start, ctx[start:]

    def record_response(self, b: int, response: np.ndarray, sample_lp: np.ndarray, raw_lp: np.ndarray) -> list:
        """Book episode b's sampled response (tokens and their log-probs) -> the actions it parses to."""
        cfg, ep = self.cfg, self.episodes[b]
        record = ep.history[-1]
        response = np.asarray(response, np.int32)
        text = self.builder.generation_suffix + self.tokenizer.decode(response.tolist())
        parsed = parse_response(text, action_lookup=self.lookups[b], max_actions=cfg.max_actions_per_turn,
                                enable_think=cfg.enable_think, separator=cfg.action_sep)
        record.response_tokens = response.tolist()
        record.context_tokens = self.contexts[b]
        record.response_text = strip_end_of_turn(text, self.builder.eos_texts)
        record.recorded_text = recorded_response(record.response_text, enable_think=cfg.enable_think,
                                                 max_actions=cfg.max_actions_per_turn, separator=cfg.action_sep)
        record.invalid = not parsed.turn_is_valid
        ep.valid_turns += int(parsed.turn_is_valid)
        if record.invalid:
            ep.penalty += cfg.format_penalty
        self.logprobs[(b, len(ep.history) - 1)] = (np.asarray(sample_lp), np.asarray(raw_lp))
        self.fed[b] = np.concatenate([self.contexts[b], response])
        return list(parsed.actions)[: cfg.max_actions_per_traj - ep.num_actions]

    def step_envs(self, rows: np.ndarray, actions: list, active: np.ndarray) -> list[int]:
        """Step the envs of episodes `rows` with their actions; book the results and clear `active` [B] for
        episodes that ended (their turn cap, action budget, the env's end or an env error). -> ended rows."""
        cfg = self.cfg
        stepping = np.zeros(len(self.episodes), bool)
        stepping[np.asarray(rows, int)] = True
        t0 = time.perf_counter()
        result = self.env.step(actions, stepping)
        self.timing["env"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        ended = []
        for b in rows:
            if book_turn(self.episodes[b], result, b, actions[b], cfg) or not self._open_turn(b):
                active[b] = False
                ended.append(int(b))
        self.timing["glue"] += time.perf_counter() - t0
        return ended


def book_turn(ep: Episode, result, b: int, actions: Sequence, cfg: RolloutConfig) -> bool:
    """Book row b of a played turn `result` (envs.protocols.TurnResult) into episode `ep`, whose last record holds
    the response that chose `actions`: reward, counters, end flags, and the next turn's record unless the episode
    ended. -> whether it ended (the env's end, its action budget, its turn cap or an env error).

    Format penalty (RAGEN): a turn with no valid action or an action outside the lookup is penalised once, when
    parsed (`record_response`), or here when the env reports `action_in_lookup` False (a name that is not one of
    this episode's actions, e.g. Bandit's arms of another pair). An action the env rejects (`action_is_valid`
    False: an illegal Sudoku placement, a failed tactic) already costs what the env's reward says: it counts
    against the `action_is_valid` metric only."""
    record = ep.history[-1]
    info = result.infos[b]
    reward, error = float(result.rewards[b]), result.errors[b]
    if not math.isfinite(reward):  # one NaN would poison its group's advantages and the whole update
        error = error or (f"ValueError: the env returned a non-finite reward ({reward}); the episode is "
                          "left out of training. Make the env's step() return finite rewards.")
        reward = 0.0
    record.reward = reward
    record.actions_executed = int(result.actions_executed[b])
    counted_valid = not record.invalid
    missed_lookup = not bool(info.get("action_in_lookup", True))
    if missed_lookup and not record.invalid:
        record.invalid = True
        ep.penalty += cfg.format_penalty
    if counted_valid and (missed_lookup or not bool(info.get("action_is_valid", True))):
        ep.valid_turns -= 1
    ep.num_actions += int(result.actions_executed[b])
    ep.effective_turns += int(result.action_is_effective[b])
    metrics_lib.accumulate_info(ep.info_sums, info)
    env_done = bool(result.terminated[b] or result.truncated[b])
    if error:
        ep.error = error
    if env_done or ep.num_actions >= cfg.max_actions_per_traj or error or len(ep.history) >= cfg.max_turn:
        ep.terminated = bool(result.terminated[b]) and not error
        ep.truncated = not ep.terminated
        ep.success = bool(result.success[b]) and ep.terminated
        ep.final_state = None if error else result.observations[b]
        return True
    ep.history.append(TurnRecord(state=result.observations[b], actions_left=cfg.max_actions_per_traj - ep.num_actions,
                                 warn_invalid=not actions or missed_lookup))
    return False


def finish_rollout(builder: ContextBuilder, cfg: RolloutConfig, tokenizer, episodes: list[Episode], logprobs: dict,
                   tag: str, timing: dict, row_multiple: int) -> RolloutResult:
    """The training batch and metrics of played episodes."""
    batch = build_batch(builder, episodes, mode=cfg.context_mode, window=cfg.context_window,
                        max_tokens=cfg.response_length, enable_think=cfg.enable_think,
                        format_penalty=cfg.format_penalty, use_turn_scores=cfg.use_turn_scores,
                        norm_method=cfg.reward_norm_method, norm_grouping=cfg.reward_norm_grouping,
                        logprobs=logprobs, pad_id=tokenizer.pad_token_id, row_multiple=row_multiple)
    metrics = metrics_lib.episode_metrics(episodes, tag)
    metrics["response_length"] = metrics_lib.response_length(episodes, cfg.context_mode)
    metrics["response_length_per_turn"] = metrics_lib.response_length_per_turn(episodes)
    return RolloutResult(episodes=episodes, batch=batch, metrics=metrics, timing=dict(timing), extras={})


def _row_lookups(env: EnvBatch, batch_size: int) -> list:
    """Per-episode action lookups keyed by lower-case names (an env may name its actions per episode, e.g. Bandit
    arms)."""
    per_row = getattr(env, "row_action_lookups", None)
    if callable(per_row):
        return [case_insensitive_lookup(lookup) for lookup in per_row()]
    return [case_insensitive_lookup(env.action_lookup)] * batch_size


def strip_end_of_turn(text: str, eos_texts: Sequence[str]) -> str:
    """A response's text without the end-of-turn token it may end with."""
    for eos in eos_texts:
        if eos and text.endswith(eos):
            return text[: -len(eos)]
    return text
