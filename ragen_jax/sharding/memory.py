"""Memory planner: per-device bytes of a training run before anything is compiled, and a refusal with
the knob to turn when it will not fit.

Params, grads and optimizer states are exact: the model is built abstractly (`nnx.eval_shape`) and
every array's per-device shard comes from the partition rules on the mesh. Activations are a count of
the tensors alive at the backward peak per token and layer (MLP intermediates, hidden-sized tensors,
attention's queries, keys, values and output), calibrated against XLA's buffer assignment on CPU
(docs/scaling.md). Attention is blockwise (ragen_jax.models.attention): O(T) per row plus one score block,
never the [T, S] scores (docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AbstractMesh

from ragen_jax.errors import RagenError
from ragen_jax.algos.logprobs import REMAT_LOGITS_BYTES
from ragen_jax.shapes import even_chunk, round_up
from ragen_jax.models import CausalLM, ModelConfig, ValueModel, apply_lora
from ragen_jax.models import target
from ragen_jax.models.attention import BLOCK_K, BLOCK_Q
from ragen_jax.models.lora import DEFAULT_TARGETS, trainable_filter
from ragen_jax.models.transformer import projection_params
from ragen_jax.models.vision import Qwen25VLModel, VisionConfig, VLConfig
from ragen_jax.sharding.mesh import AXES, BATCH_AXES
from ragen_jax.sharding.placement import sampling_rules
from ragen_jax.sharding.rules import DEFAULT_RULES, Rules, spec_for, state_specs

GiB = 1024**3
# Tensors alive per token and layer at the backward peak without remat (fitted to XLA:CPU's compiled bytes of
# the tiny and an 8-layer 512-wide model at 512-2048 tokens, layer counts 2/4 and 4/8 to separate the terms):
_MLP_COPIES = 8  # [I] gate, up, silu, product and their gradients
_HIDDEN_COPIES = 2  # [D] residual stream and norm output
_ATTENTION_COPIES = 1.2  # [(H + 2K) * hd] rotated q, k, v and the output, in the blocked layout (partly aliased)
_OUTSIDE_COPIES = 10  # [D] f32 per token outside the layers: embeddings, final norm, hidden and their gradients
_BLOCK_COPIES = 2  # [H, BLOCK_Q, BLOCK_K] f32 score blocks alive at once (one layer at a time)
_LOGIT_COPIES = 4  # [chunk, V] f32 logits, softmax, and gradients per log-prob chunk (chunks rematerialised)
_KEPT_LOGIT_COPIES = 3.5  # [T, V] f32 logits kept for the backward pass when small (algos.logprobs)
# XLA:GPU keeps fewer copies (its fusions write gate * silu(up) and the norms in one pass; cuDNN's attention has no
# score blocks). Fitted to deviceless H100 compiles of the actor update (experiments/bench/gpu_aot.py) at Qwen2.5
# 0.5B/3B/7B widths, 2 and 4 layers, 8 x 3600-token bf16 micro-batches: the per-layer bytes of 3B and 7B within
# 0.3%, 0.5B's 9% under (docs/performance_gpu.md).
_GPU_HIDDEN_COPIES = 4  # [D] per layer: its input, both norms' outputs, the residual after attention
_GPU_MLP_COPIES = 3  # [I] gate, up and their product (down_proj's input)
# attention: q, k, v and the output ([(2 H + 2 K) hd]) for cuDNN's backward, and its f32 softmax statistics [H]
_GPU_GRAD_EXTRA = 1  # bytes per trained parameter beside the f32 accumulator and the micro-batch's own gradient
_GPU_LOGIT_COPIES = 1.5  # [rows, chunk, V] f32 logits when the chunks are rematerialised
_GPU_OUTSIDE_COPIES = 2  # [D] f32 per token outside the layers


class MemoryPlanError(RagenError, ValueError):
    """The configured run will not fit in device memory; the message names the knob to turn."""


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Per-device bytes by category; the training and sampling phases peak separately."""

    params: int  # every model's parameters in the training layout (policy, critic, reference)
    grads: int  # gradient accumulators of the trainable parameters
    optimizer: int  # optimizer states
    activations: int  # one micro-batch's forward/backward working set
    batch: int  # the mini-batch's token arrays
    sampling_params: int  # the policy's arrays the sampling layout places otherwise than training (a copy)
    kv_cache: int
    sampling_activations: int  # prefill working set and decode logits
    mesh_shape: tuple[int, int, int]
    sampling_weights: int = 0  # the policy's parameters as the sampler holds them (the sampling layout)

    @property
    def training_peak(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations + self.batch

    @property
    def sampling_peak(self) -> int:
        return self.params + self.optimizer + self.sampling_params + self.kv_cache + self.sampling_activations

    @property
    def sampling_program(self) -> int:
        """What the sampler's begin and decode programs hold: its weights, the KV cache and their working set."""
        return self.sampling_weights + self.kv_cache + self.sampling_activations

    @property
    def peak(self) -> int:
        return max(self.training_peak, self.sampling_peak)

    def breakdown(self) -> dict[str, int]:
        fields = ("params", "grads", "optimizer", "activations", "batch", "sampling_params", "kv_cache",
                  "sampling_activations")
        return {f: getattr(self, f) for f in fields} | {"training_peak": self.training_peak,
                                                           "sampling_peak": self.sampling_peak}

    def table(self) -> str:
        return "\n".join(f"  {k:<21}{v / GiB:9.3f} GiB" for k, v in self.breakdown().items())


def _abstract_mesh(mesh_shape: Mapping[str, int] | Sequence[int]) -> AbstractMesh:
    sizes = [int(mesh_shape.get(a, 1)) for a in AXES] if isinstance(mesh_shape, Mapping) else list(mesh_shape)
    if len(sizes) != 3 or min(sizes) < 1:
        raise ValueError(f"mesh_shape must give positive (data, fsdp, tensor) sizes, got {mesh_shape}.")
    return AbstractMesh(tuple(sizes), AXES)


def _leaf_specs(state: Any, mesh: AbstractMesh, rules: Rules) -> list[jax.sharding.PartitionSpec]:
    """The PartitionSpec of every leaf of `state`, in `jax.tree.leaves` order."""
    return jax.tree.leaves(state_specs(state, mesh, rules), is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))


def _split_axes(spec: jax.sharding.PartitionSpec, mesh: AbstractMesh) -> tuple[tuple[str, ...], ...]:
    """Per dimension, the axes of `spec` that really split it (size > 1): specs equal here lay arrays out alike."""
    entries = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec]
    out = [tuple(a for a in axes if mesh.shape[a] > 1) for axes in entries]
    while out and not out[-1]:
        out.pop()
    return tuple(out)


def _leaf_shard_bytes(leaf: Any, spec: jax.sharding.PartitionSpec, mesh: AbstractMesh, dtype: Any | None) -> int:
    """Bytes of one device's shard of `leaf` laid out by `spec`."""
    shape = list(leaf.shape)
    for i, entry in enumerate(spec):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
        shape[i] //= math.prod(mesh.shape[a] for a in axes)
    return math.prod(shape) * jnp.dtype(dtype or leaf.dtype).itemsize


def _shard_bytes(state: Any, mesh: AbstractMesh, rules: Rules, dtype: Any | None = None) -> int:
    """Bytes of one device's shards of every array of an abstract state."""
    return sum(_leaf_shard_bytes(leaf, spec, mesh, dtype)
               for leaf, spec in zip(jax.tree.leaves(state), _leaf_specs(state, mesh, rules)))


def _resharded_bytes(state: Any, mesh: AbstractMesh, rules: Rules, target: Rules) -> int:
    """Bytes of one device's new shards when `state`, laid out by `rules`, is placed by `target`: only the arrays
    whose spec changes are copied (device_put returns an array already laid out as asked), e.g. none when the
    mesh has no fsdp and `target` is the no_fsdp sampling layout."""
    leaves = jax.tree.leaves(state)
    return sum(_leaf_shard_bytes(leaf, new, mesh, None)
               for leaf, old, new in zip(leaves, _leaf_specs(state, mesh, rules), _leaf_specs(state, mesh, target))
               if _split_axes(old, mesh) != _split_axes(new, mesh))


@functools.lru_cache(maxsize=16)
def _abstract_model(cls: type, config: ModelConfig | VLConfig, lora_rank: int, lora_targets: tuple[str, ...]):
    """A `cls` model built abstractly (`nnx.eval_shape`), with LoRA adapters where lora_rank > 0."""
    def build():
        model = cls(config, rngs=nnx.Rngs(0))
        if lora_rank > 0:
            apply_lora(model, lora_rank, 2.0 * lora_rank, lora_targets, rngs=nnx.Rngs(1))
        return model
    return nnx.eval_shape(build)


def abstract_split(cls: type, config: ModelConfig | VLConfig, lora_rank: int = 0,
                   lora_targets: tuple[str, ...] = DEFAULT_TARGETS, head: str | None = None,
                   frozen_part: str | None = None):
    """(graphdef, trainable, frozen) of a `cls` model built abstractly (no memory), split as the trainer splits it
    (`trainable_filter`), the parameters under `frozen_part` (a path element, e.g. "visual") frozen too; the
    states' leaves are jax.ShapeDtypeStruct."""
    trains = trainable_filter(lora_rank > 0, head)
    if frozen_part is not None:
        trains = nnx.All(trains, nnx.Not(nnx.PathContains(frozen_part)))
    return nnx.split(_abstract_model(cls, config, lora_rank, tuple(lora_targets)), trains, ...)


def _per_device_rows(rows: int, mesh: AbstractMesh, what: str) -> int:
    shards = math.prod(mesh.shape[a] for a in BATCH_AXES)
    if rows % shards:
        raise MemoryPlanError(f"{what} of {rows} rows does not split over data*fsdp = {shards} devices; "
                              f"make it a multiple of {shards} or change the mesh.")
    return rows // shards


def _split(n: int, tensor: int) -> float:
    """Per-device share of a dimension of size n sharded over `tensor` devices where it divides."""
    return n / tensor if n % tensor == 0 else n


def _layer_activation_elems(c: ModelConfig, tensor: int, platform: str = "cpu") -> float:
    """Compute-dtype elements alive per token and layer at the backward peak, no remat, on `platform`'s XLA."""
    heads, kv_heads = _split(c.num_heads, tensor), _split(c.num_kv_heads, tensor)
    if platform == "gpu":
        return (_GPU_MLP_COPIES * _split(c.intermediate_size, tensor) + _GPU_HIDDEN_COPIES * c.hidden_size
                + (2 * heads + 2 * kv_heads) * c.head_dim + 4 / c.jnp_dtype.itemsize * heads)
    attention = (heads + 2 * kv_heads) * c.head_dim
    return _MLP_COPIES * _split(c.intermediate_size, tensor) + _HIDDEN_COPIES * c.hidden_size + (
        _ATTENTION_COPIES * attention)


def _attention_block_bytes(c: ModelConfig, rows: int, seq_len: int, tensor: int) -> int:
    """Blockwise attention's working set: a few float32 score blocks of one layer, independent of T beyond a block."""
    block = min(BLOCK_Q, seq_len) * min(BLOCK_K, seq_len)
    return int(_BLOCK_COPIES * rows * _split(c.num_heads, tensor) * block * 4)


def _logit_bytes(c: ModelConfig, rows: int, global_rows: int, seq_len: int, tensor: int, chunk: int,
                 platform: str = "cpu") -> int:
    """The log-prob chunks' float32 logits: every chunk's kept for the backward pass while the whole [B, T, V]
    (global shapes, as `token_logprobs_and_entropy` decides) stays below REMAT_LOGITS_BYTES, else one chunk's."""
    targets = seq_len - 1
    chunk = even_chunk(targets, chunk) if targets > 0 else 1
    padded = round_up(targets, chunk)
    vocab = _split(c.vocab_size, tensor)
    if global_rows * padded * c.vocab_size * 4 <= REMAT_LOGITS_BYTES:
        return int(_KEPT_LOGIT_COPIES * rows * padded * vocab * 4)
    return int((_GPU_LOGIT_COPIES if platform == "gpu" else _LOGIT_COPIES) * rows * chunk * vocab * 4)


def _activation_bytes(c: ModelConfig, rows: int, global_rows: int, seq_len: int, tensor: int, remat: str,
                      chunk: int, platform: str = "cpu") -> int:
    """One micro-batch's training working set [rows per device (of global_rows) x seq_len] on `platform`."""
    dsize = c.jnp_dtype.itemsize
    per_layer = rows * seq_len * dsize * _layer_activation_elems(c, tensor, platform)
    if remat == "none":
        layers = per_layer * c.num_layers
    elif remat == "dots":  # matmul outputs are kept (q/k/v, gate/up, projections), elementwise recomputed
        kept = rows * seq_len * dsize * (2 * _split(c.intermediate_size, tensor) + 4 * c.hidden_size)
        layers = kept * c.num_layers + per_layer
    else:  # full: only each layer's input is kept; one layer is recomputed at a time
        layers = rows * seq_len * dsize * c.hidden_size * c.num_layers + per_layer
    logits = _logit_bytes(c, rows, global_rows, seq_len, tensor, chunk, platform)
    if platform == "gpu":  # cuDNN attention holds no score blocks
        return int(layers + logits + _GPU_OUTSIDE_COPIES * rows * seq_len * c.hidden_size * 4)
    outside = _OUTSIDE_COPIES * rows * seq_len * c.hidden_size * 4
    return int(layers + logits + outside + _attention_block_bytes(c, rows, seq_len, tensor))


def _vision_activation_bytes(v: VisionConfig, images: int, patches: int, dsize: int, tensor: int,
                             trained: bool) -> int:
    """The vision tower's working set for `images` images of `patches` patches each: trained, every block's
    tensors kept for the backward pass (as the decoder's per-layer count, and each block's float32 [heads, P, P]
    scores and probabilities: its attention is dense within an image); frozen, one block at a time. The decoder's
    per-layer counts, not fitted to the tower's own compiled bytes."""
    per_patch = (_MLP_COPIES * _split(v.intermediate_size, tensor) + _HIDDEN_COPIES * v.hidden_size
                 + _ATTENTION_COPIES * 3 * v.hidden_size) * dsize + 2 * v.num_heads * patches * 4
    return int(images * patches * per_patch * (v.depth if trained else 1))


def _gpu_mesh_extra(c: ModelConfig, rows: int, seq_len: int, mesh: AbstractMesh, params: int, trained: bool) -> int:
    """What XLA:GPU adds on a mesh with fsdp or tensor > 1 (fitted to deviceless 8-GPU compiles of the 0.5B update,
    fsdp 4 x tensor 2, 2 and 4 layers): the layers' activations stay whole along tensor, each layer's weights are
    gathered over fsdp and kept for the backward (its tensor share, compute dtype) with their gradient formed whole
    before the reduce-scatter (float32), and the embedding (and an untied head) is gathered once. params: every
    parameter of the model (global)."""
    tensor, dsize = mesh.shape["tensor"], c.jnp_dtype.itemsize
    whole = _layer_activation_elems(c, 1, "gpu") - _layer_activation_elems(c, tensor, "gpu")
    embedding = c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    layer_params = (params - embedding - c.hidden_size) / c.num_layers
    per_layer = rows * seq_len * dsize * whole + layer_params / tensor * (dsize + (4 if trained else 0))
    return int(c.num_layers * per_layer + embedding / tensor * dsize)

def _numel(state: Any, mesh: AbstractMesh, rules: Rules) -> int:
    """Elements of one device's shards of every array of an abstract state."""
    return _shard_bytes(state, mesh, rules, jnp.int8)

def estimate_memory(
    model_config: ModelConfig | VLConfig,
    *,
    micro_batch_size: int,
    seq_len: int,
    mini_batch_size: int | None = None,
    rollout_batch_size: int | None = None,
    cache_len: int | None = None,
    prefill_len: int = 512,
    mesh_shape: Mapping[str, int] | Sequence[int] = (1, 1, 1),
    param_dtype: str | None = None,
    compute_dtype: str | None = None,
    remat: str | None = None,
    lora_rank: int = 0,
    lora_targets: Sequence[str] = DEFAULT_TARGETS,
    optimizer_states: int = 2,
    optimizer_dtype: str | None = "float32",
    logprob_chunk: int = 256,
    sampling_layout: str = "no_fsdp",
    with_critic: bool = False,
    with_reference: bool = False,
    decode_weights: bool = False,
    rules: Rules = DEFAULT_RULES,
    images_per_row: int = 0,
    patches_per_image: int = 0,
    freeze_vision: bool = False,
    platform: str | None = None,
) -> MemoryPlan:
    """Per-device bytes of a PPO/GRPO run: training (micro-batch [micro_batch_size, seq_len]) and sampling
    (KV cache [rollout_batch_size, cache_len]). `optimizer_states` = arrays per parameter (AdamW: 2), in
    `optimizer_dtype` (None = the parameters' dtype), one more (a master copy) for parameters stored narrower;
    gradients accumulate in float32. `decode_weights`: the
    sampler keeps the projections laid out [out, in] for decoding (`Sampler(out_first_weights=...)`, by default
    on a CPU for large models), one more copy of them in the compute dtype while sampling. `platform` ("cpu" or
    "gpu"; default: the backend's, `target.backend`): whose compiler's working set the activations follow.

    A VLConfig (Qwen2.5-VL) adds its vision tower: parameters (trained unless `freeze_vision`), each row's
    `images_per_row` images of `patches_per_image` patches (their pixels in the batch, the tower's activations in
    the update, one image's in the prefill); seq_len and cache_len count the image tokens. The critic is counted
    as the language model's."""
    vl = model_config if isinstance(model_config, VLConfig) else None
    c = (vl.text if vl else model_config).replace(**{k: v for k, v in dict(
        param_dtype=param_dtype, dtype=compute_dtype, remat=remat).items() if v})
    mesh = _abstract_mesh(mesh_shape)
    tensor = mesh.shape["tensor"]
    if vl is None:
        _, trainable, frozen = abstract_split(CausalLM, c.replace(remat="none"), lora_rank, tuple(lora_targets))
    else:
        _, trainable, frozen = abstract_split(Qwen25VLModel, vl.replace(text=c.replace(remat="none")), lora_rank,
                                              tuple(lora_targets), frozen_part="visual" if freeze_vision else None)
    params = _shard_bytes(trainable, mesh, rules) + _shard_bytes(frozen, mesh, rules)
    # parameters narrower than the optimizer dtype keep a master copy in it (trainer/optim.py MasterWeights)
    optimizer_states += int(bool(optimizer_dtype) and jnp.dtype(optimizer_dtype).itemsize
                            > jnp.dtype(c.param_dtype).itemsize)
    opt = optimizer_states * _shard_bytes(trainable, mesh, rules, optimizer_dtype)
    platform = platform or target.backend()
    grads = _shard_bytes(trainable, mesh, rules, "float32")  # accumulated in float32 (trainer/steps.py)
    if platform == "gpu":  # the micro-batch's own gradient in the parameters' dtype, and the optimizer's temporaries
        grads += (jnp.dtype(c.param_dtype).itemsize + _GPU_GRAD_EXTRA) * _numel(trainable, mesh, rules)
    if with_critic:
        _, c_train, c_frozen = abstract_split(ValueModel, c.replace(remat="none"), lora_rank, tuple(lora_targets),
                                            head=ValueModel.HEAD)  # a LoRA critic under LoRA, as the trainer
        critic = _shard_bytes(c_train, mesh, rules) + _shard_bytes(c_frozen, mesh, rules)
        c_grads = _shard_bytes(c_train, mesh, rules, "float32")
        params, grads, opt = params + critic, max(grads, c_grads), opt + optimizer_states * _shard_bytes(
            c_train, mesh, rules, optimizer_dtype)
    if with_reference:
        params += _shard_bytes(trainable, mesh, rules) + _shard_bytes(frozen, mesh, rules)
    rows = _per_device_rows(micro_batch_size, mesh, "trainer.micro_batch_size")
    mini_rows = _per_device_rows(mini_batch_size or micro_batch_size, mesh, "trainer.mini_batch_size")
    activations = _activation_bytes(c, rows, micro_batch_size, seq_len, tensor, c.remat, logprob_chunk, platform)
    if platform == "gpu" and mesh.shape["fsdp"] * mesh.shape["tensor"] > 1:
        abstract = _abstract_mesh((1, 1, 1))
        activations += _gpu_mesh_extra(c, rows, seq_len, mesh, _numel(nnx.merge_state(trainable, frozen), abstract,
                                                                        rules), trained=lora_rank == 0)
    if platform == "gpu" and not c.tie_word_embeddings and lora_rank == 0:  # the embedding's f32 gradient, scattered
        activations += _leaf_shard_bytes(jax.ShapeDtypeStruct((c.vocab_size, c.hidden_size), jnp.float32),
                                         spec_for("embed_tokens/embedding", (c.vocab_size, c.hidden_size), mesh, rules),
                                         mesh, None)  # apart from the head's
    batch = mini_rows * seq_len * 4 * 8  # tokens, masks, log-probs, advantages, returns, values (4 bytes each)
    images = vl is not None and images_per_row * patches_per_image > 0
    if images:  # the rows' pixels, and the tower's working set (one block's when frozen)
        batch += mini_rows * images_per_row * patches_per_image * vl.vision.patch_features * 4
        activations += _vision_activation_bytes(vl.vision, rows * images_per_row, patches_per_image,
                                                c.jnp_dtype.itemsize, tensor, trained=not freeze_vision)

    roll = _per_device_rows(rollout_batch_size or micro_batch_size, mesh, "the rollout batch (groups x group_size)")
    cache_len = cache_len or seq_len
    kv = c.num_kv_heads // tensor if c.num_kv_heads % tensor == 0 else c.num_kv_heads
    kv_cache = 2 * c.num_layers * roll * cache_len * kv * c.head_dim * c.jnp_dtype.itemsize
    s_rules = sampling_rules(rules, sampling_layout)
    full = nnx.merge_state(trainable, frozen)
    sampling_params = _resharded_bytes(full, mesh, rules, s_rules)
    sampling_weights = _shard_bytes(full, mesh, s_rules)
    if decode_weights:
        sampling_params += projection_params(c) * c.jnp_dtype.itemsize // tensor
    prefill_tokens = min(prefill_len, cache_len)
    prefill = roll * prefill_tokens * c.jnp_dtype.itemsize * _layer_activation_elems(c, tensor) / 2 + (
        _attention_block_bytes(c, roll, prefill_tokens, tensor))
    if images:  # the prefill encodes each row's new image, one block at a time
        prefill += _vision_activation_bytes(vl.vision, roll, patches_per_image, c.jnp_dtype.itemsize, tensor,
                                            trained=False)
    sampling_activations = int(prefill + 4 * roll * _split(c.vocab_size, tensor) * 4)
    return MemoryPlan(params=params, grads=grads, optimizer=opt, activations=activations, batch=batch,
                      sampling_params=sampling_params, kv_cache=kv_cache, sampling_activations=sampling_activations,
                      mesh_shape=tuple(mesh.shape[a] for a in AXES), sampling_weights=sampling_weights)
