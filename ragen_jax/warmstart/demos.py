"""Demonstrations in exactly the rollout's prompt/response format, for supervised warm-starts.

Two sources:
- an oracle policy plays a registered JAX env (Sokoban / FrozenLake: the env's BFS solver,
  re-planned every turn; Bandit: the high-reward arm). Each turn's response is the tokenizer's
  encoding of "</think>{reasoning}<answer>Up || Left</answer>" (the "<think>" generation prefix
  comes from the prompt), recorded as `Episode`s, so `build_batch` makes the training rows;
- a JSONL file of OpenAI chat messages (`warmstart.demo_jsonl`).
Rows (`DemoRows`) carry a loss mask over the response tokens only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import numpy as np
from tqdm import tqdm

from envs.protocols import EnvBatch
from ragen_jax.rollout.batching import build_batch
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.episodes import book_turn, fit_context, open_episodes, strip_end_of_turn
from ragen_jax.rollout.parsing import ACTION_SEP, parse_response, recorded_response
from ragen_jax.rollout.types import Episode

# (unbatched env state as numpy) -> planned action ids from here (None: no solution).
OraclePolicy = Callable[[Any], "list[int] | None"]


@dataclasses.dataclass
class DemoRows:
    """Supervised rows: tokens [N, L] int32, attention_mask [N, L] bool, loss_mask [N, L] f32."""

    tokens: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def concat(cls, parts: Sequence["DemoRows"], pad_id: int) -> "DemoRows":
        """Stack row sets, right-padding to the longest real row."""
        width = max((int(p.attention_mask.sum(1).max(initial=0)) for p in parts), default=1)
        width = max(width, 1)

        def fit(x, fill):
            out = np.full((x.shape[0], width), fill, x.dtype)
            n = min(width, x.shape[1])
            out[:, :n] = x[:, :n]
            return out

        return cls(np.concatenate([fit(p.tokens, pad_id) for p in parts]),
                   np.concatenate([fit(p.attention_mask, False) for p in parts]),
                   np.concatenate([fit(p.loss_mask, 0.0) for p in parts]))

    def save(self, path: str) -> None:
        np.savez(path, tokens=self.tokens, attention_mask=self.attention_mask, loss_mask=self.loss_mask)

    @classmethod
    def load(cls, path: str) -> "DemoRows":
        with np.load(path) as d:
            return cls(d["tokens"], d["attention_mask"], d["loss_mask"])


# ------------------------------------------------------------------------------ oracle policies
def _bandit_arm(state: Any, high: bool) -> int:
    """Bandit's action id of the episode's high-risk (2k+1) or low-risk (2k) arm of pair k."""
    return 2 * int(state.pair) + int(high)


def oracle_policy(env: Any) -> OraclePolicy:
    """The built-in oracle of a JAX env: its `oracle_actions(state)` (BFS), or Bandit's high arm."""
    from envs.bandit.env import Bandit

    if isinstance(env, Bandit):
        return lambda state: [_bandit_arm(state, high=True)]
    if callable(getattr(env, "oracle_actions", None)):
        return env.oracle_actions
    raise ValueError(f"{type(env).__name__} has no oracle (no `oracle_actions(state)`). Pass a "
                     f"`policy` to play_oracle_episodes, or use warmstart.source=<path to a JSONL of "
                     f"chat messages>.")


def random_policy(env: Any, seed: int) -> OraclePolicy:
    """Uniformly random single valid actions: demonstrations that teach the answer format and no skill."""
    from envs.bandit.env import Bandit

    rng = np.random.default_rng(seed)
    if isinstance(env, Bandit):
        return lambda state: [_bandit_arm(state, high=bool(rng.integers(2)))]
    num_actions = int(env.num_actions)
    return lambda state: [int(rng.integers(num_actions))]


def response_text(action_names: Sequence[str], *, reasoning: str = "", enable_think: bool = True,
                  separator: str = ACTION_SEP) -> str:
    """The response after the generation prefix: "</think>{reasoning}<answer>A || B</answer>"."""
    answer = f"<answer>{f' {separator} '.join(action_names)}</answer>"
    if enable_think:
        return f"{reasoning}</think>{answer}"
    return answer[len("<answer>"):]  # the prefix "<answer>" is already in the prompt


def _action_names(env_batch: EnvBatch) -> list[str]:
    if env_batch.action_names:
        return list(env_batch.action_names)
    by_id = sorted((env_batch.action_lookup or {}).items(), key=lambda kv: kv[1])
    return [name for name, _ in by_id]


def _response_tokens(builder: ContextBuilder, text: str, cfg: RolloutConfig) -> list[int]:
    """A demo response's tokens; without stop_at_answer they end with the template's end-of-turn token, which then
    ends generation (the tokenizer's own eos may be another: a base Qwen2.5's `<|endoftext|>`)."""
    tokens = list(builder.tokenizer.encode(text))
    if not cfg.stop_at_answer:  # generation then ends at the end-of-turn token: teach it
        tokens.append(builder.end_of_turn_id)
    return tokens


def check_response_length(num_tokens: int, cfg: RolloutConfig, what: str, shorten: str) -> None:
    """Refuse a demonstration response longer than RL may sample (`response_length` tokens): RL cuts such a
    response off before its answer, so the warm start would teach replies the policy can never finish."""
    if num_tokens > cfg.response_length:
        raise ValueError(f"{what} is {num_tokens} tokens, more than the rollout.response_length={cfg.response_length} "
                         f"RL samples (it would be cut off before its answer). Shorten {shorten} or raise "
                         f"rollout.response_length.")


def play_oracle_episodes(env_batch: EnvBatch, seeds: Sequence[int], tokenizer, cfg: RolloutConfig, *,
                         policy: OraclePolicy | None = None, reasoning_text: str | Callable[[Any], str] = "",
                         tag: str = "demo") -> list[Episode]:
    """Play one episode per seed with an oracle, recording turns as the rollout engine would.

    Each turn the oracle plans from the current state; its first min(max_actions_per_turn,
    actions left) actions become the response. An episode without a plan stops there (unsolved).
    reasoning_text: the thinking of every response, or a function of the (unbatched) state giving it.
    """
    if getattr(env_batch, "state", None) is None and not hasattr(env_batch, "env"):
        raise ValueError("Oracle demos need a JAX env batch (envs.batch.make_env_batch of a JAX env), "
                         "whose states the oracle can read; for host envs use a JSONL of demonstrations.")
    policy = policy or oracle_policy(env_batch.env)
    B = env_batch.batch_size
    if len(seeds) != B:
        raise ValueError(f"Env batch holds {B} episodes but got {len(seeds)} seeds.")
    builder = ContextBuilder(tokenizer, enable_think=cfg.enable_think)
    names = _action_names(env_batch)
    lookup = env_batch.action_lookup
    observations = env_batch.reset([int(s) for s in seeds])
    episodes = open_episodes(env_batch, cfg, tag, seeds, range(B), observations)  # as the engine opens them
    active = np.ones(B, bool)
    for b, error in enumerate(getattr(env_batch, "reset_errors", None) or [""] * B):
        if error:  # the env failed at reset (its first observation): the episode ends unplayed, as in a rollout
            episodes[b].error, episodes[b].truncated, active[b] = error, True, False
    for _ in range(cfg.max_turn):
        if not active.any():
            break
        host_state = jax.device_get(env_batch.state)
        actions: list[list[int]] = [[] for _ in range(B)]
        for b in np.nonzero(active)[0]:
            ep, record = episodes[b], episodes[b].history[-1]
            try:
                plan = policy(jax.tree.map(lambda x: np.asarray(x[b]), host_state))
            except Exception as e:  # noqa: BLE001 - an oracle failing on one state ends only that episode
                ep.error, plan = f"{type(e).__name__}: {e} (in the demo policy)", None
            budget = min(cfg.max_actions_per_turn, cfg.max_actions_per_traj - ep.num_actions)
            if not plan or budget <= 0:  # unsolvable from here (or the policy failed): end the episode unsolved
                active[b] = False
                if ep.num_turns:
                    ep.history.pop()
                ep.truncated = True
                continue
            chosen = [int(a) for a in plan[:budget]]
            state = jax.tree.map(lambda x: np.asarray(x[b]), host_state)
            thinking = reasoning_text(state) if callable(reasoning_text) else reasoning_text
            text = response_text([names[a] for a in chosen], reasoning=thinking, enable_think=cfg.enable_think,
                                 separator=cfg.action_sep)
            fit_context(builder, cfg, ep)  # records the first turn shown, exactly as the engine does
            record.response_tokens = _response_tokens(builder, text, cfg)
            full = builder.generation_suffix + tokenizer.decode(record.response_tokens)
            check_response_length(len(record.response_tokens), cfg, f"The demo response {full!r}",
                                  "its thinking (warmstart.reasoning_text, warmstart.filler_words)")
            record.response_text = strip_end_of_turn(full, builder.eos_texts)
            record.recorded_text = recorded_response(record.response_text, enable_think=cfg.enable_think,
                                                     max_actions=cfg.max_actions_per_turn, separator=cfg.action_sep)
            parsed = parse_response(full, action_lookup=lookup, max_actions=cfg.max_actions_per_turn,
                                    enable_think=cfg.enable_think, separator=cfg.action_sep)
            if list(parsed.actions) != chosen:
                raise ValueError(f"Demo response {full!r} parses to {parsed.actions}, not the oracle's "
                                 f"{chosen}: the tokenizer does not round-trip it (check reasoning_text).")
            ep.valid_turns += 1
            actions[b] = chosen
        result = env_batch.step(actions, active)
        for b in np.nonzero(active)[0]:
            if book_turn(episodes[b], result, b, actions[b], cfg):
                active[b] = False
    return episodes


# Single-token words of the tiny tokenizer that name no action: filler thoughts carry about log(16) nats a word.
FILLER_WORDS = ("then", "so", "the", "next", "step", "check", "path", "think", "plan", "try", "safe", "go", "push",
                "move", "wall", "first")
REASONING_MODES = ("fixed", "state", "filler", "state_filler")


def reasoning_thoughts(mode: str, env: Any, *, text: str = "", filler_words: int = 4,
                       seed: int = 0) -> str | Callable[[Any], str]:
    """What a demonstration thinks, for each of RAGEN-2's regimes on purpose (warmstart.reasoning):

    "fixed": `text` for every input (low H(Z|X), no MI: low-entropy collapse); "state": the env's
    `describe_state(state)` (low H(Z|X), high MI: compressed); "filler": `filler_words` words drawn at random,
    whatever the input (high H(Z|X), no MI: template collapse); "state_filler": the state's description, then
    random words (high H(Z|X), high MI: diverse). The random words come from a generator seeded by `seed`.
    """
    if mode not in REASONING_MODES:
        raise ValueError(f"warmstart.reasoning={mode!r} is not one of {REASONING_MODES}.")
    if mode == "fixed":
        return text
    if mode.startswith("state") and not callable(getattr(env, "describe_state", None)):
        raise ValueError(f"warmstart.reasoning={mode!r} needs {type(env).__name__}.describe_state(state); "
                         "use reasoning='fixed' with warmstart.reasoning_text, or 'filler'.")
    if mode != "state" and filler_words < 1:
        raise ValueError(f"warmstart.reasoning={mode!r} needs warmstart.filler_words >= 1, got {filler_words}.")
    rng = np.random.default_rng(seed)

    def filler() -> str:
        return " ".join(rng.choice(FILLER_WORDS, size=filler_words))

    if mode == "state":
        return env.describe_state
    if mode == "filler":
        return lambda state: filler()
    return lambda state: f"{env.describe_state(state)}, {filler()}"


def oracle_demo_episodes(env_name: str, num_demos: int, tokenizer, cfg: RolloutConfig, *, seed: int,
                         env_kwargs: dict | None = None, reasoning_text: str = "", batch_size: int = 256,
                         only_success: bool = True, max_tries: int = 4,
                         random_actions: bool = False, reasoning: str = "fixed",
                         filler_words: int = 4) -> list[Episode]:
    """`num_demos` oracle episodes of registered env `env_name` on seeds seed, seed+1, ...

    Unsolved episodes (no plan, or a plan longer than the action budget) are skipped when
    `only_success`, trying up to max_tries * num_demos seeds. `random_actions`: a random policy plays
    instead (`random_policy`; every episode is kept), for a warm start that teaches only the format. An episode
    whose env or policy failed (its error recorded, as in a rollout) is never kept.
    `reasoning`: what each response thinks (`reasoning_thoughts`): "fixed" (`reasoning_text`), "state", "filler" or
    "state_filler" (`filler_words` random words).
    """
    from envs.batch import make_env_batch
    from envs.host_batch import HostEnvBatch
    from ragen_jax.warmstart.scripted import has_scripted_policy, play_scripted_episodes

    if num_demos <= 0:
        raise ValueError(f"num_demos must be > 0, got {num_demos}.")
    env_batch = make_env_batch(env_name, batch_size, **(env_kwargs or {}))
    if isinstance(env_batch, HostEnvBatch):  # a host env plays its own script (HostEnv.scripted_action)
        if random_actions or reasoning != "fixed" or not has_scripted_policy(type(env_batch.envs[0])):
            raise ValueError(f"{env_name} is a host env: its demonstrations come from its scripted_action() with "
                             "warmstart.source='oracle' and warmstart.reasoning='fixed', or from a JSONL file "
                             "(docs/running.md, Demonstrations).")

        def play(seeds):
            return play_scripted_episodes(env_batch, seeds, tokenizer, cfg, reasoning_text=reasoning_text,
                                          tag=env_name)
    else:
        policy = random_policy(env_batch.env, seed) if random_actions else None
        thoughts = reasoning_thoughts(reasoning, env_batch.env, text=reasoning_text, filler_words=filler_words,
                                      seed=seed)

        def play(seeds):
            return play_oracle_episodes(env_batch, seeds, tokenizer, cfg, policy=policy, reasoning_text=thoughts,
                                        tag=env_name)
    only_success = only_success and not random_actions
    episodes: list[Episode] = []
    first_error = ""
    next_seed = seed
    with tqdm(total=num_demos, desc=f"demos ({env_name})", leave=False, dynamic_ncols=True,
              disable=jax.process_index() != 0) as bar:  # cleared on an error too, so its message starts a line
        while len(episodes) < num_demos and next_seed - seed < max_tries * num_demos:
            seeds = list(range(next_seed, next_seed + batch_size))
            next_seed += batch_size
            played = play(seeds)
            failed = [ep.error for ep in played if ep.error]  # an env or policy failure never becomes a demo
            first_error = first_error or (failed[0] if failed else "")
            kept = [ep for ep in played if not ep.error and (ep.success or not only_success)]
            episodes.extend(kept)
            bar.update(min(len(kept), num_demos - bar.n))
    if not episodes:
        why = f" ({first_error}: fix the env or its oracle)" if first_error else ": raise the budget"
        raise ValueError(f"The oracle solved none of {next_seed - seed} {env_name} episodes within "
                         f"{cfg.max_actions_per_traj} actions / {cfg.max_turn} turns{why}.")
    return episodes[:num_demos]


# ------------------------------------------------------------------------------ episodes -> rows
def demo_rows(episodes: list[Episode], tokenizer, cfg: RolloutConfig, *, chunk: int = 256) -> DemoRows:
    """Training rows of played episodes via `build_batch` (the RL batch's context mode and masks)."""
    builder = ContextBuilder(tokenizer, enable_think=cfg.enable_think, action_format=cfg.action_format)
    parts = []
    for i in range(0, len(episodes), chunk):
        eps = episodes[i:i + chunk]
        logprobs = {(e, t): (np.zeros(len(r.response_tokens), np.float32),) * 2
                    for e, ep in enumerate(eps) for t, r in enumerate(ep.history) if r.response_tokens is not None}
        batch = build_batch(builder, eps, mode=cfg.context_mode, window=cfg.context_window,
                            max_tokens=cfg.response_length, enable_think=cfg.enable_think,
                            format_penalty=cfg.format_penalty, use_turn_scores=False,
                            norm_method="identity", norm_grouping="batch", logprobs=logprobs,
                            pad_id=tokenizer.pad_token_id)
        keep = batch.attention_mask.any(axis=1)
        parts.append(DemoRows(batch.tokens[keep], batch.attention_mask[keep], batch.loss_mask[keep]))
    if not parts:
        raise ValueError("No demonstration episodes to turn into rows.")
    return DemoRows.concat(parts, tokenizer.pad_token_id)
