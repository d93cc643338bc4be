"""RAGEN's env_config keys in config.env.kwargs: aliases build the same env as our names; the rest are refused by
name."""

import jax
import numpy as np
import pytest

from envs import registry
from envs.batch import EnvSetupError, make_env_batch

SEEDS = [10000, 10001, 10002]
DIFFERENT_LOOKUP = {0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"}
DIFFERENT_VOCAB = {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box", "A": "player",
                   "@": "player on target"}


def _texts(name, **kwargs):
    env = registry.make(name, **kwargs)
    state = env.reset_from_seeds(SEEDS)
    return [env.render_text(jax.tree.map(lambda x: x[i], state)) for i in range(len(SEEDS))], env


@pytest.mark.parametrize("name,ragen,ours", [
    ("SimpleSokoban", dict(observation_format="grid_coord"), dict(render_mode="grid_coord")),
    ("SimpleSokoban", dict(render_mode="text", observation_format="coord"), dict(render_mode="coord")),
    ("CoordSokoban", dict(observation_format="grid"), dict(render_mode="grid")),  # replaces the variant's value
    ("SimpleSokoban", dict(dim_x=6, dim_y=6, num_boxes=1), dict(dim_room=(6, 6))),
    ("SimpleSokoban", dict(grid_lookup=DIFFERENT_LOOKUP, grid_vocab=DIFFERENT_VOCAB), dict(grid_vocab="different")),
    ("SimpleSokoban", dict(grid_lookup={str(k): v for k, v in DIFFERENT_LOOKUP.items()}), dict(grid_vocab="different")),
    ("SokobanDifferentGridVocab", dict(grid_vocab={"#": "wall", "_": "empty", "O": "target", "√": "box on target",
                                                   "X": "box", "P": "player", "S": "player on target"}),
     dict(grid_vocab="default")),
    ("FrozenLake", dict(observation_format="grid_coord"), dict(render_mode="grid_coord")),
    ("FrozenLake", dict(is_slippery=False), dict(success_rate=1.0)),
    ("FrozenLake", dict(is_slippery=True, success_rate=0.5), dict(success_rate=0.5)),
])
def test_jax_env_alias_is_our_name(name, ragen, ours):
    got, env = _texts(name, **ragen)
    want, ref = _texts(name, **ours)
    assert got == want
    assert env.instruction() + env.legend() == ref.instruction() + ref.legend()


def test_sokoban_dim_x_dim_y_set_dim_room():
    env = registry.make("SimpleSokoban", dim_x=7, dim_y=5)
    assert env.config.dim_room == (7, 5)
    assert env.observation_format == "grid" and registry.make("SimpleSokoban").config.dim_room == (6, 6)


def test_frozenlake_is_slippery_false_is_deterministic():
    env = registry.make("FrozenLake", is_slippery=False)
    assert env.success_rate == 1.0
    assert not np.asarray(env.reset_from_seeds(SEEDS).slips).any()
    assert registry.make("FrozenLake").success_rate == 0.8  # default unchanged


def test_bandit_and_host_env_renames():
    bandit = registry.make("Bandit", split="test", lo_arm_score=0.2, hi_arm_hiscore=2.0, hi_arm_loscore=-1.0,
                           hi_arm_hiscore_prob=0.5, action_space_start=1, render_mode="text")
    p = bandit.default_params
    assert (bandit.split, p.lo_reward, p.hi_reward, p.hi_loss_reward, p.hi_prob) == ("test", 0.2, 2.0, -1.0, 0.5)
    assert registry.make("Bandit").default_params.hi_loss_reward == 0.0
    spec = registry.get_spec("SearchQA")
    assert registry.env_kwargs(spec, dict(train_path="q.jsonl", retrieval_server_url="http://h:1",
                                          retrieval_timeout=5.0, max_search_results=3)) == dict(
        questions_path="q.jsonl", retrieval_url="http://h:1", timeout_s=5.0, top_k=3)
    assert registry.env_kwargs(registry.get_spec("Countdown"), dict(train_path="t.parquet"))["data_path"] == "t.parquet"
    assert registry.env_kwargs(registry.get_spec("Lean"), dict(dataset_name_or_path="f.jsonl")) == dict(
        dataset_path="f.jsonl")


def test_val_layer_replaces_env_layer_across_names():
    spec = registry.get_spec("SimpleSokoban")
    kwargs = registry.env_kwargs(spec, dict(render_mode="coord"), dict(observation_format="grid"))
    assert kwargs["render_mode"] == "grid"


@pytest.mark.parametrize("name,kwargs,words", [
    ("SimpleSokoban", dict(dim_x=8), ["dim_x", "dim_y", "both"]),
    ("SimpleSokoban", dict(dim_x=8, dim_y=8, dim_room=(6, 6)), ["dim_room", "dim_x/dim_y"]),
    ("SimpleSokoban", dict(observation_format="image"), ["observation_format", "'image'", "grid_coord"]),
    ("SimpleSokoban", dict(render_mode="coord", observation_format="grid"), ["render_mode", "observation_format"]),
    ("SimpleSokoban", dict(render_mode="rgb_array"), ["rgb_array", "text"]),
    ("SimpleSokoban", dict(grid_lookup={0: "Z"}), ["grid_lookup", "misses code 1 (empty)", "6 (player on target)"]),
    ("SimpleSokoban", dict(grid_lookup=DIFFERENT_LOOKUP, grid_vocab="default"), ["grid_lookup", "grid_vocab"]),
    ("SimpleSokoban", dict(action_lookup={1: "North"}), ["action_lookup", "Up, Down"]),
    ("SimpleSokoban", dict(max_workers=32), ["max_workers", "worker pool"]),
    ("Countdown", dict(parallel_friendly=False), ["parallel_friendly", "worker pool"]),
    ("SimpleSokoban", dict(dim_z=3), ["dim_z", "dim_room", "dim_x"]),
    ("FrozenLake", dict(is_slippery=False, success_rate=0.8), ["is_slippery", "success_rate"]),
    ("FrozenLake", dict(map_seed=3), ["map_seed", "train_seed"]),
    ("FrozenLake", dict(observation_format="pixels"), ["observation_format"]),
    ("Bandit", dict(split="test", arm_names="train"), ["arm_names", "split"]),
    ("Bandit", dict(action_space_start=0), ["action_space_start"]),
    ("MetamathQA", dict(dataset_path="meta-math/MetaMathQA"), ["dataset_path", "data_path"]),
    ("SimpleSudoku", dict(show_candidates=True), ["show_candidates", "show_valid_numbers"]),
    ("WebShop", dict(dataset="full"), ["dataset", "data_dir"]),
    ("WebShop", dict(observation_mode="html"), ["observation_mode"]),
    ("SearchQA", dict(mock_mode=True), ["mock_mode", "retrieval_url"]),
    ("DeepCoder", dict(cache_dir="x"), ["cache_dir", "dataset_path"]),
    ("Lean", dict(dataset_split="train"), ["dataset_split", "dataset_path"]),
])
def test_refused_ragen_keys_name_the_key(name, kwargs, words):
    with pytest.raises(ValueError) as e:
        registry.env_kwargs(registry.get_spec(name), kwargs)
    for word in words:
        assert word in str(e.value)


def test_env_batch_reports_ragen_key_errors_as_setup_errors():
    with pytest.raises(EnvSetupError, match="max_workers"):
        make_env_batch("FrozenLake", 2, max_workers=32)
    with pytest.raises(EnvSetupError, match="map_seed"):
        make_env_batch("FrozenLake", 2, later_overrides=dict(map_seed=1))
    batch = make_env_batch("FrozenLake", 2, is_slippery=False)
    assert batch.env.success_rate == 1.0
