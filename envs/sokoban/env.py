"""Sokoban as a gymnax environment with RAGEN's rules, rewards and text observations.

Levels come from RAGEN's generator run on the host (`envs.sokoban.generator`): `reset(key)`
samples a level bank uniformly on device; `reset_from_seeds(seeds)` gives exactly RAGEN's level
of each integer seed (what `EnvBatch` uses). Steps are pure JAX.
Actions: 0 Up, 1 Down, 2 Left, 3 Right (RAGEN's ids 1..4 minus one; gym-sokoban's push actions).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from envs.observation import IMAGE_FORMATS, DrawsBoard, image_text
from envs.protocols import JaxEnv
from envs.ragen_keys import RagenKeys, observation_format, take_one
from envs.sokoban import levels, oracle, render
from envs.sokoban.image import IMAGE_LEGEND, sokoban_codes, sokoban_image, sokoban_sprites
from envs.sokoban.generator import BOX, BOX_ON_TARGET, DELTAS, FLOOR, PLAYER, TARGET, WALL, GeneratorConfig
from envs.sokoban.types import SokobanParams, SokobanState
from envs.symbols import check_lookup, legend_text, symbol_table
from envs.tiles import DEFAULT_TILE

STEP_PENALTY, BOX_ON_REWARD, BOX_OFF_PENALTY, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0

_GRID_INSTRUCTION = (
    "You are solving the Sokoban puzzle. \n"
    "You are the player and you need to push all boxes to targets. \n"
    "When you are right next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box. \n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>\n"
)
# What each coordinate format shows; RAGEN's CoordSokoban text is the grid_coord one (at 6x6, its "(5, 5)" corner).
_COORD_SHOWN = {
    "coord": "the zero-indexed coordinates of the player, each box, and each target (walls are not listed)",
    "grid_coord": "a symbol grid and the zero-indexed coordinates of the player, each box, and each target",
}
_COORD_INSTRUCTION = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n"
    "You are provided with {shown}. \n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner ({r}, {c}). \n"
    "When you are exactly next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box.\n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n"
)
_FORMATS = {"text": "grid", "grid": "grid", "coord": "coord", "grid_coord": "grid_coord", "image": "image",
            "text_image": "text_image"}


def sokoban_instruction(fmt: str, dim_room: Sequence[int]) -> str:
    """The instruction for observation format `fmt` ("grid", "coord", "grid_coord", "image", "text_image") on a
    (rows, cols) board: it names only what that format shows (RAGEN's SimpleSokoban text for "grid", its CoordSokoban
    text for "grid_coord"; the grid text and what the image shows for the image formats)."""
    if fmt == "grid":
        return _GRID_INSTRUCTION
    if fmt == "image":
        return _GRID_INSTRUCTION + IMAGE_LEGEND + "\n"
    if fmt == "text_image":
        return _GRID_INSTRUCTION + IMAGE_LEGEND + " The same board is also given as a symbol grid.\n"
    if fmt not in _COORD_SHOWN:
        raise ValueError(f"Unknown Sokoban observation format {fmt!r}; use 'grid', 'coord', 'grid_coord', 'image' or "
                         "'text_image'.")
    rows, cols = dim_room
    return _COORD_INSTRUCTION.format(shown=_COORD_SHOWN[fmt], r=rows - 1, c=cols - 1)


def _state_from_level(fixed: jax.Array, room: jax.Array, level_id: jax.Array) -> SokobanState:
    player = jnp.argwhere(room == PLAYER, size=1)[0].astype(jnp.int32)
    return SokobanState(
        fixed=fixed.astype(jnp.int8), room=room.astype(jnp.int8), player=player,
        boxes_on_target=jnp.sum(room == BOX_ON_TARGET).astype(jnp.int32),
        solved=jnp.all((fixed != TARGET) | (room == BOX_ON_TARGET)),
        time=jnp.zeros((), jnp.int32), level_id=jnp.asarray(level_id, jnp.int32),
    )


def _cell(grid: jax.Array, pos: jax.Array) -> jax.Array:
    """grid[pos], with cells outside the grid read as walls."""
    inside = jnp.all((pos >= 0) & (pos < jnp.array(grid.shape)))
    clipped = jnp.clip(pos, 0, jnp.array(grid.shape) - 1)
    return jnp.where(inside, grid[clipped[0], clipped[1]], WALL)


def step_level(state: SokobanState, action: jax.Array) -> tuple[SokobanState, jax.Array, jax.Array]:
    """gym-sokoban's push/move for one action id: (new state, reward [], moved [] bool)."""
    delta = jnp.array(DELTAS, jnp.int32)[action]
    p1, p2 = state.player + delta, state.player + 2 * delta
    c1, c2 = _cell(state.room, p1), _cell(state.room, p2)
    push = ((c1 == BOX) | (c1 == BOX_ON_TARGET)) & ((c2 == FLOOR) | (c2 == TARGET))
    moved = push | (c1 == FLOOR) | (c1 == TARGET)
    room = state.room
    box_code = jnp.where(_cell(state.fixed, p2) == TARGET, BOX_ON_TARGET, BOX).astype(jnp.int8)
    safe2 = jnp.clip(p2, 0, jnp.array(room.shape) - 1)
    room = room.at[safe2[0], safe2[1]].set(jnp.where(push, box_code, room[safe2[0], safe2[1]]))
    room = room.at[state.player[0], state.player[1]].set(
        jnp.where(moved, state.fixed[state.player[0], state.player[1]], room[state.player[0], state.player[1]]))
    safe1 = jnp.clip(p1, 0, jnp.array(room.shape) - 1)
    room = room.at[safe1[0], safe1[1]].set(jnp.where(moved, PLAYER, room[safe1[0], safe1[1]]).astype(jnp.int8))
    on_target = jnp.sum(room == BOX_ON_TARGET).astype(jnp.int32)
    solved = jnp.all((state.fixed != TARGET) | (room == BOX_ON_TARGET))
    reward = (STEP_PENALTY
              + jnp.where(on_target > state.boxes_on_target, BOX_ON_REWARD, 0.0)
              + jnp.where(on_target < state.boxes_on_target, BOX_OFF_PENALTY, 0.0)
              + jnp.where(solved, SOLVED_REWARD, 0.0)).astype(jnp.float32)
    new_state = state.replace(room=room, player=jnp.where(moved, p1, state.player), boxes_on_target=on_target,
                              solved=solved, time=state.time + 1)
    return new_state, reward, moved


_VOCAB_NAMES = {"default": (render.GRID_LOOKUP, render.GRID_VOCAB),
                "different": (render.DIFFERENT_GRID_LOOKUP, render.DIFFERENT_GRID_VOCAB)}


def sokoban_symbols(grid_vocab: str | Mapping[str, str] | None,
                    grid_lookup: Mapping[int, str] | None) -> tuple[dict[int, str], dict[str, str]]:
    """(grid_lookup {render code 0..6: symbol}, grid_vocab {symbol: meaning}) of a named table ("default",
    "different": SokobanDifferentGridVocab's) or of RAGEN's dicts (envs.symbols.symbol_table; None: not given;
    both None: RAGEN's default table)."""
    if isinstance(grid_vocab, str):
        if grid_vocab not in _VOCAB_NAMES:
            raise ValueError(f"Sokoban: grid_vocab must be 'default', 'different' or a dict {{symbol: meaning}}, "
                             f"got {grid_vocab!r}")
        lookup, vocab = _VOCAB_NAMES[grid_vocab]
        if grid_lookup is not None and check_lookup(grid_lookup, render.KINDS, "Sokoban") != lookup:
            raise ValueError(f"Sokoban: grid_lookup={grid_lookup!r} does not draw the {grid_vocab!r} table "
                             f"grid_vocab={grid_vocab!r} names; give one of them (or grid_vocab as a dict)")
        return dict(lookup), dict(vocab)
    return symbol_table(grid_lookup, grid_vocab, render.KINDS, render.GRID_LOOKUP, "Sokoban")


def _canonical_symbols(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A layer's grid_lookup / grid_vocab as one whole table, so a later layer's table replaces an earlier one's:
    RAGEN's default as both None (the defaults), SokobanDifferentGridVocab's as grid_vocab='different', grid_lookup
    None, another as both dicts."""
    lookup, vocab = sokoban_symbols(kwargs.pop("grid_vocab", None), kwargs.pop("grid_lookup", None))
    for name, tables in _VOCAB_NAMES.items():
        if (lookup, list(vocab.items())) == (tables[0], list(tables[1].items())):
            return {**kwargs, "grid_vocab": None if name == "default" else name, "grid_lookup": None}
    return {**kwargs, "grid_vocab": vocab, "grid_lookup": lookup}


def _ragen_sokoban(kwargs: dict[str, Any]) -> dict[str, Any]:
    """RAGEN's SokobanEnvConfig forms: dim_x + dim_y (both, as RAGEN sets dim_room only then), observation_format,
    and the grid_lookup / grid_vocab dicts -> dim_room, render_mode, and one whole symbol table."""
    kwargs = observation_format(kwargs, "Sokoban")
    if "dim_x" in kwargs or "dim_y" in kwargs:
        if "dim_x" not in kwargs or "dim_y" not in kwargs:
            given = "dim_x" if "dim_x" in kwargs else "dim_y"
            raise ValueError(f"Sokoban: {given} is given without {'dim_y' if given == 'dim_x' else 'dim_x'}; RAGEN "
                             "sets dim_room = (dim_x, dim_y) only when both are given (and ignores one alone): give "
                             "both, or dim_room")
        take_one(kwargs, "dim_room", "dim_x/dim_y", [int(kwargs.pop("dim_x")), int(kwargs.pop("dim_y"))], "Sokoban")
    if "grid_vocab" in kwargs or "grid_lookup" in kwargs:
        kwargs = _canonical_symbols(kwargs)
    return kwargs


RAGEN_KEYS = RagenKeys(
    fixed={"action_lookup": ({1: "Up", 2: "Down", 3: "Left", 4: "Right"},
                             "the actions are Up, Down, Left, Right (ids 0..3 here)")},
    convert=_ragen_sokoban, converted=("dim_x", "dim_y", "observation_format", "render_mode", "grid_lookup",
                                       "grid_vocab"))


class Sokoban(DrawsBoard, JaxEnv[SokobanState, SokobanParams]):
    """RAGEN's Sokoban: rewards -0.1/step, +1 box on target, -1 box off, +10 solved; 100-step cap."""

    action_lookup = {"up": 0, "down": 1, "left": 2, "right": 3}
    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names (dim_x/dim_y, observation_format, ...) in env.kwargs
    draw = staticmethod(sokoban_image)  # state, sprites -> the board's picture (`DrawsBoard`)

    def __init__(self, dim_room: Sequence[int] = (6, 6), num_boxes: int = 1, max_steps: int = 100,
                 search_depth: int = 300, render_mode: str = "text",
                 grid_vocab: str | Mapping[str, str] | None = None, grid_lookup: Mapping[int, str] | None = None,
                 bank_size: int = 1024, bank_seed: int = 0, use_cache: bool = True, instruction: str | None = None,
                 tile_size: int = DEFAULT_TILE):
        super().__init__()
        if render_mode not in _FORMATS:
            raise ValueError(f"render_mode must be one of {sorted(_FORMATS)}, got {render_mode!r}.")
        if bank_size < 1:
            raise ValueError(f"bank_size must be >= 1, got {bank_size}.")
        self.config = GeneratorConfig(dim_room=tuple(int(d) for d in dim_room), num_boxes=int(num_boxes),
                                      search_depth=int(search_depth))
        self.max_steps = int(max_steps)
        self.observation_format = _FORMATS[render_mode]
        self.grid_lookup, self.grid_vocab = sokoban_symbols(grid_vocab, grid_lookup)
        self.bank_size, self.bank_seed, self.use_cache = int(bank_size), int(bank_seed), use_cache
        self._instruction = instruction
        self._params: SokobanParams | None = None
        self._reset_levels = jax.jit(jax.vmap(_state_from_level))
        self.sprites = sokoban_sprites(int(tile_size))  # [7, S, S, 3]: the image formats' tiles, in render-code order

    # ---- gymnax API -------------------------------------------------------------------------
    @property
    def default_params(self) -> SokobanParams:
        """The bank of seeds [bank_seed, bank_seed + bank_size), built (or read from cache) once."""
        if self._params is None:
            fixed, room = levels.load_bank(self.config, self.bank_seed, self.bank_size, self.use_cache)
            self._params = SokobanParams(np.asarray(fixed), np.asarray(room), self.max_steps)  # numpy: safe under jit
        return self._params

    def reset_env(self, key: chex.PRNGKey, params: SokobanParams) -> tuple[jax.Array, SokobanState]:
        index = jax.random.randint(key, (), 0, params.fixed_bank.shape[0])
        state = _state_from_level(jnp.asarray(params.fixed_bank)[index], jnp.asarray(params.room_bank)[index], index)
        return self.get_obs(state), state

    def step_env(self, key: chex.PRNGKey, state: SokobanState, action: jax.Array,
                 params: SokobanParams) -> tuple[jax.Array, SokobanState, jax.Array, jax.Array, dict[str, Any]]:
        del key, params
        new_state, reward, moved = step_level(state, jnp.asarray(action, jnp.int32))
        info = {"action_is_effective": moved, "success": new_state.solved}
        return self.get_obs(new_state), new_state, reward, new_state.solved, info

    def get_obs(self, state: SokobanState, params: SokobanParams | None = None, key: Any = None) -> jax.Array:
        """Render codes [H, W] int8 (0..6, 6 = player on target)."""
        return sokoban_codes(state)

    def is_terminated(self, state: SokobanState, params: SokobanParams) -> jax.Array:
        return state.solved

    @property
    def num_actions(self) -> int:
        return 4

    def action_space(self, params: SokobanParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params: SokobanParams | None = None) -> spaces.Box:
        return spaces.Box(0, 6, self.config.dim_room, jnp.int8)

    # ---- text side --------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return ["Up", "Down", "Left", "Right"]

    def instruction(self) -> str:
        if self._instruction is not None:
            return self._instruction
        return sokoban_instruction(self.observation_format, self.config.dim_room)

    def legend(self) -> str:
        """RAGEN's grid_vocab text, leading newline included (appended to the instruction); none for "image" (its
        observation shows no symbols)."""
        return "" if self.observation_format == "image" else legend_text(self.grid_vocab)

    def render_text(self, state: SokobanState, params: SokobanParams | None = None) -> str:
        """The text observation; for the image formats, with an image marker where the picture goes
        (`render_observation` gives the picture too)."""
        if self.observation_format in IMAGE_FORMATS:
            grid = render.render_grid(np.asarray(state.fixed), np.asarray(state.room), self.grid_lookup)
            return image_text(self.observation_format, grid)
        return render.render_text(np.asarray(state.fixed), np.asarray(state.room), self.observation_format,
                                  self.grid_lookup)

    # ---- seeds, hand-built levels, oracle ----------------------------------------------------
    def reset_from_seeds(self, seeds: Sequence[int], params: SokobanParams | None = None) -> SokobanState:
        """Batched state [B] holding RAGEN's level of each seed (host generation, disk-cached)."""
        fixed, room = levels.levels_for_seeds(self.config, seeds, self.use_cache)
        return self._reset_levels(jnp.asarray(fixed), jnp.asarray(room), jnp.full((len(fixed),), -1, jnp.int32))

    def state_from_grid(self, text: str) -> SokobanState:
        """An unbatched state from a grid drawn in this env's symbols (hand-built levels)."""
        fixed, room = render.parse_grid(text, self.grid_lookup)
        return _state_from_level(jnp.asarray(fixed), jnp.asarray(room), jnp.int32(-1))

    def oracle_actions(self, state: SokobanState) -> list[int] | None:
        """Shortest solution (action ids) from one unbatched state; None if it cannot be solved."""
        return oracle.solve(np.asarray(state.fixed), np.asarray(state.room))

    def describe_state(self, state: SokobanState) -> str:
        """Demo reasoning: where the box is seen from the player, and its target seen from the box
        (the box off target nearest the player, the free target nearest that box), e.g.
        "box below left, target left"."""
        from envs.describe import nearest, relation

        room, fixed, player = np.asarray(state.room), np.asarray(state.fixed), np.asarray(state.player)
        boxes, targets = np.argwhere(room == BOX), np.argwhere((fixed == TARGET) & (room != BOX_ON_TARGET))
        if not len(boxes) or not len(targets):
            return "all boxes on targets"
        box = nearest(boxes, player)
        return f"box {relation(box, player)}, target {relation(nearest(targets, box), box)}"


def oracle_actions(env: Sokoban, state: SokobanState) -> list[int] | None:
    """Module-level alias of `Sokoban.oracle_actions` for per-episode demonstration data."""
    return env.oracle_actions(state)
