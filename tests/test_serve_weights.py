"""What `python -m ragen_jax.serve --checkpoint X` serves: a Hugging Face folder's weights, or the actor weights of
a run's Orbax checkpoint (LoRA adapters merged) in the model the run's config.json describes."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from configs.sokoban import get_config
from ragen_jax.checkpoint import Checkpointer
from ragen_jax.models import CheckpointError, merge_lora
from ragen_jax.serve.__main__ import parse_args
from ragen_jax.serve.weights import load_served
from ragen_jax.trainer.setup import load_policy_and_tokenizer, split_model
from serve_testlib import tiny_hf_folder


def _params(model_or_state):
    state = model_or_state if isinstance(model_or_state, nnx.State) else nnx.state(model_or_state, nnx.Param)
    return {path: np.asarray(v.get_value()) for path, v in nnx.to_flat_state(state)}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for path in a:
        np.testing.assert_array_equal(a[path], b[path], err_msg=str(path))


def _run_with_checkpoint(run, lora_rank: int = 0):
    """A run folder: config.json's model section and checkpoint 3 whose actor weights differ from a fresh init."""
    cfg = get_config("tiny")
    cfg.model.lora.rank = lora_rank
    os.makedirs(run)
    with open(run / "config.json", "w") as f:
        json.dump({"model": cfg.model.to_dict()}, f)
    model, _ = load_policy_and_tokenizer(cfg.model)
    split = split_model(model, lora_rank > 0)
    trained = jax.tree.map(lambda x: x + 0.25, split.trainable)
    checkpointer = Checkpointer(str(run / "checkpoints"))
    checkpointer.save(3, {"actor": trained, "actor_opt": {"mu": trained}}, {"step": 3})
    checkpointer.close()
    return nnx.merge(split.graphdef, trained, split.frozen)


def test_a_hugging_face_folder_serves_its_weights_under_its_name(tmp_path):
    folder = tiny_hf_folder(tmp_path / "my-agent", seed=3)
    served = load_served(folder)
    assert served.name == "my-agent" and "Hugging Face folder" in served.source
    from ragen_jax.models import load_model
    _assert_same(_params(served.params.filter(nnx.Param)), _params(load_model(folder)))
    assert load_served(folder, name="other").name == "other"


@pytest.mark.parametrize("lora_rank", [0, pytest.param(2, marks=pytest.mark.slow)])  # LoRA: its adapters merged
def test_a_run_serves_its_latest_checkpoints_actor(tmp_path, lora_rank):
    run = tmp_path / "run"
    trained = _run_with_checkpoint(run, lora_rank)
    expected = _params(merge_lora(trained) if lora_rank else trained)
    for checkpoint in (run, run / "checkpoints" / "3"):
        served = load_served(str(checkpoint))
        assert served.name == "run-step3" and "checkpoint step 3" in served.source
        _assert_same(_params(served.params.filter(nnx.Param)), expected)


def test_a_checkpoint_without_its_runs_config_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    _run_with_checkpoint(run)
    os.remove(run / "config.json")
    with pytest.raises(CheckpointError, match="needs its run's config.json"):
        load_served(str(run))
    with pytest.raises(FileNotFoundError, match="Orbax step folder"):
        load_served(str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="serves no trained weights"):
        load_served("init")


@pytest.mark.parametrize("argv,needle", [(["--slots", "0"], "--slots must be >= 1"),
                                         (["--max-tokens", "64", "--max-model-len", "64"], "must be below")])
def test_server_limits_that_cannot_serve_are_refused(argv, needle, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", "x", *argv])
    assert needle in capsys.readouterr().err
