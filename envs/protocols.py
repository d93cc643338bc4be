"""The two kinds of environment and the one batch interface the rollout engine drives.

- `JaxEnv`: a gymnax environment (pure `reset_env` / `step_env` on `flax.struct` dataclasses,
  vmappable and jittable) plus host-side text rendering and an action lookup.
- `HostEnv`: a Gym-style text environment (`reset(seed)` / `step(action_text)`), for text and tool
  tasks and for users' own environments.
- `ToolEnv`: a host environment whose actions are tool calls (`tools()` JSON schemas, `call(name, arguments)`),
  played with `rollout.action_format="tool_call"`.
- `EnvBatch`: what the rollout sees. A batch of episodes of one env that advance turn by turn;
  each turn executes the (already parsed) actions of every active episode and returns text
  observations, summed turn rewards and done flags. Both kinds are wrapped into it (`envs.batch`).
"""

from __future__ import annotations

import abc
import inspect
import dataclasses
from typing import Any, Generic, Sequence, TypeVar

import numpy as np
from gymnax.environments import environment as gymnax_env

from ragen_jax.tool_calls import ToolCall, parse_tool_calls, tool_name

# One action as parsed from the model's answer: an action id for envs with an action lookup,
# the raw (stripped) answer text for envs without one, a ToolCall in the tool-call action format.
Action = int | str | ToolCall

TState = TypeVar("TState")
TParams = TypeVar("TParams")


class JaxEnv(gymnax_env.Environment[TState, TParams], Generic[TState, TParams]):
    """A gymnax environment that can also be played in text.

    Subclasses implement gymnax's `reset_env(key, params) -> (obs, state)` and
    `step_env(key, state, action, params) -> (obs, state, reward, terminated, info)`; `info` must
    hold `action_is_effective` and `success` as arrays so a vmapped batch can report them.
    The host-side methods below work on one *unbatched* state converted to numpy.
    """

    # Case-insensitive action names -> action ids, e.g. {"up": 0, ...}. Keys are lower-case.
    action_lookup: dict[str, int] = {}

    @property
    def action_names(self) -> list[str]:
        """Display names of the actions in id order (e.g. ["Up", "Down", "Left", "Right"])."""
        raise NotImplementedError

    def instruction(self) -> str:
        """Task description for the system prompt (RAGEN's `env_instruction`)."""
        raise NotImplementedError

    def legend(self) -> str:
        """Symbol legend for the system prompt (RAGEN's `grid_vocab` text); may be empty."""
        return ""

    def render_text(self, state: Any, params: TParams | None = None) -> str:
        """One unbatched state (numpy or jax leaves) -> the text observation."""
        raise NotImplementedError

    def seed_to_key(self, seed: int) -> Any:
        """The PRNG key whose `reset` gives the episode of integer `seed` (same seed, same state)."""
        import jax

        return jax.random.PRNGKey(seed)

    def episode_seed(self, seed: int, instance: int) -> int:
        """The seed that fixes the episode of the env at batch position `instance` given the rollout's `seed`.

        Episodes of a group share a seed, so by default they share every random draw (RAGEN's envs reset
        gymnasium's generator with that seed). An env whose copies in a group should draw independently
        (RAGEN's Bandit adds its instance counter) overrides this.
        """
        del instance
        return int(seed)


class HostEnv(abc.ABC):
    """A Gym-style text environment run on the host.

    `reset(seed) -> (observation_text, info)`;
    `step(action_text) -> (observation_text, reward, terminated, truncated, info)`.
    `info` may carry `success` (bool) and `action_is_valid` / `action_is_effective` (bool), and
    `action_in_lookup` False when the action names none of this episode's (a format-penalised miss).
    Set `action_lookup` to a {lower-case name: id} dict if the env takes named actions that the
    rollout should parse and validate (then `step` receives the canonical action *name*).
    """

    action_lookup: dict[str, int] | None = None
    # Display names, id order; used in the system prompt when `action_lookup` is set.
    action_names: list[str] | None = None
    # Seconds a single reset/step may take before the episode is ended with an error.
    step_timeout_s: float = 60.0

    @abc.abstractmethod
    def instruction(self) -> str:
        """Task description for the system prompt."""

    def legend(self) -> str:
        """Optional symbol legend for the system prompt."""
        return ""

    @abc.abstractmethod
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        """Start the episode of integer `seed`; same seed, same episode."""

    @abc.abstractmethod
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one action; returns (text, reward, terminated, truncated, info)."""

    def scripted_action(self) -> str | ToolCall | None:
        """A scripted policy for warm-start demonstrations (`warmstart.source=oracle` on a host env): the action to
        take in the current state (the answer text, or a ToolCall for a ToolEnv), None when there is none (the
        demo episode stops there). Envs without a script keep this default and need a JSONL of demonstrations."""
        return None

    def close(self) -> None:
        """Release resources (processes, sockets)."""


class ToolEnv(HostEnv):
    """A host environment whose actions are tool calls (`rollout.action_format="tool_call"`).

    `tools()` lists the tools as JSON schemas in OpenAI's shape ({"type": "function", "function": {"name",
    "description", "parameters"}}): the chat template shows them, and the rollout checks each call's arguments
    against them before `call` runs it. `call(name, arguments) -> (observation_text, reward, done, info)`: the text
    is the tool's result, returned to the model in the template's tool role; `info` as for `HostEnv.step` (a call
    the tool rejects, e.g. an expression it cannot read, sets action_is_valid False and says why in the text).
    `step(text)` reads a JSON call from text, so the env also plays in the answer format and over envs.serve.
    """

    @abc.abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas (same list every episode)."""

    @abc.abstractmethod
    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        """Run tool `name` with `arguments` (checked against its schema) -> (text, reward, done, info)."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One call given as text (a <tool_call> block or bare JSON); unreadable text is an invalid action."""
        text = action if "<tool_call>" in action else f"<tool_call>{action}</tool_call>"
        parsed = parse_tool_calls(text, [tool_name(t) for t in self.tools()])
        if parsed.problem or not parsed.calls:
            problem = parsed.problem or "no tool call"
            return (f"Invalid tool call: {problem}.", 0.0, False, False,
                    {"action_is_valid": False, "action_in_lookup": False, "tool_error": problem})
        text, reward, done, info = self.call(parsed.calls[0].name, dict(parsed.calls[0].arguments))
        return text, reward, done, False, info


# What a subclass must define, with the signature the error shows (HostEnv's abstract methods, JaxEnv's stubs).
_REQUIRED = {
    "HostEnv": {"instruction": "def instruction(self) -> str", "reset": "def reset(self, seed: int)",
                "step": "def step(self, action: str)"},
    "ToolEnv": {"instruction": "def instruction(self) -> str", "reset": "def reset(self, seed: int)",
                "tools": "def tools(self) -> list[dict] (JSON schemas)",
                "call": "def call(self, name: str, arguments: dict)"},
    "JaxEnv": {"reset_env": "def reset_env(self, key, params)", "step_env": "def step_env(self, key, state, action, "
               "params)", "instruction": "def instruction(self) -> str", "render_text": "def render_text(self, "
               "state, params=None) -> str", "action_names": "an action_names property (display names, id order)"},
}


def missing_methods(cls: type) -> list[str]:
    """What env class `cls` (a HostEnv or JaxEnv subclass) leaves undefined, as the definitions to add; [] if none."""
    base = JaxEnv if issubclass(cls, JaxEnv) else ToolEnv if issubclass(cls, ToolEnv) else HostEnv
    missing = []
    for name, definition in _REQUIRED[base.__name__].items():
        found = inspect.getattr_static(cls, name, None)
        stubs = [inspect.getattr_static(k, name, None) for k in (base, gymnax_env.Environment)]
        if found is None or any(found is stub for stub in stubs) or getattr(found, "__isabstractmethod__", False):
            missing.append(definition)
    return missing


@dataclasses.dataclass
class TurnResult:
    """What one turn of a batch of episodes returns (all arrays have leading dim B).

    observations: new text observation per episode ("" for inactive episodes).
    rewards [B] float32: sum of env rewards over the actions executed this turn.
    terminated / truncated [B] bool: env-side episode end (truncated = the env's own step cap).
    success [B] bool: the env reports the task solved.
    actions_executed [B] int32: how many actions actually ran (execution stops at the first done).
    action_is_effective [B] bool: the turn's last executed action changed the state (RAGEN keeps the last
        action's info for a multi-action turn).
    errors: per-episode error text ("" when fine): an env that raised or timed out ends its
      episode (terminated) with the error recorded here, and the batch continues.
    infos: per-episode extra info dicts (numbers are averaged into metrics by the rollout).
    """

    observations: list[str]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    actions_executed: np.ndarray
    action_is_effective: np.ndarray
    errors: list[str]
    infos: list[dict[str, Any]]
    images: list[tuple] | None = None  # per episode, the new observation's pictures (image formats; None: text)


class EnvBatch(abc.ABC):
    """A fixed-size batch of episodes of one environment, advanced in lockstep by the rollout."""

    # Lower-case name -> id when answers are parsed into named actions; None = free text action.
    action_lookup: dict[str, int] | None
    # Display action names (for the system prompt) or None.
    action_names: list[str] | None
    # Whether `step` may run for disjoint sets of rows at once (from several threads): the continuous rollout
    # engine then steps the envs of finished turns in the background while the other episodes keep decoding.
    concurrent_steps: bool = False

    @property
    @abc.abstractmethod
    def batch_size(self) -> int:
        """Number of episodes B."""

    @abc.abstractmethod
    def instruction(self) -> str:
        """Task description for the system prompt."""

    def legend(self) -> str:
        """Symbol legend for the system prompt."""
        return ""

    @abc.abstractmethod
    def reset(self, seeds: Sequence[int], instances: Sequence[int] | None = None) -> list[str]:
        """Start B episodes, episode i from integer seed `seeds[i]`; returns B observations.

        instances [B]: each episode's position in the whole rollout batch (default 0..B-1); an env may
        fold it into its randomness (see `JaxEnv.episode_seed`), never into anything else.
        """

    @abc.abstractmethod
    def step(self, actions: Sequence[Sequence[Action]], active: np.ndarray) -> TurnResult:
        """Run each active episode's actions in order, stopping at the first done.

        actions: B lists (possibly empty) of parsed actions; active [B] bool. Inactive episodes
        and episodes with no action are left unchanged (reward 0, not done).
        """

    def close(self) -> None:
        """Release resources."""
