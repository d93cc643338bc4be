"""A batch of host envs: Gym-style text envs run concurrently in threads, one turn at a time.

An exception or timeout ends only that episode, with the error recorded; an env that timed out may still be running
in its thread, so it is never called again (a factory builds a fresh one in its slot at the next reset).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from envs.errors import EnvSetupError
from envs.host_checks import checked_reset, checked_step
from envs.protocols import Action, EnvBatch, HostEnv, ToolEnv, TurnResult
from envs.timeouts import run_with_timeouts
from ragen_jax.tool_calls import ToolCall


def _close_quietly(env: HostEnv) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def names_by_id(lookup: dict[str, int], names: Sequence[str] | None, env: str) -> list[str]:
    """The name `step` receives for each action id (a parsed action reaches a host env as `names[id]`): `names`
    checked against `lookup`, or without them the first name `lookup` gives each id. EnvSetupError (a ValueError
    about the env's class, not its kwargs) when ids are not 0..n-1 or a display name's lookup id is not its position
    (a 1-based lookup, as RAGEN's envs number actions, would send every action's neighbour)."""
    ids = sorted(set(lookup.values()))
    if ids != list(range(len(ids))):
        raise EnvSetupError(f"{env}.action_lookup has ids {ids}; they must be 0..{len(ids) - 1}, positions in "
                         "action_names (the parsed id i reaches step as action_names[i]). Renumber them from 0.")
    if not names:
        return [next(name for name, i in lookup.items() if i == k) for k in ids]
    wrong = [f"{name!r} at position {k} has id {lookup[name.lower()]}" for k, name in enumerate(names)
             if lookup.get(name.lower(), k) != k]
    if len(names) != len(ids) or wrong:
        raise EnvSetupError(f"{env}.action_names {list(names)} do not follow action_lookup {lookup} in id order"
                         f"{': ' + '; '.join(wrong) if wrong else f' ({len(names)} names for {len(ids)} ids)'}. "
                         "List one display name per id, at the position of its id.")
    return list(names)


def tool_step(env: HostEnv, call: ToolCall) -> tuple:
    """Run one tool call on a ToolEnv -> its result as a checked step 5-tuple (a tool's `done` ends the episode as
    terminated). TypeError when the env has no tools (the rollout's action_format and the env disagree)."""
    if not isinstance(env, ToolEnv):
        raise TypeError(f"A tool call reached {type(env).__name__}, which is no ToolEnv; set "
                        "rollout.action_format='answer' for it.")
    result = env.call(call.name, dict(call.arguments))
    if not (isinstance(result, tuple) and len(result) == 4):
        raise TypeError(f"{type(env).__name__}.call must return (text, reward, done, info), got {result!r:.80}")
    text, reward, done, info = result
    return checked_step((text, reward, done, False, info), type(env).__name__)


class HostEnvBatch(EnvBatch):
    """B host envs run concurrently; an exception or timeout ends only that episode, with the error recorded.

    An env that timed out may still be running in its thread, so it is never called again: given a
    `factory` (a no-argument callable building one env), the next reset puts a fresh instance in its slot
    (the stuck one is closed in the background); without one, or while the factory raises (e.g. a remote env's
    server is down), the slot's later episodes fail with the reason recorded, and the next reset tries again.
    """

    concurrent_steps = True  # each row's env is called on its own; `step` touches only the rows it steps

    def __init__(self, envs: Sequence[HostEnv], factory: Callable[[], HostEnv] | None = None):
        if not envs:
            raise ValueError("HostEnvBatch needs at least one env.")
        self.envs = list(envs)
        self.factory = factory
        self.replaced = 0  # envs rebuilt after a timeout
        first = self.envs[0]
        self.action_lookup = dict(first.action_lookup) if first.action_lookup else None
        self.action_names = list(first.action_names) if first.action_names else None
        if self.action_lookup:
            self.action_names = names_by_id(self.action_lookup, self.action_names, type(first).__name__)
        # the tool schemas of a ToolEnv (rollout.action_format="tool_call"), None for other envs
        self.tools = [dict(t) for t in first.tools()] if isinstance(first, ToolEnv) else None
        self._done = np.zeros(len(self.envs), bool)
        self._observations = [""] * len(self.envs)  # current text, kept through turns without actions
        self._broken = np.zeros(len(self.envs), bool)  # a timed-out env may still be running: never reuse
        self._broken_reason = [""] * len(self.envs)  # why a broken slot has no fresh env
        self.reset_errors = [""] * len(self.envs)

    @property
    def batch_size(self) -> int:
        return len(self.envs)

    def instruction(self) -> str:
        return self.envs[0].instruction()

    def legend(self) -> str:
        return self.envs[0].legend()

    def _replace_broken(self) -> None:
        """A fresh env in every slot whose env timed out (the old one may still be running). After one failed build
        the other slots wait for the next reset: a hung env server makes every build wait its whole timeout, and
        B of them in a row would stall the run for B timeouts."""
        if self.factory is None:
            return
        failure = ""
        for i in np.nonzero(self._broken)[0]:
            if failure:
                self._broken_reason[i] = failure
                continue
            try:
                fresh = self.factory()
            except Exception as e:  # noqa: BLE001 - a failed rebuild fails the slot's episodes, not the run
                failure = self._broken_reason[i] = (f"replacing the env that timed out failed: {type(e).__name__}: "
                                                    f"{e} (retried at the next reset)")
                continue
            stuck = self.envs[i]
            threading.Thread(target=_close_quietly, args=(stuck,), daemon=True).start()
            self.envs[i] = fresh
            self._broken[i] = False
            self._broken_reason[i] = ""
            self.replaced += 1

    def reset(self, seeds: Sequence[int], instances: Sequence[int] | None = None) -> list[str]:
        if len(seeds) != self.batch_size:
            raise ValueError(f"Expected {self.batch_size} seeds, got {len(seeds)}.")
        self._replace_broken()
        calls = [None if broken else (lambda e=env, s=int(seed): checked_reset(e.reset(s)))
                 for env, seed, broken in zip(self.envs, seeds, self._broken)]
        results = run_with_timeouts(calls, [env.step_timeout_s for env in self.envs])
        observations = []
        for i, (result, error, still_running) in enumerate(results):
            if self._broken[i]:
                error = self._broken_reason[i] or ("env was abandoned after an earlier timeout (give HostEnvBatch a "
                                                   "factory to replace timed-out envs)")
            self.reset_errors[i] = error
            self._done[i] = bool(error)
            if still_running:
                self._broken[i] = True
            observations.append("" if error else str(result[0]))
        self._observations = list(observations)
        return observations

    def _episode_turn(self, env: HostEnv, actions: Sequence[Action]) -> dict[str, Any]:
        out = {"observation": "", "reward": 0.0, "terminated": False, "truncated": False, "success": False,
               "executed": 0, "effective": False, "info": {}}
        for action in actions:
            if isinstance(action, ToolCall):
                text, reward, terminated, truncated, info = tool_step(env, action)
            else:
                if isinstance(action, (int, np.integer)):
                    if not self.action_names:
                        raise TypeError(f"Action id {action} given to an env without an action lookup.")
                    action = self.action_names[int(action)]
                text, reward, terminated, truncated, info = checked_step(env.step(str(action)), type(env).__name__)
            info = dict(info or {})
            out.update(observation=text, terminated=bool(terminated), truncated=bool(truncated), info=info)
            out["reward"] += float(reward)
            out["executed"] += 1
            out["success"] = out["success"] or bool(info.get("success", False))
            out["effective"] = bool(info.get("action_is_effective", True))  # the last action's, as RAGEN keeps
            if terminated or truncated:
                break
        return out

    def step(self, actions: Sequence[Sequence[Action]], active: np.ndarray) -> TurnResult:
        b = self.batch_size
        if len(actions) != b:
            raise ValueError(f"Expected {b} action lists, got {len(actions)}.")
        active = np.asarray(active, bool)
        run = active & ~self._done & np.array([len(a) > 0 for a in actions])
        calls = [(lambda e=env, a=list(acts): self._episode_turn(e, a)) if run[i] else None
                 for i, (env, acts) in enumerate(zip(self.envs, actions))]
        timeouts = [env.step_timeout_s * max(1, len(acts)) for env, acts in zip(self.envs, actions)]
        results = run_with_timeouts(calls, timeouts)
        res = TurnResult(observations=[""] * b, rewards=np.zeros(b, np.float32), terminated=np.zeros(b, bool),
                         truncated=np.zeros(b, bool), success=np.zeros(b, bool), actions_executed=np.zeros(b, np.int32),
                         action_is_effective=np.zeros(b, bool), errors=[""] * b, infos=[{} for _ in range(b)])
        for i, (out, error, still_running) in enumerate(results):
            if active[i] and self._done[i] and self.reset_errors[i]:
                error = self.reset_errors[i]  # report a failed reset on the episode's first turn
                self.reset_errors[i] = ""
            if error:
                res.terminated[i], res.errors[i] = True, error
                res.infos[i] = {"error": error, "success": False}
                self._done[i] = True
                if still_running:  # never an env that raised TimeoutError itself: it is not busy
                    self._broken[i] = True
                continue
            if out is None:  # no action this turn: the state is unchanged
                res.observations[i] = self._observations[i] if active[i] and not self._done[i] else ""
                continue
            res.observations[i] = self._observations[i] = out["observation"]
            res.rewards[i] = out["reward"]
            res.terminated[i], res.truncated[i] = out["terminated"], out["truncated"]
            res.success[i] = out["success"]
            res.actions_executed[i] = out["executed"]
            res.action_is_effective[i] = out["effective"]
            res.infos[i] = out["info"]
            self._done[i] = out["terminated"] or out["truncated"]
        return res

    def close(self) -> None:
        for env in self.envs:
            _close_quietly(env)
