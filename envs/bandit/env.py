"""RAGEN's two-armed bandit with named arms, as a gymnax environment.

Each episode picks one (low-risk, high-risk) name pair from the split's list and shows the two
names in random order. The low arm pays 0.1; the high arm pays 1.0 w.p. 0.25, else 0. One pull
ends the episode; success = pulled the high arm.

A seed gives RAGEN's episode: `reset_from_seeds` draws the pair, the order and the high arm's payout
from gymnasium's generator seeded with it (np.random.default_rng(seed), in RAGEN's order), and the
draws are carried in the state. Like RAGEN, which adds each env's instance counter to the seed so the
episodes of a group pay independently, `episode_seed(seed, instance)` is seed + instance.

Actions are *name ids*: index of the arm name in `arm_names` (the split's names), so one static
`action_lookup` maps any answer ("Teacher", "trader") to an id, and the env checks that the name
is one of this episode's two arms. Naming an arm that is not in the episode is an invalid pull:
reward 0, the episode continues, `action_is_valid` and `action_in_lookup` False in info (RAGEN's lookup
miss: the rollout gives the turn its format penalty).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from envs.protocols import JaxEnv
from envs.ragen_keys import RagenKeys

# (low-risk arm, high-risk arm) pairs, as in RAGEN's bandit config.
ARM_PAIRS = {
    "train": [
        ("Teacher", "Trader"), ("Nurse", "StartupFounder"), ("Librarian", "Investor"),
        ("Accountant", "StockBroker"), ("Engineer", "RealEstateAgent"), ("Pharmacist", "Musician"),
        ("Clerk", "Freelancer"), ("Technician", "Youtuber"), ("Planner", "Artist"), ("Postman", "Pilot"),
        ("Banker", "VentureCapitalist"), ("Gardener", "Cryptominer"),
    ],
    "test": [
        ("Receptionist", "Explorer"), ("Archivist", "Filmmaker"), ("Bookkeeper", "Consultant"),
        ("SocialWorker", "Photographer"), ("Mechanic", "GameDesigner"), ("Secretary", "Entrepreneur"),
        ("Cashier", "DataScientist"), ("CivilServant", "StartupAccelerator"),
    ],
}

_PROMPT = (
    "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
    "Game Rules: \n"
    "1. There are 2 arms, named {a} and {b}\n"
    "2. Each arm has its own reward distribution, related to their names. \n"
    "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might behave.\n"
    "4. Based on the symbolic meaning of their names, which arm do you think is more likely to give higher rewards "
    "on average? Choose between {a} and {b}, and output like <answer> {a} </answer> or <answer> {b} </answer>.\n"
)


@struct.dataclass
class BanditState:
    """pair [] int32: index in the split's pair list; hi_first [] bool: display order;
    hi_pays [] bool: the high arm's payout draw (fixed at reset); pulled [] int32: name id pulled
    (-1 before); reward [] float32: its payout."""

    pair: jax.Array
    hi_first: jax.Array
    hi_pays: jax.Array
    pulled: jax.Array
    reward: jax.Array
    time: jax.Array


@struct.dataclass
class BanditParams:
    lo_reward: float = 0.1
    hi_reward: float = 1.0
    hi_loss_reward: float = 0.0
    hi_prob: float = 0.25
    num_pairs: int = struct.field(pytree_node=False, default=12)
    max_steps_in_episode: int = struct.field(pytree_node=False, default=1)


def _state_from_draws(u, num_pairs: int, hi_prob, xp) -> BanditState:
    """u [3, ...] uniforms in RAGEN's draw order: pair index, display order (< 0.5: low arm first), payout.
    xp: numpy (host draws, float64 like RAGEN) or jax.numpy."""
    shape = u[0].shape
    return BanditState(pair=xp.minimum((u[0] * num_pairs).astype(xp.int32), num_pairs - 1),
                       hi_first=u[1] >= 0.5, hi_pays=u[2] < hi_prob, pulled=xp.full(shape, -1, xp.int32),
                       reward=xp.zeros(shape, xp.float32), time=xp.zeros(shape, xp.int32))


# RAGEN's BanditEnvConfig names -> ours.
RAGEN_KEYS = RagenKeys(
    renames={"split": "arm_names", "lo_arm_score": "lo_reward", "hi_arm_hiscore": "hi_reward",
             "hi_arm_loscore": "hi_loss_reward", "hi_arm_hiscore_prob": "hi_prob"},
    fixed={"action_space_start": (1, "the model sees arm names; ids here are 0-based arm-name ids (module docstring)"),
           "render_mode": ("text", "the observation is RAGEN's text"),
           "action_lookup": (None, "the lookup is built from the split's arm names")})


class Bandit(JaxEnv[BanditState, BanditParams]):
    """Two named arms per episode; actions are arm-name ids (see module docstring)."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names (split, lo_arm_score, ...) in env.kwargs

    def __init__(self, arm_names: str = "train", lo_reward: float = 0.1, hi_reward: float = 1.0,
                 hi_prob: float = 0.25, max_steps: int = 1, instruction: str = "", hi_loss_reward: float = 0.0):
        super().__init__()
        if arm_names not in ARM_PAIRS:
            raise ValueError(f"arm_names must be one of {sorted(ARM_PAIRS)}, got {arm_names!r}.")
        self.split = arm_names
        self.pairs = ARM_PAIRS[arm_names]
        self._names = [name for pair in self.pairs for name in pair]  # id 2k: low arm of pair k; 2k+1: high
        self.action_lookup = {name.lower(): i for i, name in enumerate(self._names)}
        self.lo_reward, self.hi_reward, self.hi_prob, self.max_steps = lo_reward, hi_reward, hi_prob, max_steps
        self.hi_loss_reward = hi_loss_reward  # the high arm's payout when it does not pay hi_reward
        self._instruction = instruction

    @property
    def default_params(self) -> BanditParams:
        return BanditParams(lo_reward=self.lo_reward, hi_reward=self.hi_reward, hi_prob=self.hi_prob,
                            hi_loss_reward=self.hi_loss_reward, num_pairs=len(self.pairs),
                            max_steps_in_episode=self.max_steps)

    def reset_env(self, key: chex.PRNGKey, params: BanditParams) -> tuple[jax.Array, BanditState]:
        state = _state_from_draws(jax.random.uniform(key, (3,)), params.num_pairs, params.hi_prob, jnp)
        return self.get_obs(state), state

    def reset_from_seeds(self, seeds, params: BanditParams | None = None) -> BanditState:
        """Batched state [B] with RAGEN's episode of each integer seed (its generator's first three draws)."""
        params = params or self.default_params
        u = np.stack([np.random.default_rng(int(s)).random(3) for s in seeds])
        state = _state_from_draws(u.T, params.num_pairs, params.hi_prob, np)  # decided in float64, as RAGEN
        return jax.tree.map(jnp.asarray, state)

    def episode_seed(self, seed: int, instance: int) -> int:
        """RAGEN resets each Bandit with seed + its instance counter, so a group's episodes draw independently."""
        return int(seed) + int(instance)

    def step_env(self, key: chex.PRNGKey, state: BanditState, action: jax.Array,
                 params: BanditParams) -> tuple[jax.Array, BanditState, jax.Array, jax.Array, dict[str, Any]]:
        action = jnp.asarray(action, jnp.int32)
        in_lookup = action // 2 == state.pair  # RAGEN's per-episode lookup holds this episode's two names only
        valid = in_lookup & (state.pulled < 0)
        is_hi = action % 2 == 1
        hi_pay = jnp.where(state.hi_pays, params.hi_reward, params.hi_loss_reward)
        reward = jnp.where(valid, jnp.where(is_hi, hi_pay, params.lo_reward), 0.0).astype(jnp.float32)
        new_state = state.replace(pulled=jnp.where(valid, action, state.pulled),
                                  reward=jnp.where(valid, reward, state.reward), time=state.time + 1)
        info = {"action_is_effective": valid, "action_is_valid": valid, "action_in_lookup": in_lookup,
                "success": valid & is_hi}
        return self.get_obs(new_state), new_state, reward, new_state.pulled >= 0, info

    def get_obs(self, state: BanditState, params: BanditParams | None = None, key: Any = None) -> jax.Array:
        """[3] int32: the displayed arm ids (first, second) and the pulled id (-1 before)."""
        lo, hi = 2 * state.pair, 2 * state.pair + 1
        first, second = jnp.where(state.hi_first, hi, lo), jnp.where(state.hi_first, lo, hi)
        return jnp.stack([first, second, state.pulled]).astype(jnp.int32)

    def is_terminated(self, state: BanditState, params: BanditParams) -> jax.Array:
        return state.pulled >= 0

    @property
    def num_actions(self) -> int:
        return len(self._names)

    def action_space(self, params: BanditParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(len(self._names))

    def observation_space(self, params: BanditParams | None = None) -> spaces.Box:
        return spaces.Box(-1, len(self._names) - 1, (3,), jnp.int32)

    # The episode's two arm names are in its observation; the prompt lists no global action set.
    prompt_action_names = None

    @property
    def action_names(self) -> list[str]:
        """Every arm name of the split, id order (episodes show two of them)."""
        return list(self._names)

    def instruction(self) -> str:
        """RAGEN's Bandit env_instruction is empty: the rules are in the first observation."""
        return self._instruction

    def render_text(self, state: BanditState, params: BanditParams | None = None) -> str:
        first, second, pulled = (int(v) for v in np.asarray(self.get_obs(jax.tree.map(jnp.asarray, state))))
        if pulled < 0:
            return _PROMPT.format(a=self._names[first], b=self._names[second])
        return f"{self._names[pulled]}: {round(float(state.reward), 6)} points"

    def episode_arm_names(self, state: BanditState) -> tuple[str, str]:
        """The two names shown in one unbatched episode, display order."""
        first, second, _ = (int(v) for v in np.asarray(self.get_obs(jax.tree.map(jnp.asarray, state))))
        return self._names[first], self._names[second]
