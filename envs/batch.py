"""EnvBatch implementations: a vmapped, jitted batch of a JAX env, and a threaded batch of host envs.

Both run a *turn*: each active episode executes its parsed actions in order, stopping at the
first done, and reports summed rewards, done flags and per-episode info (see `TurnResult`).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs import registry
from envs.protocols import Action, EnvBatch, HostEnv, JaxEnv, TurnResult


def _pad_actions(actions: Sequence[Sequence[Action]], batch_size: int) -> np.ndarray:
    """B lists of action ids -> [B, A] int32 with -1 padding; A a power of two (few compiles)."""
    if len(actions) != batch_size:
        raise ValueError(f"Expected {batch_size} action lists, got {len(actions)}.")
    longest = max([len(a) for a in actions] + [1])
    width = 1 << (longest - 1).bit_length()
    out = np.full((batch_size, width), -1, np.int32)
    for i, row in enumerate(actions):
        for j, a in enumerate(row):
            if not isinstance(a, (int, np.integer)) or a < 0:
                raise TypeError(f"JAX env actions must be non-negative ids; episode {i} got {a!r}. "
                                "Parse answers through the env's action_lookup first.")
            out[i, j] = a
    return out


# folded into an episode's key so its transition draws never reuse the key its reset drew from
_TRANSITION_STREAM = 0x5EED


@jax.jit
def _keys_of_seeds(seeds: jax.Array) -> jax.Array:
    return jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(s), _TRANSITION_STREAM))(seeds)


def episode_keys(env: JaxEnv, episode_seeds: Sequence[int]) -> jax.Array:
    """Per-episode transition keys [B, 2] from the episodes' seeds: step k of episode i draws from
    `fold_in(keys[i], k)`, so a seed fixes every random draw whatever the batch row or rollout."""
    seeds = np.asarray(episode_seeds, np.int64)
    if type(env).seed_to_key is JaxEnv.seed_to_key and np.all((seeds >= 0) & (seeds < 2**31)):
        return _keys_of_seeds(jnp.asarray(seeds, jnp.int32))
    return jnp.stack([jax.random.fold_in(env.seed_to_key(int(s)), _TRANSITION_STREAM) for s in seeds])


def required_info(env: JaxEnv, info: dict, key: str) -> jax.Array:
    """`info[key]` of `env.step_env`'s info, or a ValueError naming the missing key and the contract."""
    if key not in info:
        raise ValueError(f"{type(env).__name__}.step_env returned an info without {key!r} (its keys: {sorted(info)}); "
                         "a JaxEnv's step_env info must hold the bool arrays 'success' and 'action_is_effective' "
                         "(docs/custom_envs.md).")
    return info[key]


def check_step_info(env: JaxEnv, params: Any) -> None:
    """EnvSetupError, before any model work, when `env.step_env`'s info (traced abstractly from a `reset_env`
    state) lacks a key the turn reads. An env whose reset_env cannot be traced this way is checked at its first
    turn instead (`required_info`)."""
    def probe(key):
        return env.step_env(key, env.reset_env(key, params)[1], jnp.int32(0), params)[4]

    try:
        info = jax.eval_shape(probe, jax.random.PRNGKey(0))
    except Exception:  # noqa: BLE001 - e.g. a state only reset_from_seeds builds: the first turn checks it
        return
    for key in ("success", "action_is_effective"):
        try:
            required_info(env, info, key)
        except ValueError as e:
            raise EnvSetupError(str(e)) from None


def make_turn_fn(env: JaxEnv) -> Callable:
    """Jitted `turn(state [B], actions [B, A], active [B], done [B], keys [B], steps [B], params)` of a JAX env.

    Actions run in order with a scan; a row stops at its first terminated/truncated step, at an
    action id -1, or when inactive/already done. The n-th executed step of an episode (counting from
    its reset, `steps` so far) draws its randomness from `fold_in(keys[b], n)`.
    Returns (state, outputs dict of [B] arrays, steps [B] after the turn).
    """
    def row(state, actions, active, done, key, steps, params):
        def body(carry, action):
            st, stop, n, out = carry
            run = active & ~stop & (action >= 0)
            _, st2, reward, terminated, info = env.step_env(jax.random.fold_in(key, n), st,
                                                            jnp.maximum(action, 0), params)
            truncated = env.is_truncated(st2, params) & ~terminated
            st = jax.tree.map(lambda new, old: jnp.where(run, new, old), st2, st)
            valid = info.get("action_is_valid", jnp.bool_(True))
            in_lookup = info.get("action_in_lookup", jnp.bool_(True))
            out = {
                "rewards": out["rewards"] + jnp.where(run, reward, 0.0),
                "terminated": out["terminated"] | (run & terminated),
                "truncated": out["truncated"] | (run & truncated),
                "success": out["success"] | (run & required_info(env, info, "success")),
                "actions_executed": out["actions_executed"] + run.astype(jnp.int32),
                "action_is_effective": jnp.where(run, required_info(env, info, "action_is_effective"),
                                                 out["action_is_effective"]),
                "action_is_valid": out["action_is_valid"] & (~run | valid),
                "action_in_lookup": out["action_in_lookup"] & (~run | in_lookup),
            }
            return (st, stop | (run & (terminated | truncated)), n + run.astype(jnp.int32), out), None

        zeros = {"rewards": jnp.float32(0), "terminated": jnp.bool_(False), "truncated": jnp.bool_(False),
                 "success": jnp.bool_(False), "actions_executed": jnp.int32(0),
                 "action_is_effective": jnp.bool_(False), "action_is_valid": jnp.bool_(True),
                 "action_in_lookup": jnp.bool_(True)}
        (state, _, steps, out), _ = jax.lax.scan(body, (state, done, steps, zeros), actions)
        return state, out, steps

    @jax.jit
    def turn(state, actions, active, done, keys, steps, params):
        return jax.vmap(row, in_axes=(0, 0, 0, 0, 0, 0, None))(state, actions, active, done, keys, steps, params)

    return turn


class JaxEnvBatch(EnvBatch):
    """B episodes of one `JaxEnv`, stepped by one jitted, vmapped scan per turn.

    Every random draw comes from the episode: its seed (`env.episode_seed(seed, instance)`) fixes the
    initial state and the transition randomness (step n of the episode draws from a key derived from the
    seed and n), so the same seeds and actions replay identically and different seeds are independent.
    """

    def __init__(self, env: JaxEnv, batch_size: int, params: Any = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.env = env
        self._batch_size = int(batch_size)
        self.params = env.default_params if params is None else params
        self.action_lookup = dict(env.action_lookup) if env.action_lookup else None
        self.action_names = list(env.action_names) if self.action_lookup else None
        # names listed in the system prompt (an env whose valid names change per episode hides them)
        self.prompt_action_names = getattr(env, "prompt_action_names", self.action_names)
        check_step_info(env, self.params)
        self._turn_fn = make_turn_fn(env)
        self._reset_fn = jax.jit(jax.vmap(lambda k, p: env.reset_env(k, p)[1], in_axes=(0, None)))
        self.state: Any = None
        self.episode_seeds: list[int] = []
        self._keys: jax.Array | None = None
        self._steps = np.zeros(self._batch_size, np.int32)
        self._done = np.zeros(self._batch_size, bool)
        self._success = np.zeros(self._batch_size, bool)
        self.reset_errors = [""] * self._batch_size  # why an episode's first observation could not be rendered

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def instruction(self) -> str:
        return self.env.instruction()

    def legend(self) -> str:
        return self.env.legend()

    def render(self, index: int) -> str:
        """Text observation of episode `index` now."""
        return self.env.render_text(jax.tree.map(lambda x: np.asarray(x[index]), self.state), self.params)

    def _render_rows(self, rows: np.ndarray) -> tuple[list[str], list[str]]:
        """(texts [B], errors [B]) of episodes `rows` [B] bool now ("" elsewhere): a renderer that raises or returns
        no str ends only its episode, with the error recorded."""
        host = jax.device_get(self.state)
        pairs = [checked_render(self.env, jax.tree.map(lambda x: x[i], host), self.params) if rows[i] else ("", "")
                 for i in range(self._batch_size)]
        return [text for text, _ in pairs], [error for _, error in pairs]

    def reset(self, seeds: Sequence[int], instances: Sequence[int] | None = None) -> list[str]:
        if len(seeds) != self._batch_size:
            raise ValueError(f"Expected {self._batch_size} seeds, got {len(seeds)}.")
        instances = range(self._batch_size) if instances is None else instances
        if len(instances) != self._batch_size:
            raise ValueError(f"Expected {self._batch_size} instances, got {len(instances)}.")
        self.episode_seeds = [self.env.episode_seed(int(s), int(i)) for s, i in zip(seeds, instances)]
        if hasattr(self.env, "reset_from_seeds"):
            self.state = self.env.reset_from_seeds(self.episode_seeds, self.params)
        else:
            keys = jnp.stack([self.env.seed_to_key(s) for s in self.episode_seeds])
            self.state = self._reset_fn(keys, self.params)
        self._keys = episode_keys(self.env, self.episode_seeds)
        self._steps[:] = 0
        self._success[:] = False
        observations, self.reset_errors = self._render_rows(np.ones(self._batch_size, bool))
        self._done[:] = [bool(e) for e in self.reset_errors]
        return observations

    def step(self, actions: Sequence[Sequence[Action]], active: np.ndarray) -> TurnResult:
        if self.state is None:
            raise RuntimeError("Call reset(seeds) before step().")
        active = np.asarray(active, bool)
        padded = _pad_actions(actions, self._batch_size)
        self.state, out, steps = self._turn_fn(self.state, jnp.asarray(padded), jnp.asarray(active),
                                               jnp.asarray(self._done), self._keys, jnp.asarray(self._steps),
                                               self.params)
        self._steps = np.array(steps, np.int32)
        out = {k: np.asarray(v) for k, v in jax.device_get(out).items()}
        self._success |= out["success"]
        infos = [{"action_is_effective": bool(out["action_is_effective"][i]), "success": bool(self._success[i]),
                  "action_is_valid": bool(out["action_is_valid"][i]),
                  "action_in_lookup": bool(out["action_in_lookup"][i])} for i in range(self._batch_size)]
        observations, errors = self._render_rows(active)
        failed = np.array([bool(e) for e in errors])
        for i in np.flatnonzero(failed):
            infos[i] = {"error": errors[i], "success": False}
        self._done |= out["terminated"] | out["truncated"] | failed
        return TurnResult(
            observations=observations, rewards=out["rewards"].astype(np.float32),
            terminated=out["terminated"] | failed, truncated=out["truncated"], success=self._success & ~failed,
            actions_executed=out["actions_executed"].astype(np.int32),
            action_is_effective=out["action_is_effective"], errors=errors, infos=infos,
        )


def checked_render(env: JaxEnv, state: Any, params: Any) -> tuple[str, str]:
    """(text, "") of one unbatched state, or ("", error) when `env.render_text` raises or returns no str."""
    try:
        text = env.render_text(state, params)
    except Exception as e:  # noqa: BLE001 - a renderer failing on one state ends only that episode
        where = traceback.extract_tb(e.__traceback__)[-1]
        return "", f"{type(e).__name__}: {e} (in {type(env).__name__}.render_text at {where.filename}:{where.lineno})"
    if not isinstance(text, str):
        return "", (f"TypeError: {type(env).__name__}.render_text returned {_describe(text)}, not a str (the text "
                    "the model reads next)")
    return text, ""


def run_with_timeouts(calls: Sequence[Callable[[], Any] | None],
                      timeouts: Sequence[float]) -> list[tuple[Any, str, bool]]:
    """Run calls concurrently in daemon threads: (result, "", False) or (None, error text, still_running) per call.

    A call that raises gives its exception text (a TimeoutError it raised included); one still running after its
    timeout is abandoned (its thread is a daemon, so it never blocks the process) and reported as a timeout with
    still_running True: only then may its env still be busy.
    """
    boxes: list[dict] = [{} for _ in calls]
    threads: list[threading.Thread | None] = []
    for call, box in zip(calls, boxes):
        if call is None:
            threads.append(None)
            continue

        def target(call=call, box=box):
            try:
                box["result"] = call()
            except BaseException as e:  # noqa: BLE001 - any env failure ends only its episode
                box["error"] = f"{type(e).__name__}: {e}"

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads.append(thread)
    start = time.monotonic()
    results = []
    for thread, box, timeout in zip(threads, boxes, timeouts):
        if thread is None:
            results.append((None, "", False))
            continue
        thread.join(max(0.0, start + timeout - time.monotonic()))
        if thread.is_alive():
            results.append((None, f"TimeoutError: no answer within {timeout:g} s", True))
        elif "error" in box:
            results.append((None, box["error"], False))
        else:
            results.append((box["result"], "", False))
    return results


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _checked_reset(result: Any) -> tuple[str, Any]:
    """A host env's reset result, or TypeError naming what it returned (a bare string would otherwise be read as
    a tuple: its first character the observation)."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str)):
        raise TypeError(f"reset(seed) must return (observation: str, info: dict), got {_describe(result)}")
    return result


_STEP_CONTRACT = "(observation: str, reward: float, terminated: bool, truncated: bool, info: dict)"
# Info fields the rollout reads as flags (success, the action_is_* metrics, the format penalty). A string is refused
# rather than parsed: bool("False") is True, and no spelling of a string is the bool the step contract asks for.
INFO_FLAGS = ("success", "action_is_valid", "action_is_effective", "action_in_lookup")


def _scalar_kind(value: Any) -> str:
    """The numpy dtype kind of a scalar (a Python, numpy or JAX number, bool or 0-d array), "" for anything else
    (a string, None, a vector)."""
    if value is None or isinstance(value, (str, bytes)):
        return ""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not convertible: not a scalar
        return ""
    return array.dtype.kind if array.ndim == 0 and array.dtype.kind in "biuf" else ""


def _is_number(value: Any) -> bool:
    return bool(_scalar_kind(value))


def _is_flag(value: Any) -> bool:
    """A done flag: a bool or a number 0 / 1 (not the string "False", which is truthy)."""
    kind = _scalar_kind(value)
    return kind == "b" or bool(kind) and float(value) in (0.0, 1.0)


def step_result_problems(result: tuple) -> list[str]:
    """What is wrong with the fields of a host env's 5-tuple step result (empty when it keeps the contract)."""
    observation, reward, terminated, truncated, info = result
    problems = [] if isinstance(observation, str) else [
        f"observation {_describe(observation)}, not a str (the text the model reads next; \"\" for none)"]
    problems += [] if _is_number(reward) else [f"reward {_describe(reward)}, not a number (return a float, e.g. 0.0)"]
    problems += [f"{name} {_describe(flag)}, not a bool" for name, flag in (("terminated", terminated),
                                                                             ("truncated", truncated))
                 if not _is_flag(flag)]
    if info is not None and not isinstance(info, dict):
        problems.append(f"info {_describe(info)}, not a dict (return {{}} when there is nothing to report)")
    elif info:
        problems += [f"info[{k!r}] {_describe(info[k])}, not a bool (give True/False or 0/1)" for k in INFO_FLAGS
                     if k in info and not _is_flag(info[k])]
    return problems


def _checked_step(result: Any, env: str = "") -> tuple[str, Any, Any, Any, Any]:
    """A host env's step result, or TypeError naming the env (its class name) and what it returned (the model must
    never read 'None', a string reward never counts as a number, the string "False" never ends an episode nor
    counts as a success)."""
    where = f"{env}.step(action)" if env else "step(action)"
    if not (isinstance(result, tuple) and len(result) == 5):
        raise TypeError(f"{where} must return {_STEP_CONTRACT}, got {_describe(result)}")
    problems = step_result_problems(result)
    if problems:
        raise TypeError(f"{where} returned {'; '.join(problems)}; it must return {_STEP_CONTRACT}")
    return result


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


class HostEnvBatch(EnvBatch):
    """B host envs run concurrently; an exception or timeout ends only that episode, with the error recorded.

    An env that timed out may still be running in its thread, so it is never called again: given a
    `factory` (a no-argument callable building one env), the next reset puts a fresh instance in its slot
    (the stuck one is closed in the background); without one, or while the factory raises (e.g. a remote env's
    server is down), the slot's later episodes fail with the reason recorded, and the next reset tries again.
    """

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
        calls = [None if broken else (lambda e=env, s=int(seed): _checked_reset(e.reset(s)))
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
            if isinstance(action, (int, np.integer)):
                if not self.action_names:
                    raise TypeError(f"Action id {action} given to an env without an action lookup.")
                action = self.action_names[int(action)]
            text, reward, terminated, truncated, info = _checked_step(env.step(str(action)), type(env).__name__)
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


class EnvSetupError(ValueError):
    """An env that cannot be built (a data file without usable rows, a missing setting, package or service, a
    constructor that raised)."""


def setup_error_message(env: str, error: Exception) -> str:
    """Why env `env` could not be built, where it was raised (a bug in an env's own code is found from there), and
    what to change: its kwargs (a bad or missing setting, a missing package), the file or service an OSError names,
    or the env's code (anything else its constructor raised)."""
    where = traceback.extract_tb(error.__traceback__)[-1]
    cause = f"{type(error).__name__}: {error} (raised at {where.filename}:{where.lineno})"
    if isinstance(error, (ValueError, ImportError, TypeError)):
        return f"env {env} could not be built from its kwargs (--config.env.kwargs.*): {cause}"
    if isinstance(error, OSError):
        return (f"env {env} could not be built: {cause}. Make the file or service it names available, or point the "
                "env elsewhere with --config.env.kwargs.*")
    return f"env {env} could not be built: its constructor raised {cause}. Fix the env's code there."


def make_env_batch(name_or_spec: str | registry.EnvSpec, batch_size: int, *, later_overrides: Any = None,
                   **overrides: Any) -> EnvBatch:
    """A batch of `batch_size` episodes of a registered env (`overrides`, then `later_overrides`, replace its
    kwargs; either may use RAGEN's env_config names, see registry.env_kwargs).

    Any exception while building the env (its kwargs, files, packages, service or constructor) comes back as an
    EnvSetupError that names the env and the fix (`setup_error_message`), so run.py prints it as one line."""
    spec = registry.get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    try:
        factory = spec.resolve_factory()
        problem = registry.env_class_problem(factory, spec.name) if isinstance(factory, type) and issubclass(
            factory, (HostEnv, JaxEnv)) else None
        if problem:
            raise EnvSetupError(problem)
        kwargs = registry.env_kwargs(spec, overrides, later_overrides)
        if spec.kind == "jax":
            batch = JaxEnvBatch(factory(**kwargs), batch_size)
        else:
            batch = HostEnvBatch([factory(**kwargs) for _ in range(batch_size)], factory=lambda: factory(**kwargs))
    except EnvSetupError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to build the env is the setup's: one line naming the env
        raise EnvSetupError(setup_error_message(spec.name, e)) from e
    batch.prompt_max_tokens = spec.prompt_max_tokens  # what the prompts state as the "Max response length"
    return batch
