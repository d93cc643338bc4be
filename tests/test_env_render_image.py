"""Sokoban and FrozenLake drawn as RGB images inside JAX: jittable and vmapped, one colour per tile kind, the board
read back from its picture, the picture following the player, and the image observation formats."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.frozenlake import image as fl_image
from envs.frozenlake import render as fl_render
from envs.frozenlake.env import FrozenLake
from envs.observation import IMAGE_MARKER, Observation
from envs.sokoban import image as sk_image
from envs.sokoban import render as sk_render
from envs.sokoban.env import Sokoban, _state_from_level as state_from_level, step_level
from envs.tiles import fill, read_tiles, sprite_sheet

S = 28
SOKOBAN_GRID = "######\n#_O√_#\n#XP__#\n#__X_#\n#_O__#\n######"
SOKOBAN_ON_TARGET = "#####\n#S_X#\n#_O_#\n#####"
FROZENLAKE_GRID = "P_O_\n_O__\n___G\n____"


@pytest.fixture(scope="module")
def sokoban():
    return Sokoban(render_mode="image", bank_size=1, use_cache=False)


@pytest.fixture(scope="module")
def frozenlake():
    return FrozenLake(render_mode="image")


def _tiles(image: np.ndarray) -> np.ndarray:
    """[H, W, S, S, 3]: the picture cut into its tiles."""
    h, w = image.shape[0] // S, image.shape[1] // S
    return image.reshape(h, S, w, S, 3).transpose(0, 2, 1, 3, 4)


def _has(tile: np.ndarray, color) -> bool:
    return bool((tile.reshape(-1, 3) == np.asarray(color, np.uint8)).all(axis=1).any())


def _random_boards(n: int, seed: int = 0):
    """A batch [n] of random 6 x 6 Sokoban states with every tile kind about equally often (one player each)."""
    rng = np.random.RandomState(seed)
    fixed, room = [], []
    for _ in range(n):
        codes = rng.choice([0, 1, 2, 3, 4], size=(6, 6))
        codes[divmod(rng.randint(36), 6)] = rng.choice([5, 6])
        f, r = sk_render.parse_grid("\n".join("".join(sk_render.GRID_LOOKUP[int(k)] for k in row) for row in codes))
        fixed.append(f)
        room.append(r)
    return jax.jit(jax.vmap(state_from_level))(np.stack(fixed), np.stack(room), np.full(n, -1, np.int32))


def _read_batch(pictures, sprites) -> np.ndarray:
    return np.asarray(jax.jit(jax.vmap(read_tiles, in_axes=(0, None)))(pictures, sprites))


def test_render_is_jittable_and_vmapped_over_a_batch(sokoban, frozenlake):
    states = _random_boards(4)
    batch = np.asarray(jax.jit(jax.vmap(sokoban.render_rgb))(states))
    assert batch.shape == (4, 6 * S, 6 * S, 3) and batch.dtype == np.uint8
    for i in range(4):
        np.testing.assert_array_equal(batch[i], sokoban.render_image(jax.tree.map(lambda x: x[i], states)))
    lakes = frozenlake.reset_from_seeds([0, 1, 2])
    pictures = np.asarray(jax.jit(jax.vmap(frozenlake.render_rgb))(lakes))
    assert pictures.shape == (3, 4 * S, 4 * S, 3) and pictures.dtype == np.uint8
    assert len({p.tobytes() for p in pictures}) == 3  # three different lakes, three different pictures


SOKOBAN_COLOURS = {  # render code: colours its tile shows, colours it must not
    0: ([(150, 70, 50)], [sk_image.FLOOR_RGB]),
    1: ([sk_image.FLOOR_RGB], [sk_image.TARGET_RGB, sk_image.PLAYER_RGB, sk_image.BOX_RGB]),
    2: ([sk_image.TARGET_RGB, sk_image.FLOOR_RGB], [sk_image.PLAYER_RGB, sk_image.BOX_RGB]),
    3: ([sk_image.BOX_ON_TARGET_RGB], [sk_image.BOX_RGB]),
    4: ([sk_image.BOX_RGB], [sk_image.BOX_ON_TARGET_RGB]),
    5: ([sk_image.PLAYER_RGB], [sk_image.TARGET_RGB]),
    6: ([sk_image.PLAYER_RGB, sk_image.TARGET_RGB], [sk_image.BOX_RGB]),
}
FROZENLAKE_COLOURS = {  # RAGEN grid code: colours its tile shows, colours it must not
    0: ([fl_image.PLAYER_RGB, fl_image.ICE_RGB], [fl_image.HOLE_RGB, fl_image.GOAL_RGB]),
    1: ([fl_image.ICE_RGB], [fl_image.PLAYER_RGB, fl_image.HOLE_RGB, fl_image.GOAL_RGB]),
    2: ([fl_image.HOLE_RGB], [fl_image.PLAYER_RGB]),
    3: ([fl_image.GOAL_RGB], [fl_image.PLAYER_RGB]),
    4: ([fl_image.HOLE_RGB, fl_image.PLAYER_RGB], [fl_image.GOAL_RGB]),
    5: ([fl_image.GOAL_RGB, fl_image.PLAYER_RGB], [fl_image.HOLE_RGB]),
}


def _kinds_drawn(env, states, codes_of, colours) -> set[int]:
    """Checks every cell of every state shows its kind's colours and none it must not; returns the kinds seen."""
    seen = set()
    for state in states:
        picture = _tiles(env.render_image(state))
        for (r, c), kind in np.ndenumerate(np.asarray(codes_of(state))):
            shows, lacks = colours[int(kind)]
            assert all(_has(picture[r, c], col) for col in shows), (kind, r, c)
            assert not any(_has(picture[r, c], col) for col in lacks), (kind, r, c)
            seen.add(int(kind))
    return seen


def test_each_sokoban_tile_kind_draws_its_colour(sokoban):
    states = [sokoban.state_from_grid(g) for g in (SOKOBAN_GRID, SOKOBAN_ON_TARGET)]
    seen = _kinds_drawn(sokoban, states, sokoban.get_obs, SOKOBAN_COLOURS)
    assert seen == set(SOKOBAN_COLOURS) and len(sk_render.KINDS) == len(SOKOBAN_COLOURS)  # all of RAGEN's kinds


def test_each_frozenlake_tile_kind_draws_its_colour(frozenlake):
    grids = (FROZENLAKE_GRID, FROZENLAKE_GRID.replace("P", "_").replace("O_\n", "X_\n", 1),
             FROZENLAKE_GRID.replace("P", "_").replace("G", "√"))
    seen = _kinds_drawn(frozenlake, [frozenlake.state_from_grid(g) for g in grids], fl_image.frozenlake_codes,
                        FROZENLAKE_COLOURS)
    assert seen == set(FROZENLAKE_COLOURS) and len(fl_render.KINDS) == len(FROZENLAKE_COLOURS)


def test_the_text_grid_is_read_back_from_the_picture(sokoban, frozenlake):
    """read_tiles recovers every cell's kind from the picture, which in RAGEN's symbols is the text grid (the tile
    meaning is the text renderer's), over many generated boards."""
    states = _random_boards(8, seed=1)
    codes = _read_batch(jax.jit(jax.vmap(sokoban.render_rgb))(states), sokoban.sprites)
    np.testing.assert_array_equal(codes, jax.vmap(sokoban.get_obs)(states))
    for i in range(8):
        one = jax.tree.map(lambda x: np.asarray(x[i]), states)
        text = "\n".join("".join(sk_render.GRID_LOOKUP[int(k)] for k in row) for row in codes[i])
        assert text == sk_render.render_grid(one.fixed, one.room)
    lakes = frozenlake.reset_from_seeds(list(range(8)))
    lake_codes = _read_batch(jax.jit(jax.vmap(frozenlake.render_rgb))(lakes), frozenlake.sprites)
    for i in range(8):
        one = jax.tree.map(lambda x: np.asarray(x[i]), lakes)
        text = "\n".join("".join(fl_render.GRID_LOOKUP[int(k)] for k in row) for row in lake_codes[i])
        assert text == fl_render.render_grid(one.tiles, int(one.pos))


def test_the_picture_changes_where_the_player_moves(sokoban, frozenlake):
    state = sokoban.state_from_grid(SOKOBAN_GRID)
    before = _tiles(sokoban.render_image(state))
    moved, _, effective = jax.jit(step_level)(state, jnp.int32(3))  # Right
    assert bool(effective)
    after = _tiles(sokoban.render_image(moved))
    changed = {tuple(rc) for rc in np.argwhere((before != after).any(axis=(2, 3, 4)))}
    assert changed == {(2, 2), (2, 3)}  # the player stepped right onto the floor
    np.testing.assert_array_equal(after[2, 3], sokoban.sprites[5])
    lake = frozenlake.state_from_rows(["SFFF", "FHFH", "FFFH", "HFFG"], seed=0).replace(
        slips=jnp.zeros(100, jnp.int8))
    _, stepped, *_ = jax.jit(frozenlake.step_env)(jax.random.key(0), lake, 2, frozenlake.default_params)  # Right
    a, b = _tiles(frozenlake.render_image(lake)), _tiles(frozenlake.render_image(stepped))
    assert {tuple(rc) for rc in np.argwhere((a != b).any(axis=(2, 3, 4)))} == {(0, 0), (0, 1)}


@pytest.mark.parametrize("env_cls", [Sokoban, FrozenLake])
def test_image_formats_give_the_picture_next_to_or_instead_of_the_text(env_cls):
    kw = dict(bank_size=1, use_cache=False) if env_cls is Sokoban else {}
    grid = SOKOBAN_GRID if env_cls is Sokoban else FROZENLAKE_GRID
    text_env, image_env, both_env = (env_cls(render_mode=m, **kw) for m in ("grid", "image", "text_image"))
    state = text_env.state_from_grid(grid)
    assert text_env.render_observation(state) == Observation(grid)
    image_only = image_env.render_observation(state)
    assert image_only.text == IMAGE_MARKER and image_only.images[0].shape[2] == 3
    assert "image" in image_env.instruction() and image_env.legend() == ""
    both = both_env.render_observation(state)
    assert both.text == f"{IMAGE_MARKER}\n{grid}" and both_env.legend() == text_env.legend() != ""
    np.testing.assert_array_equal(both.images[0], image_only.images[0])
    small = env_cls(render_mode="image", tile_size=16, **kw).render_image(state)
    assert small.shape[:2] == (16 * len(grid.split("\n")), 16 * len(grid.split("\n")[0]))


def test_sprites_must_differ_and_observations_must_match_their_markers():
    with pytest.raises(ValueError, match="kinds 0 and 1 are drawn identically"):
        sprite_sheet([fill(4, (1, 2, 3)), fill(4, (1, 2, 3))])
    with pytest.raises(ValueError, match="1 <image> markers but it has 0 images"):
        Observation("look: <image>")
