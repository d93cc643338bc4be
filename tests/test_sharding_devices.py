"""Sharded placement, train step and generation on 8 forced CPU devices vs one device.

Each case runs tests/sharding_worker.py in a subprocess with XLA_FLAGS set before jax starts
(the suite's own process keeps its single device).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MESHES = [(8, 1, 1), (1, 8, 1), (1, 4, 2), (2, 2, 2)]
AXES = ("data", "fsdp", "tensor")


def run_worker(mode: str, out: str, timeout: float = 900) -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "sharding_worker.py"), mode, out], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def placement(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sharding") / "placement.json")
    run_worker("placement", out)
    with open(out) as f:
        return json.load(f)


def _expected_shard(shape, spec: str, mesh) -> list[int]:
    sizes = dict(zip(AXES, mesh))
    entries = eval(spec.replace("P(", "("), {})  # noqa: S307 - our own repr of a PartitionSpec
    entries = entries if isinstance(entries, tuple) else (entries,)
    out = list(shape)
    for i, entry in enumerate(entries):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
        out[i] //= math.prod(sizes[a] for a in axes)
    return out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_every_array_is_placed_as_its_spec_says(placement, mesh):
    for section in ("trainable", "frozen", "sampling", "batch", "cache"):
        for path, d in placement[str(mesh)][section].items():
            assert d["shard_shapes"] == [_expected_shard(d["shape"], d["spec"], mesh)], (section, path, d)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_weights_really_split(placement, mesh):
    data, fsdp, tensor = mesh
    p = placement[str(mesh)]
    q = p["frozen"]["model/layers/0/self_attn/q_proj/kernel"]  # [128, 128]: fsdp x tensor
    assert q["shard_shapes"] == [[128 // fsdp, 128 // tensor]] and q["distinct"] == fsdp * tensor
    down = p["frozen"]["model/layers/1/mlp/down_proj/kernel"]  # [384, 128]: tensor x fsdp
    assert down["shard_shapes"] == [[384 // tensor, 128 // fsdp]]
    emb = p["frozen"]["model/embed_tokens/embedding"]  # [1152, 128]: vocab over tensor
    assert emb["shard_shapes"] == [[1152 // tensor, 128 // fsdp]]
    lora_b = p["trainable"]["model/layers/0/mlp/up_proj/lora_b"]  # [4, 384]
    assert lora_b["shard_shapes"] == [[4, 384 // (tensor * fsdp)]]
    assert p["frozen"]["model/norm/weight"]["distinct"] == 1  # norms replicated
    # sampling layout drops fsdp: weights are whole along the fsdp dimension
    assert p["sampling"]["model/layers/0/self_attn/q_proj/kernel"]["shard_shapes"] == [[128, 128 // tensor]]
    assert p["batch"]["tokens"]["shard_shapes"] == [[16 // (data * fsdp), 24]]
    for layer in ("k/0", "k/1", "v/0", "v/1"):  # per layer [8 rows, 2 kv heads, 32, 32]
        assert p["cache"][layer]["shard_shapes"] == [[8 // (data * fsdp), 2 // tensor, 32, 32]]
    assert f"multiple of {data * fsdp}" in p["bad_batch_error"]


def test_model_hints_activation_shardings_under_a_mesh(placement):
    """Under jax.set_mesh((1, 4, 2)) the forward pass pins rows to (data, fsdp) and heads, MLP features and
    vocab to tensor (2 layers: embedding + per layer q, k, v, attention out, MLP hidden, residual + logits);
    without a mesh there is no constraint at all."""
    hints = placement["hints"]
    assert hints["without"] == []
    rows, tensor3, tensor4 = ('[{"data", "fsdp"}, {}, {}]', '[{"data", "fsdp"}, {}, {"tensor"}]',
                              '[{"data", "fsdp"}, {}, {"tensor"}, {}]')
    assert hints["within"].count(rows) == 1 + 2  # embedding, each layer's output
    assert hints["within"].count(tensor4) == 3 * 2  # q, k, v per layer
    assert hints["within"].count(tensor3) == 2 * 2 + 1  # attention output, MLP hidden per layer; logits
    assert hints["logits_spec"] == "P('fsdp', None, 'tensor')"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sharding") / "train.npz")
    run_worker("train", out)
    return dict(np.load(out))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sharding") / "gen.npz")
    run_worker("generate", out)
    return dict(np.load(out))


def _results(res: dict, prefix: str) -> dict:
    return {k[len(prefix) + 1:]: v for k, v in res.items() if k.startswith(prefix + "/")}


@pytest.mark.slow
@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_train_step_matches_single_device(trained, mesh):
    want, got = _results(trained, "single"), _results(trained, str(mesh))
    assert got.keys() == want.keys() and any(k.startswith("param/") for k in want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)
    assert want["metric/update_skipped"] == 0.0


@pytest.mark.slow
def test_lora_train_step_matches_single_device(trained):
    want, got = _results(trained, "single_lora"), _results(trained, "(2, 2, 2)_lora")
    assert all("lora_" in k for k in want if k.startswith("param/"))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)


@pytest.mark.slow
def test_critic_update_matches_single_device(trained):
    """PPO's critic: the scored values, value loss, gradient norm and updated parameters on (2, 2, 2)."""
    want, got = _results(trained, "single_critic"), _results(trained, "(2, 2, 2)_critic")
    assert any(k.startswith("param/") and "score" in k for k in want) and want["metric/vf_loss"] > 0
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)
    assert want["metric/update_skipped"] == 0.0


@pytest.mark.slow
def test_update_does_not_move_batch_rows_inside_the_micro_batch_scan(tmp_path):
    """The mini-batch's rows arrive split over (data, fsdp) in contiguous blocks; micro-batch i of them lived on a
    few devices only, so every step of the update's scan moved its rows (collective-permutes and all-gathers of
    tokens, masks, advantages). Now they are laid out once before the scan: no such collective runs inside it."""
    out = str(tmp_path / "collectives.json")
    run_worker("update_collectives", out)
    with open(out) as f:
        counts = json.load(f)
    assert set(counts) == {f"{m} {u}" for m in ("(8, 1, 1)", "(1, 4, 2)", "(2, 2, 2)") for u in ("actor", "critic")}
    assert {k: c for k, c in counts.items() if c} == {}


@pytest.mark.slow
@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_generation_matches_single_device(generated, mesh):
    want, got = _results(generated, "single"), _results(generated, str(mesh))
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    np.testing.assert_array_equal(got["lengths"], want["lengths"])
    np.testing.assert_allclose(got["logprobs"], want["logprobs"], atol=1e-4)


@pytest.mark.slow
def test_orbax_checkpoint_of_sharded_state_restores_on_same_and_other_mesh(tmp_path):
    """Saved from (2, 2, 2) shards; restored bit-exact onto (2, 2, 2) and resharded onto (1, 8, 1); a state
    holding NaN is refused and leaves the last good checkpoint the latest."""
    out = str(tmp_path / "ckpt.json")
    run_worker("checkpoint", out)
    with open(out) as f:
        res = json.load(f)
    for mesh in ("(2, 2, 2)", "(1, 8, 1)"):
        assert res[mesh]["equal"] and res[mesh]["keys"] > 10, res[mesh]
        assert res[mesh]["same_layout"] and res[mesh]["meta"] == {"step": 3}
    assert "NaN" in res["nan_error"] and res["latest"] == 3


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_trainer_refuses_batches_and_meshes_that_do_not_fit_before_building_the_model(tmp_path):
    """On 8 devices (data=-1): a rollout batch of 12 and mini/micro-batches of 12/4 do not split 8 ways, a mesh
    of 3 devices or with two -1 axes does not fit; each is one ValueError naming the keys and the fix, raised
    before the model is loaded (a batch was placed only after a whole rollout)."""
    out = str(tmp_path / "errors.json")
    run_worker("config_errors", out, timeout=300)
    with open(out) as f:
        err = json.load(f)
    assert err["rollout batch"].startswith("ValueError") and "env.groups x env.group_size = 12" in err["rollout batch"]
    assert "multiple of 8" in err["rollout batch"] and "trainer." not in err["rollout batch"]
    assert "trainer.mini_batch_size = 12, trainer.micro_batch_size = 4" in err["mini and micro"]
    assert "env.groups" not in err["mini and micro"] and "mesh.data" in err["mini and micro"]
    assert err["device count"].startswith("ValueError") and "needs 3 devices but 8" in err["device count"]
    assert err["two free axes"].startswith("ValueError") and "At most one mesh axis may be -1" in err["two free axes"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_validation_batch_that_does_not_split_over_the_devices_is_padded_with_whole_groups(tmp_path):
    """On 8 devices (data=-1) a validation batch of 12 or 6 rows was replicated: every device decoded every row and
    held the whole KV cache. It now plays the next multiple of 8 and of val.group_size (the extra episodes are not
    counted); a batch that splits is unchanged."""
    out = str(tmp_path / "val.json")
    run_worker("validation_rows", out, timeout=300)
    with open(out) as f:
        rows = json.load(f)
    assert rows == {"3x4 in 12": 16, "6x1 in 6": 8, "4x4 in 16": 16, "6x2 in 4": 8}
