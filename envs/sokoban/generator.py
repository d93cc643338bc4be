"""Sokoban level generation on the host, reproducing RAGEN's (gym-sokoban's) distribution.

The procedure: a random walk stamps floor masks into a walled room; the player and box targets
are placed on random floor cells; a depth-first *reverse* search (the player moves and pulls
boxes) from the solved room keeps the state with the best `box_swaps * displacement` score;
finally the player takes a few random steps. Random numbers are drawn with the same calls, in
the same order, as RAGEN does under `all_seed(seed)` (Python `random` and legacy `np.random`),
so seed s gives RAGEN's level for seed s. The search runs on small integer states instead of
numpy arrays, which is what makes it fast.

Cell codes (gym-sokoban): 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import sys
import threading

import numpy as np

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = 0, 1, 2, 3, 4, 5
# Row/col deltas of Up, Down, Left, Right (action ids 0..3).
DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))
_WALK_DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]
# 3x3 floor stamps of the random walk (centre on the walker).
_MASK_CELLS = [
    [(dr - 1, dc - 1) for dr in range(3) for dc in range(3) if m[dr][dc]]
    for m in (
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    )
]
_MAX_EXPLORED = 300_000
_TRIES = 4


_LOCAL = threading.local()


def _np_rng() -> np.random.RandomState:
    """This thread's reusable legacy numpy generator."""
    if not hasattr(_LOCAL, "rng"):
        _LOCAL.rng = np.random.RandomState(0)
    return _LOCAL.rng


class GenerationFailed(RuntimeError):
    """This seed's room cannot hold the boxes, or no reverse search moved a box."""


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    """Parameters of the level distribution (RAGEN's SokobanEnvConfig subset)."""

    dim_room: tuple[int, int] = (6, 6)
    num_boxes: int = 1
    search_depth: int = 300
    p_change_directions: float = 0.35
    num_gen_steps: int | None = None  # None: int(1.7 * (rows + cols)), as gym-sokoban

    def __post_init__(self):
        # Settings that can never make a level: RAGEN would retry new seeds forever (or hang on a 1-row room).
        if len(self.dim_room) != 2 or min(self.dim_room) < 3:
            raise ValueError(f"dim_room must be (rows, cols) with both >= 3 (a walled border around the floor), "
                             f"got {self.dim_room}.")
        if self.num_boxes < 1:
            raise ValueError(f"num_boxes must be >= 1, got {self.num_boxes}.")
        if self.search_depth < 3:
            raise ValueError(f"search_depth must be >= 3 (the reverse search needs 2 levels below the start to pull "
                             f"a box), got {self.search_depth}; RAGEN's variants use 10 to 300.")

    @property
    def walk_steps(self) -> int:
        if self.num_gen_steps is not None:
            return self.num_gen_steps
        return int(1.7 * (self.dim_room[0] + self.dim_room[1]))


def room_topology(rng: random.Random, dim: tuple[int, int], p_change: float, steps: int) -> list[int]:
    """Random-walk room, row-major flat list [H*W]: 1 floor, 0 wall, walled border."""
    rows, cols = dim
    below = rng._randbelow  # sample(x, 1)[0], randint and choice all draw one _randbelow
    direction = _WALK_DIRECTIONS[below(4)]
    r, c = 1 + below(rows - 1), 1 + below(cols - 1)
    level = [0] * (rows * cols)
    for _ in range(steps):
        if rng.random() < p_change:
            direction = _WALK_DIRECTIONS[below(4)]
        r = min(max(r + direction[0], 1), rows - 2)
        c = min(max(c + direction[1], 1), cols - 2)
        for dr, dc in _MASK_CELLS[below(len(_MASK_CELLS))]:
            level[(r + dr) * cols + c + dc] = 1
    for i in range(cols):
        level[i] = level[(rows - 1) * cols + i] = 0
    for i in range(rows):
        level[i * cols] = level[i * cols + cols - 1] = 0
    return level


def place_player_and_targets(np_rng: np.random.RandomState, room: list[int], num_boxes: int) -> list[int]:
    """Mark the player (5) and `num_boxes` targets (2) on random floor cells of a flat room."""
    floor = [i for i, v in enumerate(room) if v == FLOOR]
    if len(floor) <= num_boxes + 1:
        raise GenerationFailed(f"only {len(floor)} floor cells for 1 player and {num_boxes} boxes")
    room = list(room)
    room[floor[np_rng.randint(len(floor))]] = PLAYER
    for _ in range(num_boxes):
        free = [i for i, v in enumerate(room) if v == FLOOR]
        room[free[np_rng.randint(len(free))]] = TARGET
    return room


class _ReverseSearch:
    """RAGEN's depth-first reverse play on integer states (flat cell indices).

    A state is (player, box positions in target order, pulled flags); the explored set keys on
    what the room grid shows (the player, and each box with its pulled/unpulled code), as the
    original hashes the grid.
    """

    def __init__(self, structure: list[int], cols: int, search_depth: int):
        self.cols = cols
        self.floor = [v != WALL for v in structure]
        self.targets = [i for i, v in enumerate(structure) if v == TARGET]
        self.target_rc = [divmod(t, cols) for t in self.targets]
        self.search_depth = search_depth
        self.steps = [dr * cols + dc for dr, dc in DELTAS]
        self.explored: set = set()
        self.best_score = -1
        self.best: tuple = ()

    def displacement(self, boxes: list[int]) -> int:
        total = 0
        for b, (tr, tc) in zip(boxes, self.target_rc):
            br, bc = divmod(b, self.cols)
            total += abs(br - tr) + abs(bc - tc)
        return total

    def run(self, player: int) -> tuple[int, list[int]]:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, self.search_depth + 200))
        try:
            self._visit(player, list(self.targets), (False,) * len(self.targets), 0, -1, self.search_depth)
        finally:
            sys.setrecursionlimit(limit)
        return self.best[0], list(self.best[1])

    def _visit(self, player: int, boxes: list[int], pulled: tuple, swaps: int, last_pull: int, ttl: int) -> None:
        ttl -= 1
        explored = self.explored
        if ttl <= 0 or len(explored) >= _MAX_EXPLORED:
            return
        key = (player, boxes[0], pulled[0]) if len(boxes) == 1 else (player, tuple(sorted(zip(boxes, pulled))))
        if key in explored:
            return
        if swaps or self.best_score < 0:  # otherwise the score is 0 and cannot beat the best
            # Score is 0 unless every target is free (no box, no player on it).
            free = all(t != player and t not in boxes for t in self.targets)
            score = swaps * self.displacement(boxes) if free else 0
            if score > self.best_score:
                self.best_score, self.best = score, (player, tuple(boxes))
        explored.add(key)
        floor = self.floor
        for step in self.steps:
            nxt = player + step
            if not floor[nxt] or nxt in boxes:
                continue  # the move fails; the original's visit of the same state is a no-op
            behind = player - step
            if behind in boxes:
                k = boxes.index(behind)
                new_boxes = boxes.copy()
                new_boxes[k] = player
                self._visit(nxt, new_boxes, pulled[:k] + (True,) + pulled[k + 1 :], swaps + (k != last_pull), k, ttl)
            else:
                self._visit(nxt, boxes, pulled, swaps, last_pull, ttl)


def random_player_moves(rng: random.Random, state: list[int], structure: list[int], cols: int,
                        move_probability: float) -> None:
    """Walk the player up to 3 random steps onto free cells it has not visited (flat lists, in place)."""
    if rng.random() > move_probability:
        return
    pos = state.index(PLAYER)
    visited = [pos]
    for taken in range(1, 4):
        moves = [pos + dr * cols + dc for dr, dc in DELTAS]
        moves = [m for m in moves if state[m] in (FLOOR, TARGET) and m not in visited]
        if not moves:
            break
        nxt = moves[rng._randbelow(len(moves))]  # = rng.choice(moves)
        state[pos] = structure[pos]
        state[nxt] = PLAYER
        pos = nxt
        visited.append(pos)
        if taken >= 3 or rng.random() > 0.5:
            break


def generate_room(seed: int, cfg: GeneratorConfig) -> tuple[np.ndarray, np.ndarray]:
    """One level for `seed`: (room_fixed [H, W] (0/1/2), room_state [H, W] (0..5)) as int8."""
    rng, np_rng = random.Random(seed), _np_rng()
    np_rng.seed(seed % 2**32)  # = np.random.seed(seed); reseeding skips building a new RandomState
    rows, cols = cfg.dim_room
    for _ in range(_TRIES):
        room = room_topology(rng, cfg.dim_room, cfg.p_change_directions, cfg.walk_steps)
        room = place_player_and_targets(np_rng, room, cfg.num_boxes)
        structure = [FLOOR if v == PLAYER else v for v in room]
        search = _ReverseSearch(structure, cols, cfg.search_depth)
        player, boxes = search.run(room.index(PLAYER))
        displacement = search.displacement(boxes)
        if displacement > 0:
            break
    else:
        raise GenerationFailed("reverse search found no state with a displaced box")
    state = list(structure)
    for b in boxes:
        state[b] = BOX
    state[player] = PLAYER
    random_player_moves(rng, state, structure, cols, 0.8 if displacement == 1 else 0.5)
    shape = (rows, cols)
    return np.array(structure, np.int8).reshape(shape), np.array(state, np.int8).reshape(shape)


def next_seed(seed: int) -> int:
    """Seed retried after a failed generation (RAGEN uses Python's salted `hash`; ours is stable)."""
    return int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:4], "little")


def generate_level(seed: int, cfg: GeneratorConfig, max_retries: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """The level of integer `seed`, retrying failed seeds as RAGEN's reset does (it never gives up).

    Crowded rooms fail most seeds (6x6 with 5 boxes: ~96%, so some seeds need 100+ retries); the cap only
    turns a config that (almost) never works into an error instead of a hang.
    """
    s = seed
    for _ in range(max_retries):
        try:
            return generate_room(s, cfg)
        except GenerationFailed:
            s = next_seed(s)
    raise RuntimeError(f"No Sokoban level for seed {seed} after {max_retries} retries: dim_room={cfg.dim_room} "
                       f"rarely fits num_boxes={cfg.num_boxes} (search_depth={cfg.search_depth}); use a larger "
                       "room, fewer boxes or a deeper search.")
