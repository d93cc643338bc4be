"""The memory planner with Qwen2.5-VL's shapes: the vision tower's parameters, frozen or trained, and its images'
pixels and activations, on a sharded mesh (every vision parameter has a partition rule)."""

import dataclasses
import math

import jax
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models.vision import Qwen25VLModel, qwen2_5_vl_3b_config
from ragen_jax.sharding.memory import estimate_memory

KW = dict(micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1))


def _count(module) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(module)))


def _shallow_3b():
    """Qwen2.5-VL-3B's widths with 2 decoder layers and 2 vision blocks (quick to build abstractly)."""
    config = qwen2_5_vl_3b_config(num_layers=2)
    return config.replace(vision=dataclasses.replace(config.vision, depth=2, fullatt_block_indexes=(1,)))


@pytest.mark.slow
def test_the_3b_shapes_hold_qwen2_5_vl_3b_parameter_count_and_plan():
    """Qwen/Qwen2.5-VL-3B-Instruct's model card gives 3.75B parameters (tied embeddings), 0.67B of them the vision
    tower's; the plan for them on 8 fsdp devices holds those bf16 parameters once."""
    config = qwen2_5_vl_3b_config()
    model = nnx.eval_shape(lambda: Qwen25VLModel(config, rngs=nnx.Rngs(0)))
    assert abs(_count(model) / 1e9 - 3.75) < 0.01 and 0.6e9 < _count(model.visual) < 0.7e9
    plan = estimate_memory(config, images_per_row=4, patches_per_image=144, **KW)
    assert abs(plan.params - _count(model) * 2 / 8) < 0.01 * _count(model) * 2 / 8


def test_vision_tower_parameters_images_and_freezing_in_the_plan():
    config = _shallow_3b()
    vision_params = _count(nnx.eval_shape(lambda: Qwen25VLModel(config, rngs=nnx.Rngs(0))).visual)
    text = estimate_memory(config.text, **KW)
    vl = estimate_memory(config, **KW)
    # bf16 parameters sharded over 8 fsdp devices (a few small biases and norms stay whole), float32 gradients
    assert abs((vl.params - text.params) - vision_params * 2 / 8) < 0.02 * vision_params * 2 / 8
    assert abs((vl.grads - text.grads) - vision_params * 4 / 8) < 0.02 * vision_params * 4 / 8
    frozen = estimate_memory(config, freeze_vision=True, **KW)
    assert frozen.params == vl.params and frozen.grads == text.grads and frozen.optimizer == text.optimizer
    one = estimate_memory(config, images_per_row=1, patches_per_image=144, **KW)
    four = estimate_memory(config, images_per_row=4, patches_per_image=144, **KW)
    assert vl.activations < one.activations < four.activations and vl.batch < one.batch < four.batch
    assert abs((four.activations - vl.activations) - 4 * (one.activations - vl.activations)) < 1024
    assert estimate_memory(config, images_per_row=4, patches_per_image=144, freeze_vision=True,
                           **KW).activations < four.activations
    assert one.sampling_activations > vl.sampling_activations


def test_vision_activation_estimate_within_20_percent_of_compiled():
    """The tower's training working set against XLA's bytes for the gradient of 8 images of 12 x 12 patches (a
    6 x 6 board at 28-pixel tiles): arguments, outputs and temporaries, less the parameters and their gradients."""
    from ragen_jax.models.vision import VisionConfig, VisionTower, vision_inputs
    from ragen_jax.sharding.memory import _vision_activation_bytes
    from ragen_jax.sharding.planning import measured_bytes

    v = VisionConfig(depth=2, hidden_size=128, intermediate_size=352, num_heads=2, out_hidden_size=128,
                     fullatt_block_indexes=(1,))
    graphdef, state = nnx.split(nnx.eval_shape(lambda: VisionTower(v, rngs=nnx.Rngs(0))))
    inputs = jax.eval_shape(lambda: vision_inputs(np.zeros((8 * 144, v.patch_features), np.float32),
                                                  np.array([[1, 12, 12]] * 8), v))
    grad = jax.jit(jax.grad(lambda s, i: nnx.merge(graphdef, s)(i).sum()))
    params = sum(math.prod(x.shape) * 4 for x in jax.tree.leaves(state))
    measured = measured_bytes(grad.lower(state, inputs).compile()) - 2 * params
    estimate = _vision_activation_bytes(v, 8, 144, 4, 1, trained=True)
    assert abs(estimate - measured) / measured < 0.2, (estimate, measured)
