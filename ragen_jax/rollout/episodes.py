"""The episode bookkeeping both rollout engines share.

Contexts (chat template around the exact sampled tokens of earlier turns, oldest turns dropped to fit
max_model_len), responses, parsed actions, env results, format penalties and the end of each episode, exactly as
RAGEN books them; then the played episodes become the training batch and metrics (`finish_rollout`).
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from envs.protocols import EnvBatch
from ragen_jax.errors import RagenError
from ragen_jax.rollout import metrics as metrics_lib
from ragen_jax.rollout.batching import build_batch
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.context import ContextBuilder, common_prefix_length
from ragen_jax.rollout.images import ImagePrompts, RowImages, cached_prefix_length, shown_images
from ragen_jax.rollout.parsing import case_insensitive_lookup, parse_response, parse_tool_response, recorded_response
from ragen_jax.rollout.prompts import TurnRecord, build_messages, system_prompt
from ragen_jax.rollout.types import Episode, RolloutResult


def open_episodes(env: EnvBatch, cfg: RolloutConfig, tag: str, seeds, group_ids, observations,
                  images=None) -> list[Episode]:
    """Episodes at their first turn: RAGEN's system prompt of `env`, and the "Max response length" the prompts
    state: `cfg.prompt_max_tokens`, else the env variant's (RAGEN's envs.yaml `max_tokens`), else response_length.
    images: per episode, the first observation's pictures (an image-format env's `last_images`; None: text)."""
    tools = env_tools(env, cfg)
    names = None if tools else getattr(env, "prompt_action_names", env.action_names)
    # The legend in every observation_format, as in RAGEN's runs: its ctx_manager gates it on a format read from
    # the custom_envs entry, while its configs set the format in env_config (docs/custom_envs.md).
    system = system_prompt(env.instruction(), env.legend(), names, cfg.max_actions_per_traj, cfg.action_sep,
                           style=cfg.prompt_style)
    shown = cfg.prompt_max_tokens or getattr(env, "prompt_max_tokens", None) or cfg.response_length
    images = images or [()] * len(observations)
    return [Episode(env_tag=tag, seed=int(s), group_id=int(g), system=system, prompt_style=cfg.prompt_style,
                    prompt_max_tokens=int(shown),
                    history=[TurnRecord(state=o, actions_left=cfg.max_actions_per_traj, images=tuple(im))],
                    tools=tools)
            for s, g, o, im in zip(seeds, group_ids, observations, images)]


def env_tools(env: EnvBatch, cfg: RolloutConfig) -> tuple:
    """The tool schemas episodes of `env` offer: its `tools` in the tool-call action format (ValueError naming the
    fix when it has none), () in the answer format."""
    if cfg.action_format != "tool_call":
        return ()
    tools = tuple(getattr(env, "tools", None) or ())
    if not tools:
        raise ValueError(f"rollout.action_format='tool_call' needs an env with tools (envs.protocols.ToolEnv), but "
                         f"{type(env).__name__} offers none: set rollout.action_format='answer', or use a tool env "
                         "(e.g. env.name=ToolCountdown).")
    return tools


class ContextOverflowError(RagenError, ValueError):
    """A turn's context cannot fit max_model_len even with every earlier turn dropped."""


def fit_context(builder: ContextBuilder, cfg: RolloutConfig, ep: Episode) -> np.ndarray:
    """The current turn's context tokens; oldest turns dropped until response_length fits.

    Records the first turn shown on the turn's record (and on the episode in "full" mode).
    Raises ContextOverflowError when the current turn alone does not fit.
    """
    return fit_image_context(builder, cfg, ep, None)[0]


def fit_image_context(builder: ContextBuilder, cfg: RolloutConfig, ep: Episode,
                      image_prompts: ImagePrompts | None) -> tuple[np.ndarray, RowImages | None]:
    """`fit_context` with the shown turns' pictures as image tokens (`rollout.images`; image_prompts None: text,
    no images) -> (tokens, their RowImages or None)."""
    record = ep.history[-1]
    turn = len(ep.history) - 1
    if cfg.context_mode == "full":
        start = ep.history_start
    else:  # the last context_window turns; -1: every turn (RAGEN's max_context_window < 0)
        start = 0 if cfg.context_window < 0 else max(0, turn - cfg.context_window + 1)
    while True:
        messages = build_messages(ep.system, ep.history, start, mode=cfg.context_mode,
                                  max_tokens=ep.prompt_max_tokens or cfg.response_length, enable_think=cfg.enable_think,
                                  format_penalty=cfg.format_penalty, style=ep.prompt_style, tools=ep.tools)
        for m in messages:
            if m["role"] == "assistant":
                m["tokens"] = m["record"].response_tokens
        if image_prompts is None:
            (tokens, _), images = builder.assemble(messages, add_generation_prompt=True), None
        else:
            tokens, _, images = image_prompts.assemble(builder, messages, shown_images(ep.history, start, turn),
                                                       add_generation_prompt=True)
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
    return tokens, images


class EpisodeBook:
    """The host-side bookkeeping of a batch of episodes that both engines share: contexts, responses,
    actions, env results, penalties and the end of each episode, exactly as RAGEN books them."""

    def __init__(self, engine, env: EnvBatch, episodes: list[Episode], first_episode: int):
        self.cfg, self.builder, self.tokenizer = engine.config, engine.builder, engine.tokenizer
        self.image_prompts: ImagePrompts | None = getattr(engine, "image_prompts", None)  # a VL policy's
        self.env = env
        self.episodes = episodes
        self.first_episode = first_episode  # global index of episodes[0] (for keys and env instances)
        self.lookups = _row_lookups(env, len(episodes))
        self.fed = [np.zeros(0, np.int32) for _ in episodes]  # each episode's tokens as last fed + sampled
        self.contexts: list[np.ndarray | None] = [None] * len(episodes)
        self.ready: list[np.ndarray | None] = [None] * len(episodes)  # each open turn's fitted context
        # with image_prompts: each open turn's context images, and the images of what each row's cache was fed
        self.ready_images: list[RowImages | None] = [None] * len(episodes)
        self.context_images: list[RowImages | None] = [None] * len(episodes)
        self.fed_keys: list[tuple[str, ...]] = [() for _ in episodes]
        self.opened = np.ones(len(episodes), bool)  # episodes whose first turn fits (the others ended at start)
        self.logprobs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.versions: dict[tuple[int, int], np.ndarray] = {}  # the policy version of each response token
        self.timing = {"generate": 0.0, "env": 0.0, "glue": 0.0}

    @classmethod
    def start(cls, engine, env: EnvBatch, seeds, group_ids, tag: str, first_episode: int = 0,
              local: bool = False) -> "EpisodeBook":
        """Reset `env` (one episode per seed of this process's rows) and open the first turn of each. seeds,
        group_ids: the whole batch's, of which this engine plays rows first_episode.. (`local`: only its own, the
        first of them being episode first_episode of the whole batch)."""
        cfg = engine.config
        B = engine.local_batch_size
        expected = B if local else engine.batch_size
        if len(seeds) != expected or len(group_ids) != expected or env.batch_size != B:
            raise ValueError(f"Rollout batch is {engine.batch_size} episodes ({B} played by this process) but got "
                             f"{len(seeds)} seeds, {len(group_ids)} group ids and an env batch of {env.batch_size}.")
        if not local:
            seeds = list(seeds)[first_episode:first_episode + B]
            group_ids = list(group_ids)[first_episode:first_episode + B]
        t0 = time.perf_counter()
        # an episode's position in the whole batch; an env may fold it into its randomness (RAGEN's Bandit)
        observations = env.reset(list(map(int, seeds)), instances=list(range(first_episode, first_episode + B)))
        spent = time.perf_counter() - t0
        episodes = open_episodes(env, cfg, tag, seeds, group_ids, observations, getattr(env, "last_images", None))
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
            self.ready[b], self.ready_images[b] = fit_image_context(self.builder, self.cfg, ep, self.image_prompts)
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
        if self.ready[b] is None:
            self.ready[b], self.ready_images[b] = fit_image_context(self.builder, self.cfg, self.episodes[b],
                                                                    self.image_prompts)
        ctx, images = self.ready[b], self.ready_images[b]
        self.ready[b] = self.ready_images[b] = None
        # re-feed at least the last token: a context may equal the previous one (unchanged state)
        start = min(cache_len, common_prefix_length(self.fed[b], ctx), len(ctx) - 1)
        if images is not None:  # an image whose tokens match but whose picture differs is fed again
            start = cached_prefix_length(start, ctx, images.keys, self.fed_keys[b], self.image_prompts.image_pad_id)
        self.contexts[b], self.context_images[b] = ctx, images
        return start, ctx[start:]

    def record_response(self, b: int, response: np.ndarray, sample_lp: np.ndarray, raw_lp: np.ndarray,
                        versions: np.ndarray | None = None) -> list:
        """Book episode b's sampled response (tokens, their log-probs and, in asynchronous training, the policy
        version that drew each) -> the actions it parses to."""
        cfg, ep = self.cfg, self.episodes[b]
        record = ep.history[-1]
        response = np.asarray(response, np.int32)
        text = self.builder.generation_suffix + self.tokenizer.decode(response.tolist())
        record.response_tokens = response.tolist()
        record.context_tokens = self.contexts[b]
        record.response_text = strip_end_of_turn(text, self.builder.eos_texts)
        if ep.tools:  # the tool-call format: the calls are the actions; why none is valid goes on the record
            parsed = parse_tool_response(record.response_text, tools=ep.tools, max_calls=cfg.max_actions_per_turn,
                                         enable_think=cfg.enable_think)
            record.tool_error = parsed.problem
            record.recorded_text = record.response_text
        else:
            parsed = parse_response(text, action_lookup=self.lookups[b], max_actions=cfg.max_actions_per_turn,
                                    enable_think=cfg.enable_think, separator=cfg.action_sep)
            record.recorded_text = recorded_response(record.response_text, enable_think=cfg.enable_think,
                                                     max_actions=cfg.max_actions_per_turn, separator=cfg.action_sep)
        record.invalid = not parsed.turn_is_valid
        ep.valid_turns += int(parsed.turn_is_valid)
        if record.invalid:
            ep.penalty += cfg.format_penalty
        self.logprobs[(b, len(ep.history) - 1)] = (np.asarray(sample_lp), np.asarray(raw_lp))
        if versions is not None:
            self.versions[(b, len(ep.history) - 1)] = np.asarray(versions, np.int32)
        self.fed[b] = np.concatenate([self.contexts[b], response])
        if self.context_images[b] is not None:
            self.fed_keys[b] = self.context_images[b].keys
        return list(parsed.actions)[: cfg.max_actions_per_traj - ep.num_actions]

    def step_envs(self, rows: np.ndarray, actions: list, active: np.ndarray) -> list[int]:
        """Step the envs of episodes `rows` with their actions; book the results and clear `active` [B] for
        episodes that ended (their turn cap, action budget, the env's end or an env error). -> ended rows."""
        return self.book_step(rows, actions, self.env_step(rows, actions), active)

    def env_step(self, rows: np.ndarray, actions: list):
        """The env's turn for episodes `rows` (envs.protocols.TurnResult); other rows are left as they are, so
        an env batch that steps concurrently (HostEnvBatch) may run this for disjoint rows at once."""
        stepping = np.zeros(len(self.episodes), bool)
        stepping[np.asarray(rows, int)] = True
        t0 = time.perf_counter()
        result = self.env.step(actions, stepping)
        self.timing["env"] += time.perf_counter() - t0
        return result

    def book_step(self, rows: np.ndarray, actions: list, result, active: np.ndarray) -> list[int]:
        """Book an env turn's `result` for episodes `rows` (see step_envs) -> the rows that ended."""
        cfg = self.cfg
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
    images = tuple(result.images[b]) if getattr(result, "images", None) is not None else ()
    ep.history.append(TurnRecord(state=result.observations[b], actions_left=cfg.max_actions_per_traj - ep.num_actions,
                                 warn_invalid=not actions or missed_lookup, images=images))
    return False


def finish_rollout(builder: ContextBuilder, cfg: RolloutConfig, tokenizer, episodes: list[Episode], logprobs: dict,
                   tag: str, timing: dict, row_multiple: int, versions: dict | None = None,
                   image_prompts: ImagePrompts | None = None) -> RolloutResult:
    """The training batch and metrics of played episodes (versions: each response's token policy versions,
    {(episode, turn): [n]}; none: every token version 0; image_prompts: a VL policy's, the rows keep their
    images)."""
    batch = build_batch(builder, episodes, mode=cfg.context_mode, window=cfg.context_window,
                        max_tokens=cfg.response_length, enable_think=cfg.enable_think,
                        format_penalty=cfg.format_penalty, use_turn_scores=cfg.use_turn_scores,
                        norm_method=cfg.reward_norm_method, norm_grouping=cfg.reward_norm_grouping,
                        logprobs=logprobs, pad_id=tokenizer.pad_token_id, row_multiple=row_multiple,
                        versions=versions, image_prompts=image_prompts)
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
