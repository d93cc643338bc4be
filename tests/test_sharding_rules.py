"""Mesh shapes from config and partition rules for every parameter of every model family (one device)."""

import itertools

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from jax.sharding import AbstractMesh, PartitionSpec as P

from ragen_jax.models import CausalLM, ValueModel, apply_lora
from ragen_jax.models.tiny import tiny_config
from ragen_jax.sharding import AXES, constrain_rows, fit_spec, resolve_mesh_shape, spec_for, state_specs, without_axis
from ragen_jax.sharding.rules import path_str

MESH = AbstractMesh((2, 4, 2), AXES)


def test_resolve_mesh_shape():
    assert resolve_mesh_shape({"data": -1, "fsdp": 1, "tensor": 1}, 8) == (8, 1, 1)
    assert resolve_mesh_shape({"data": 2, "fsdp": -1, "tensor": 2}, 16) == (2, 4, 2)
    assert resolve_mesh_shape((1, 4, 2), 8) == (1, 4, 2)
    assert resolve_mesh_shape({"tensor": 2, "data": -1}, 8) == (4, 1, 2)
    with pytest.raises(ValueError, match="At most one"):
        resolve_mesh_shape({"data": -1, "fsdp": -1}, 8)
    with pytest.raises(ValueError, match="needs 4 devices but 8"):
        resolve_mesh_shape((1, 2, 2), 8)
    with pytest.raises(ValueError, match="not a multiple"):
        resolve_mesh_shape({"data": -1, "tensor": 3}, 8)
    with pytest.raises(ValueError, match="Unknown mesh axes"):
        resolve_mesh_shape({"model": 2}, 8)


def test_mesh_from_the_config_section():
    """`make_mesh(cfg.mesh)` as docs/scaling.md shows: the section's sampling_layout is a setting, not an axis."""
    from configs.base import get_base_config

    section = get_base_config().mesh
    section.update(data=2, fsdp=-1, tensor=2)
    assert "sampling_layout" in section and resolve_mesh_shape(section, 16) == (2, 4, 2)
    with pytest.raises(ValueError, match="Unknown mesh axes"):
        resolve_mesh_shape(dict(section, sampling="no_fsdp"), 16)


def _models():
    for arch, tied, lora in itertools.product(("qwen2", "qwen3", "llama"), (True, False), (False, True)):
        cfg = tiny_config(architecture=arch, tie_word_embeddings=tied, qk_norm=arch == "qwen3",
                          attention_bias=arch in ("qwen2", "llama"), vocab_size=1152)  # llama: o_proj bias too
        model = nnx.eval_shape(lambda: CausalLM(cfg, rngs=nnx.Rngs(0)))
        if lora:
            model = nnx.eval_shape(lambda: apply_lora(CausalLM(cfg, rngs=nnx.Rngs(0)), 4, 8.0, rngs=nnx.Rngs(1)))
        yield f"{arch}-tied{tied}-lora{lora}", model
    yield "value", nnx.eval_shape(lambda: ValueModel(tiny_config(vocab_size=1152), rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("name,model", list(_models()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_parameter_has_a_rule(name, model):
    specs = state_specs(nnx.state(model), MESH)  # strict: raises on an unmatched parameter
    flat = {path_str(p): s for p, s in jax.tree_util.tree_leaves_with_path(specs, is_leaf=lambda x: isinstance(x, P))}
    for path, spec in flat.items():
        if path.endswith("kernel") and "score" not in path:
            assert spec != P(), path  # every matrix is split
        if path.endswith("norm/weight"):
            assert spec == P(), path
    if "loraTrue" in name:
        assert flat["model/layers/0/self_attn/q_proj/lora_b"] == P(None, ("tensor", "fsdp"))
        assert flat["model/layers/1/mlp/down_proj/lora_a"] == P(("tensor", "fsdp"))


def test_optimizer_state_follows_param_rules():
    params = nnx.state(nnx.eval_shape(lambda: CausalLM(tiny_config(vocab_size=1152), rngs=nnx.Rngs(0))))
    opt = jax.eval_shape(optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)).init, params)
    flat = {path_str(p): s for p, s in jax.tree_util.tree_leaves_with_path(state_specs(opt, MESH),
                                                                          is_leaf=lambda x: isinstance(x, P))}
    assert flat["1/0/mu/model/layers/0/mlp/up_proj/kernel"] == P("fsdp", "tensor")
    assert flat["1/0/count"] == P()


def test_indivisible_dims_stay_replicated_and_unknown_params_are_named():
    assert fit_spec(P("tensor", "fsdp"), (1119, 128), MESH) == P(None, "fsdp")  # odd vocab
    assert fit_spec(P(("data", "fsdp")), (6, 3), MESH) == P("data")  # 6 rows: 2 ways, not 8
    assert spec_for("model/embed_tokens/embedding", (1152, 128), MESH) == P("tensor", "fsdp")
    with pytest.raises(ValueError, match="No partition rule matches parameter 'model/new_thing/w'"):
        spec_for("model/new_thing/w", (4, 4), MESH)
    assert spec_for("model/new_thing/w", (4, 4), MESH, strict=False) == P()
    assert dict(without_axis([("x", P("fsdp", ("tensor", "fsdp")))], "fsdp"))["x"] == P(None, "tensor")


def test_constraints_are_identity_without_a_mesh():
    x = jnp.ones((4, 3))
    assert constrain_rows(x) is x
    assert jax.jit(constrain_rows)(x).shape == (4, 3)


def test_arrays_the_mesh_cannot_split_as_the_rules_ask_are_named():
    """They stay whole along that dimension (correct, but those devices hold copies); before, only a debug log said
    so, and the trainer placed them without a word (place_for_training now warns with this list)."""
    from ragen_jax.sharding.rules import undivided_arrays

    state = {"model": {"embed_tokens": {"embedding": jnp.zeros((1119, 128))},  # odd vocab: not over tensor
                       "layers": {"0": {"mlp": {"up_proj": {"kernel": jnp.zeros((128, 512))}}}},
                       "norm": {"scale": jnp.zeros((128,))}}}
    assert undivided_arrays(state, MESH) == ["model/embed_tokens/embedding (1119, 128): "
                                             "P('tensor', 'fsdp') -> P(None, 'fsdp')"]
    assert undivided_arrays(state, AbstractMesh((8, 1, 1), AXES)) == []  # nothing asks to split over data
