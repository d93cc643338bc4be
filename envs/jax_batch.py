"""A batch of a JAX env: one vmapped, jitted program steps every episode's turn.

A turn executes each active episode's parsed actions in order, stopping at the first done, and reports summed
rewards, done flags and per-episode info (`envs.protocols.TurnResult`).
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs.errors import EnvSetupError
from envs.host_checks import describe_value
from envs.observation import IMAGE_FORMATS
from envs.protocols import Action, EnvBatch, JaxEnv, TurnResult


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
        # image formats: every observation's picture, drawn for the whole batch by one jitted program
        self.draws_images = getattr(env, "observation_format", None) in IMAGE_FORMATS
        self._draw = jax.jit(jax.vmap(env.render_rgb)) if self.draws_images else None
        self.last_images: list[tuple] | None = None  # the pictures of the last reset's / step's observations

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
        if self.draws_images:
            pictures = np.asarray(self._draw(self.state))
            self.last_images = [(pictures[i],) if rows[i] and not pairs[i][1] else () for i in range(self._batch_size)]
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
            action_is_effective=out["action_is_effective"], errors=errors, infos=infos, images=self.last_images,
        )


def checked_render(env: JaxEnv, state: Any, params: Any) -> tuple[str, str]:
    """(text, "") of one unbatched state, or ("", error) when `env.render_text` raises or returns no str."""
    try:
        text = env.render_text(state, params)
    except Exception as e:  # noqa: BLE001 - a renderer failing on one state ends only that episode
        where = traceback.extract_tb(e.__traceback__)[-1]
        return "", f"{type(e).__name__}: {e} (in {type(env).__name__}.render_text at {where.filename}:{where.lineno})"
    if not isinstance(text, str):
        return "", (f"TypeError: {type(env).__name__}.render_text returned {describe_value(text)}, not a str (the text "
                    "the model reads next)")
    return text, ""
