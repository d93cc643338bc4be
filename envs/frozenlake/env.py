"""FrozenLake as a gymnax environment with RAGEN's maps, slippery dynamics and text observations.

`reset(key)` draws a map with the jitted generator; `reset_from_seeds(seeds)` gives RAGEN's episode
of each integer seed: its map and its slips, from the same numpy draws (gymnasium's generator seeded at
reset, one draw for the start cell, then one per step). Actions: 0 Left, 1 Down, 2 Right, 3 Up (RAGEN's
ids 1..4 minus one; gymnasium's). With probability 1 - success_rate the move goes to one of the
two perpendicular directions (half each). Reward 1 on reaching the goal; done on hole or goal.
The slips are drawn at reset and carried in the state, so the step key is not used.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from envs.frozenlake import oracle, render
from envs.frozenlake.image import IMAGE_LEGEND, frozenlake_image, frozenlake_sprites
from envs.frozenlake.generator import DELTAS, GOAL, HOLE, START, generate_map_jax, generate_map_numpy
from envs.frozenlake.types import FrozenLakeParams, FrozenLakeState
from envs.observation import IMAGE_FORMATS, DrawsBoard, image_text
from envs.protocols import JaxEnv
from envs.ragen_keys import RagenKeys, observation_format, take_one
from envs.symbols import legend_text, symbol_table
from envs.tiles import DEFAULT_TILE

_INSTRUCTION = (
    "You are solving the FrozenLake puzzle. Forbid the whole and go to the target. You may move to the unintended "
    "direction due to the slippery ice. Example answer format: <think>To forbid the hole and go to the target, I "
    "should go left then go up.</think><answer>Left || Up</answer>"
)
# What each coordinate format shows; RAGEN's CoordFrozenLake text is the grid_coord one.
_COORD_SHOWN = {
    "coord": "The observation gives zero-indexed coordinates for the start, goal, player, and any holes.",
    "grid_coord": "The observation includes both a symbol grid and zero-indexed coordinates for the start, goal, "
                  "player, and any holes.",
}
_COORD_INSTRUCTION = (
    "You are solving the FrozenLake puzzle. {shown}\n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner ({corner}, {corner}).\n"
    "Beware that the ice is slippery, so the agent might slide and end up in an unintended tile.\n"
    "Respond with a sequence of actions such as <answer>Left || Up || Up</answer>.\n"
)
# RAGEN's CoordFrozenLake (4x4, grid_coord) names the corner (5, 5); that board keeps its text verbatim.
_RAGEN_COORD_SIZE, _RAGEN_COORD_CORNER = 4, 5
_FORMATS = {"text": "grid", "grid": "grid", "coord": "coord", "grid_coord": "grid_coord", "image": "image",
            "text_image": "text_image"}


def frozenlake_instruction(fmt: str, size: int) -> str:
    """The instruction for observation format `fmt` ("grid", "coord", "grid_coord", "image", "text_image") on a size x
    size board: it names only what that format shows (RAGEN's FrozenLake text for "grid"; its CoordFrozenLake text,
    verbatim, for the 4x4 "grid_coord" board; the board's own corner otherwise; the grid text and what the image
    shows for the image formats)."""
    if fmt == "grid":
        return _INSTRUCTION
    if fmt == "image":
        return f"{_INSTRUCTION}\n{IMAGE_LEGEND}\n"
    if fmt == "text_image":
        return f"{_INSTRUCTION}\n{IMAGE_LEGEND} The same lake is also given as a symbol grid.\n"
    if fmt not in _COORD_SHOWN:
        raise ValueError(f"Unknown FrozenLake observation format {fmt!r}; use 'grid', 'coord', 'grid_coord', 'image' "
                         "or 'text_image'.")
    ragen_board = fmt == "grid_coord" and size == _RAGEN_COORD_SIZE
    return _COORD_INSTRUCTION.format(shown=_COORD_SHOWN[fmt], corner=_RAGEN_COORD_CORNER if ragen_board else size - 1)


def _state_from_tiles(tiles: jax.Array, slips: jax.Array) -> FrozenLakeState:
    start = jnp.argmax(tiles.reshape(-1) == START).astype(jnp.int32)
    return FrozenLakeState(tiles=tiles.astype(jnp.int8), pos=start, time=jnp.zeros((), jnp.int32),
                           slips=slips.astype(jnp.int8))


def slip_offsets(u, success_rate, xp=np):
    """Uniforms u [..., K] -> the turn each step takes [..., K] int8: gymnasium's categorical draw over the
    directions (action - 1, action, action + 1) mod 4 with probabilities (fail, success_rate, fail), fail
    half the rest. xp: numpy (float64, bit-exact with gymnasium) or jax.numpy."""
    fail = (1.0 - success_rate) / 2.0
    cumulative = xp.cumsum(xp.asarray([fail, success_rate, fail]))
    return (xp.argmax(cumulative > u[..., None], axis=-1) - 1).astype(xp.int8)


def seeded_slips(seed: int, num_steps: int, success_rate: float) -> np.ndarray:
    """RAGEN's slips [num_steps] for integer `seed`: gymnasium's generator seeded at reset
    (np.random.default_rng(seed)); its first draw picks the start cell, draw k + 1 decides step k."""
    return slip_offsets(np.random.default_rng(seed).random(num_steps + 1)[1:], success_rate)


def frozenlake_symbols(grid_lookup: Mapping[int, str] | None,
                       grid_vocab: Mapping[str, str] | None) -> tuple[dict[int, str], dict[str, str]]:
    """(grid_lookup {RAGEN's grid code 0..5: symbol}, grid_vocab {symbol: meaning}) from RAGEN's dicts, either or
    both None (envs.symbols.symbol_table; both None: RAGEN's default table)."""
    return symbol_table(grid_lookup, grid_vocab, render.KINDS, render.GRID_LOOKUP, "FrozenLake")


def _ragen_frozenlake(kwargs: dict[str, Any]) -> dict[str, Any]:
    """RAGEN's FrozenLakeEnvConfig forms: observation_format -> render_mode; is_slippery=False (gymnasium's
    deterministic moves, RAGEN then ignores success_rate) -> success_rate=1.0; grid_lookup / grid_vocab -> one
    whole symbol table (None, None for RAGEN's default)."""
    kwargs = observation_format(kwargs, "FrozenLake")
    if "is_slippery" in kwargs:
        slippery = kwargs.pop("is_slippery")
        if not isinstance(slippery, bool):
            raise ValueError(f"FrozenLake: is_slippery must be True or False, got {slippery!r}")
        if not slippery:  # True keeps success_rate as given
            if "success_rate" in kwargs and float(kwargs["success_rate"]) != 1.0:
                raise ValueError(f"FrozenLake: is_slippery=False and success_rate={kwargs['success_rate']!r} "
                                 "contradict (RAGEN ignores success_rate when is_slippery is False): give one of them "
                                 "(is_slippery=False is success_rate=1.0)")
            take_one(kwargs, "success_rate", "is_slippery=False", 1.0, "FrozenLake")
    if "grid_lookup" in kwargs or "grid_vocab" in kwargs:  # one whole table, replacing an earlier layer's
        lookup, vocab = frozenlake_symbols(kwargs.pop("grid_lookup", None), kwargs.pop("grid_vocab", None))
        default = (lookup, list(vocab.items())) == (render.GRID_LOOKUP, list(render.GRID_VOCAB.items()))
        kwargs["grid_lookup"], kwargs["grid_vocab"] = (None, None) if default else (lookup, vocab)
    return kwargs


_FIXED_SYMBOLS = "ragen-jax uses RAGEN's action names and ids (0..3 here: Left, Down, Right, Up)"
RAGEN_KEYS = RagenKeys(
    fixed={"action_lookup": ({1: "Left", 2: "Down", 3: "Right", 4: "Up"}, _FIXED_SYMBOLS),
           "action_map": ({1: 0, 2: 1, 3: 2, 4: 3}, _FIXED_SYMBOLS)},
    unsupported={"map_seed": "each episode's map comes from its seed, as in RAGEN, whose reset overwrites map_seed "
                             "with the episode seed (so it never chose the map); the seeds are "
                             "config.env.train_seed and config.val.seed",
                 "map_lookup": "its map codes are internal here (not settable): remove it"},
    convert=_ragen_frozenlake, converted=("observation_format", "render_mode", "is_slippery", "grid_lookup",
                                          "grid_vocab"))


class FrozenLake(DrawsBoard, JaxEnv[FrozenLakeState, FrozenLakeParams]):
    """RAGEN's FrozenLake: random solvable maps, slippery moves, reward 1 at the goal."""

    action_lookup = {"left": 0, "down": 1, "right": 2, "up": 3}
    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names (observation_format, is_slippery, ...) in env.kwargs
    draw = staticmethod(frozenlake_image)  # state, sprites -> the board's picture (`DrawsBoard`)

    def __init__(self, size: int = 4, p: float = 0.9, success_rate: float = 0.8, render_mode: str = "text",
                 max_steps: int = 100, instruction: str | None = None, grid_lookup: Mapping[int, str] | None = None,
                 grid_vocab: Mapping[str, str] | None = None, tile_size: int = DEFAULT_TILE):
        super().__init__()
        if render_mode not in _FORMATS:
            raise ValueError(f"render_mode must be one of {sorted(_FORMATS)}, got {render_mode!r}.")
        if not 0.0 < p <= 1.0 or not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"Need 0 < p <= 1 and 0 <= success_rate <= 1, got p={p}, success_rate={success_rate}.")
        if size < 2:
            raise ValueError(f"size must be >= 2 (start and goal differ), got {size}.")
        self.size, self.p, self.success_rate, self.max_steps = int(size), float(p), float(success_rate), int(max_steps)
        self.observation_format = _FORMATS[render_mode]
        self.grid_lookup, self.grid_vocab = frozenlake_symbols(grid_lookup, grid_vocab)
        self._instruction = instruction
        self._reset_maps = jax.jit(jax.vmap(_state_from_tiles))
        self.sprites = frozenlake_sprites(int(tile_size))  # [6, S, S, 3]: the image formats' tiles, RAGEN code order

    # ---- gymnax API -------------------------------------------------------------------------
    @property
    def default_params(self) -> FrozenLakeParams:
        return FrozenLakeParams(p=self.p, success_rate=self.success_rate, size=self.size,
                                max_steps_in_episode=self.max_steps)

    def reset_env(self, key: chex.PRNGKey, params: FrozenLakeParams) -> tuple[jax.Array, FrozenLakeState]:
        u = jax.random.uniform(jax.random.fold_in(key, 1), (params.max_steps_in_episode,))
        state = _state_from_tiles(generate_map_jax(key, params.size, params.p),
                                  slip_offsets(u, params.success_rate, jnp))
        return self.get_obs(state), state

    def step_env(self, key: chex.PRNGKey, state: FrozenLakeState, action: jax.Array,
                 params: FrozenLakeParams) -> tuple[jax.Array, FrozenLakeState, jax.Array, jax.Array, dict[str, Any]]:
        n = state.tiles.shape[0]
        tile = state.tiles.reshape(-1)[state.pos]
        finished = (tile == HOLE) | (tile == GOAL)  # gymnasium: terminal cells loop with reward 0
        slip = state.slips[jnp.minimum(state.time, state.slips.shape[0] - 1)].astype(jnp.int32)
        direction = (jnp.asarray(action, jnp.int32) + slip) % 4
        delta = jnp.array(DELTAS, jnp.int32)[direction]
        r, c = jnp.divmod(state.pos, n)
        nr, nc = jnp.clip(r + delta[0], 0, n - 1), jnp.clip(c + delta[1], 0, n - 1)
        pos = jnp.where(finished, state.pos, nr * n + nc).astype(jnp.int32)
        new_tile = state.tiles.reshape(-1)[pos]
        on_goal = new_tile == GOAL
        reward = jnp.where(on_goal & ~finished, 1.0, 0.0).astype(jnp.float32)
        new_state = state.replace(pos=pos, time=state.time + 1)
        info = {"action_is_effective": pos != state.pos, "success": on_goal}
        return self.get_obs(new_state), new_state, reward, (new_tile == HOLE) | on_goal, info

    def get_obs(self, state: FrozenLakeState, params: FrozenLakeParams | None = None, key: Any = None) -> jax.Array:
        """Tiles [N, N] int8 with the player cell marked 4."""
        return state.tiles.reshape(-1).at[state.pos].set(4).reshape(state.tiles.shape)

    def is_terminated(self, state: FrozenLakeState, params: FrozenLakeParams) -> jax.Array:
        tile = state.tiles.reshape(-1)[state.pos]
        return (tile == HOLE) | (tile == GOAL)

    @property
    def num_actions(self) -> int:
        return 4

    def action_space(self, params: FrozenLakeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params: FrozenLakeParams | None = None) -> spaces.Box:
        return spaces.Box(0, 4, (self.size, self.size), jnp.int8)

    # ---- text side --------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return ["Left", "Down", "Right", "Up"]

    def instruction(self) -> str:
        if self._instruction is not None:
            return self._instruction
        return frozenlake_instruction(self.observation_format, self.size)

    def legend(self) -> str:
        """RAGEN's grid_vocab text, leading newline included (appended to the instruction); none for "image" (its
        observation shows no symbols)."""
        return "" if self.observation_format == "image" else legend_text(self.grid_vocab)

    def render_text(self, state: FrozenLakeState, params: FrozenLakeParams | None = None) -> str:
        """The text observation; for the image formats, with an image marker where the picture goes
        (`render_observation` gives the picture too)."""
        if self.observation_format in IMAGE_FORMATS:
            grid = render.render_grid(np.asarray(state.tiles), int(state.pos), self.grid_lookup)
            return image_text(self.observation_format, grid)
        return render.render_text(np.asarray(state.tiles), int(state.pos), self.observation_format, self.grid_lookup)

    # ---- seeds, hand-built maps, oracle -------------------------------------------------------
    def reset_from_seeds(self, seeds: Sequence[int], params: FrozenLakeParams | None = None) -> FrozenLakeState:
        """Batched state [B] with RAGEN's episode of each integer seed (map and slip draws)."""
        params = params or self.default_params
        tiles = np.stack([generate_map_numpy(int(s), self.size, self.p) for s in seeds])
        slips = np.stack([seeded_slips(int(s), params.max_steps_in_episode, params.success_rate) for s in seeds])
        return self._reset_maps(jnp.asarray(tiles), jnp.asarray(slips))

    def state_from_rows(self, rows: Sequence[str], seed: int = 0) -> FrozenLakeState:
        """An unbatched state from gymnasium-style rows ("SFFF", "FHFH", ...; S start, G goal), with the
        slip draws gymnasium's FrozenLake seeded with `seed` would make."""
        codes = {"F": 0, "H": HOLE, "S": START, "G": GOAL}
        try:
            tiles = np.array([[codes[ch] for ch in row] for row in rows], np.int8)
        except KeyError as e:
            raise ValueError(f"FrozenLake rows use only F, H, S, G; got {e.args[0]!r}.") from None
        return _state_from_tiles(jnp.asarray(tiles), jnp.asarray(seeded_slips(seed, self.max_steps, self.success_rate)))

    def state_from_grid(self, text: str, seed: int = 0) -> FrozenLakeState:
        """An unbatched state from a grid drawn in this env's symbols (render_text's "grid" format), with the slip
        draws gymnasium's FrozenLake seeded with `seed` would make; the start is the player's cell."""
        tiles, pos = render.parse_grid(text, self.grid_lookup)
        if tiles.shape[0] < 2:
            raise ValueError(f"FrozenLake grid is {tiles.shape[0]}x{tiles.shape[1]}; the board needs size >= 2.")
        return FrozenLakeState(tiles=jnp.asarray(tiles), pos=jnp.int32(pos), time=jnp.zeros((), jnp.int32),
                               slips=jnp.asarray(seeded_slips(seed, self.max_steps, self.success_rate)))

    def oracle_actions(self, state: FrozenLakeState) -> list[int] | None:
        """Shortest intended-move path to the goal from one unbatched state; None if unreachable."""
        return oracle.solve(np.asarray(state.tiles), int(state.pos))

    def describe_state(self, state: FrozenLakeState) -> str:
        """Demo reasoning: the goal seen from the player and the holes next to it, e.g.
        "goal below right, hole left"."""
        from envs.describe import relation

        tiles = np.asarray(state.tiles)
        n = tiles.shape[0]
        player = divmod(int(state.pos), n)
        goal = divmod(int(np.flatnonzero(tiles.reshape(-1) == GOAL)[0]), n)
        near = [name for name, (dr, dc) in zip(self.action_names, DELTAS)
                if 0 <= player[0] + dr < n and 0 <= player[1] + dc < n
                and tiles[player[0] + dr, player[1] + dc] == HOLE]
        return f"goal {relation(goal, player)}" + (f", hole {' '.join(n.lower() for n in near)}" if near else "")


def oracle_actions(env: FrozenLake, state: FrozenLakeState) -> list[int] | None:
    """Module-level alias of `FrozenLake.oracle_actions`."""
    return env.oracle_actions(state)
