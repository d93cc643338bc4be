"""Custom grid symbol tables (RAGEN's grid_lookup / grid_vocab) for Sokoban and FrozenLake: the grid and the legend
follow the table as RAGEN's renderers do, and a table that is ambiguous or misses a kind is refused by name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import registry
from envs.frozenlake import FrozenLake
from envs.frozenlake.generator import FROZEN, START
from envs.sokoban.env import Sokoban

KEY = jax.random.PRNGKey(0)
RIGHT, LEFT = 3, 2  # Sokoban ids
FL_DOWN, FL_RIGHT = 1, 2  # FrozenLake ids
# Sokoban render codes 0..6: wall, empty, target, box on target, box, player, player on target.
SOKO_LOOKUP = {0: "+", 1: ".", 2: "t", 3: "*", 4: "b", 5: "p", 6: "q"}
SOKO_LEGEND = ("\nThe meaning of each symbol in the state is:\n+: wall, .: empty, t: target, *: box on target, b: box, "
               "p: player, q: player on target")
# FrozenLake codes 0..5: player, empty, hole, goal, player in hole, player on goal.
FL_LOOKUP = {0: "A", 1: ".", 2: "H", 3: "$", 4: "x", 5: "!"}


def _play(env, state, actions):
    for a in actions:
        _, state, _, _, _ = env.step_env(KEY, state, jnp.int32(a), env.default_params)
    return state


def test_sokoban_custom_lookup_renders_every_kind_and_its_legend():
    env = registry.make("SimpleSokoban", grid_lookup=SOKO_LOOKUP)
    state = env.state_from_grid("+++++++\n+tpb.t+\n+++++++")
    assert env.render_text(state) == "+++++++\n+tpb.t+\n+++++++"
    state = _play(env, state, [RIGHT, RIGHT])
    assert env.render_text(state) == "+++++++\n+t..p*+\n+++++++"
    state = _play(env, state, [LEFT, LEFT, LEFT])
    assert env.render_text(state) == "+++++++\n+q...*+\n+++++++"
    assert env.legend() == SOKO_LEGEND


def test_sokoban_custom_table_in_grid_coord_and_round_trip():
    env = registry.make("CoordSokoban", grid_lookup=SOKO_LOOKUP)
    grid = "+++++\n+pbt+\n+++++"
    text = env.render_text(env.state_from_grid(grid))
    assert text.endswith("Grid Map: \n" + grid) and text.startswith("Coordinates: \n")
    seeded = env.reset_from_seeds([10000])
    drawn = registry.make("SimpleSokoban", grid_lookup=SOKO_LOOKUP).render_text(jax.tree.map(lambda x: x[0], seeded))
    assert set(drawn) <= set(SOKO_LOOKUP.values()) | {"\n"}
    assert env.render_text(env.state_from_grid(drawn)).endswith("Grid Map: \n" + drawn)


def test_sokoban_custom_meanings_keep_their_words_and_order():
    vocab = {"p": "you", "+": "brick", ".": "floor", "t": "goal", "*": "done box", "b": "crate", "q": "you on goal"}
    env = registry.make("SimpleSokoban", grid_lookup=SOKO_LOOKUP, grid_vocab=vocab)
    assert env.legend() == ("\nThe meaning of each symbol in the state is:\np: you, +: brick, .: floor, t: goal, "
                            "*: done box, b: crate, q: you on goal")
    assert env.render_text(env.state_from_grid("++++\n+pb+\n++++")) == "++++\n+pb+\n++++"
    relabelled = registry.make("SimpleSokoban", grid_vocab={"#": "brick", "_": "floor", "O": "goal", "√": "done box",
                                                            "X": "crate", "P": "you", "S": "you on goal"})
    assert relabelled.render_text(relabelled.state_from_grid("####\n#PX#\n####")) == "####\n#PX#\n####"
    assert relabelled.legend().endswith("#: brick, _: floor, O: goal, √: done box, X: crate, P: you, S: you on goal")


def test_sokoban_legend_alone_draws_each_kind_by_its_name():
    vocab = {"+": "wall", ".": "empty", "t": "target", "*": "box on target", "b": "box", "p": "player",
             "q": "player on target"}
    env = registry.make("SimpleSokoban", grid_vocab=vocab)
    assert env.grid_lookup == SOKO_LOOKUP and env.legend() == SOKO_LEGEND


def test_a_later_layer_table_replaces_the_variants():
    spec = registry.get_spec("SokobanDifferentGridVocab")
    kwargs = registry.env_kwargs(spec, dict(grid_lookup=SOKO_LOOKUP))
    assert Sokoban(**kwargs).legend() == SOKO_LEGEND
    back = registry.env_kwargs(spec, dict(grid_lookup=SOKO_LOOKUP), dict(grid_vocab="default"))
    assert (back["grid_vocab"], back["grid_lookup"]) == (None, None)
    assert registry.env_kwargs(spec, dict(grid_lookup={str(k): v for k, v in SOKO_LOOKUP.items()})) == kwargs


def test_frozenlake_custom_lookup_renders_every_kind_and_its_legend():
    env = registry.make("FrozenLake", grid_lookup=FL_LOOKUP, success_rate=1.0)
    state = env.state_from_rows(["SFFF", "FHFH", "FFFH", "HFFG"])
    assert env.render_text(state) == "A...\n.H.H\n...H\nH..$"
    assert env.render_text(_play(env, state, [FL_RIGHT, FL_DOWN])) == "....\n.x.H\n...H\nH..$"
    goal = _play(env, env.state_from_rows(["SG", "FF"]), [FL_RIGHT])
    assert env.render_text(goal) == ".!\n.."
    assert env.legend() == ("\nThe meaning of each symbol in the state is:\nA: player, .: empty, H: hole, $: goal, "
                            "x: player in hole, !: player on goal")
    coord = registry.make("CoordFrozenLake", grid_lookup=FL_LOOKUP)
    assert coord.render_text(state).endswith("Grid Map: \nA...\n.H.H\n...H\nH..$")


FL_NAMED = {"a": "player", "-": "empty", "o": "hole", "g": "goal", "X": "player in hole", "v": "player on goal"}


@pytest.mark.parametrize("tables", [{}, dict(grid_lookup=FL_LOOKUP), dict(grid_vocab=FL_NAMED)])
@pytest.mark.parametrize("size", [4, 6])
def test_frozenlake_grid_reads_back_to_the_state_it_draws(tables, size):
    # FrozenLake had no grid reader, so a custom table's grid was never read back (Sokoban's is, above).
    env = registry.make("FrozenLake", size=size, success_rate=0.5, **tables)
    step, rng = jax.jit(env.step_env), np.random.default_rng(size)
    seeds = list(range(100, 112))
    for seed, state in zip(seeds, _unbatch(env.reset_from_seeds(seeds), len(seeds))):
        read = env.state_from_grid(env.render_text(state), seed=seed)
        assert jax.tree.all(jax.tree.map(np.array_equal, read, state)), seed  # a fresh episode: start under the player
        for _ in range(env.max_steps):
            text = env.render_text(state)
            read = env.state_from_grid(text, seed=seed)
            assert env.render_text(read) == text and int(read.pos) == int(state.pos), (seed, text)
            assert np.array_equal(_drawn(read.tiles), _drawn(state.tiles)), (seed, text)
            _, state, _, done, _ = step(KEY, state, jnp.int32(rng.integers(4)), env.default_params)
            if done:
                break
        assert env.render_text(env.state_from_grid(env.render_text(state))) == env.render_text(state)


def _unbatch(state, n):
    return [jax.tree.map(lambda x, i=i: x[i], state) for i in range(n)]


def _drawn(tiles):
    """What a grid shows of the tiles: the start is drawn as frozen ice."""
    return np.where(np.asarray(tiles) == START, FROZEN, np.asarray(tiles))


@pytest.mark.parametrize("grid,words", [
    ("A.?.\n.H.H\n...H\nH..$", ["unknown symbol '?' at row 0, col 2", "'A' (player)", "'!' (player on goal)"]),
    ("P___\n_O_O\n___O\nO__G", ["unknown symbol 'P' at row 0, col 0"]),  # the default table's symbols
    ("A...\n.H.H\n..H\nH..$", ["row 2 has 3 cells but row 0 has 4"]),
    ("A...\n.H.H\nH..$", ["3 rows of 4 cells", "square"]),
    ("A...\n.H.A\n...H\nH..$", ["2 player cells", "exactly one"]),
    ("....\n.H.H\n...H\nH..$", ["0 player cells"]),
    ("A...\n.H.H\n...H\nH...", ["0 goal cells", "'$'"]),
    ("", ["empty"]),
])
def test_frozenlake_unreadable_grid_is_refused_by_name(grid, words):
    env = registry.make("FrozenLake", grid_lookup=FL_LOOKUP)
    with pytest.raises(ValueError) as e:
        env.state_from_grid(grid)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_frozenlake_default_table_given_as_dicts_is_the_default():
    kwargs = registry.env_kwargs(registry.get_spec("FrozenLake"), dict(
        grid_lookup={0: "P", 1: "_", 2: "O", 3: "G", 4: "X", 5: "√"},
        grid_vocab={"P": "player", "_": "empty", "O": "hole", "G": "goal", "X": "player in hole",
                    "√": "player on goal"}))
    assert (kwargs["grid_lookup"], kwargs["grid_vocab"]) == (None, None)


@pytest.mark.parametrize("name,kwargs,words", [
    ("SimpleSokoban", dict(grid_lookup={**SOKO_LOOKUP, 4: "p"}), ["ambiguous", "'p' draws box and player"]),
    ("SimpleSokoban", dict(grid_lookup={k: v for k, v in SOKO_LOOKUP.items() if k != 3}),
     ["grid_lookup misses code 3 (box on target)"]),
    ("SimpleSokoban", dict(grid_lookup={**SOKO_LOOKUP, 7: "z"}), ["codes 7", "6: player on target"]),
    ("SimpleSokoban", dict(grid_lookup={**SOKO_LOOKUP, 0: "##"}), ["grid_lookup[0] (wall)", "'##'", "one character"]),
    ("SimpleSokoban", dict(grid_lookup={**SOKO_LOOKUP, 1: "\n"}), ["grid_lookup[1] (empty)", "line break"]),
    ("SimpleSokoban", dict(grid_lookup=SOKO_LOOKUP, grid_vocab={"+": "wall"}),
     ["grid_vocab misses", "'.'", "exactly the grid's symbols"]),
    ("SimpleSokoban", dict(grid_lookup=SOKO_LOOKUP, grid_vocab={**{v: "x" for v in SOKO_LOOKUP.values()}, "z": "?"}),
     ["grid_vocab lists 'z'", "does not draw"]),
    ("SimpleSokoban", dict(grid_lookup=SOKO_LOOKUP, grid_vocab={"+": "wall", ".": "empty", "t": "target",
                                                                "*": "box on target", "b": "player", "p": "box",
                                                                "q": "player on target"}),
     ["calls 'b' the player", "draws the player as 'p'"]),
    ("SimpleSokoban", dict(grid_vocab={"+": "brick", ".": "floor"}), ["names no symbol as 'wall'", "give grid_lookup"]),
    ("SimpleSokoban", dict(grid_vocab={"+": "wall", "-": "wall"}), ["symbols '+', '-' as 'wall'", "give grid_lookup"]),
    ("SimpleSokoban", dict(grid_lookup=SOKO_LOOKUP, grid_vocab="different"), ["grid_lookup", "'different'"]),
    ("SimpleSokoban", dict(grid_vocab="fancy"), ["grid_vocab", "'fancy'", "'default', 'different' or a dict"]),
    ("FrozenLake", dict(grid_lookup={**FL_LOOKUP, 5: "$"}), ["ambiguous", "'$' draws goal and player on goal"]),
    ("FrozenLake", dict(grid_lookup={0: "A"}), ["misses code 1 (empty)", "5 (player on goal)"]),
])
def test_malformed_tables_are_refused_by_name(name, kwargs, words):
    with pytest.raises(ValueError) as e:
        registry.make(name, **kwargs)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_constructor_takes_the_same_tables():
    assert Sokoban(grid_lookup=SOKO_LOOKUP).legend() == SOKO_LEGEND
    assert FrozenLake(grid_lookup=FL_LOOKUP).grid_vocab["!"] == "player on goal"
    with pytest.raises(ValueError, match="does not draw the 'default' table"):
        Sokoban(grid_vocab="default", grid_lookup=SOKO_LOOKUP)
