"""Partition rules: regexes on NNX parameter paths -> PartitionSpecs over the (data, fsdp, tensor) mesh.

A path is the parameter's keys joined by "/" (`model/layers/3/self_attn/q_proj/kernel`); optimizer
states reuse them because optax nests the parameter tree (`.../mu/model/layers/3/...`), so one rule
set places params, grads and Adam moments alike. Rules are searched in order; the first match wins.
Megatron-style tensor parallelism (column-parallel q/k/v/gate/up, row-parallel o/down, vocab-parallel
embedding and head) with every matrix's other axis split over fsdp (ZeRO-3 style).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ragen_jax.sharding.mesh import BATCH_AXES

log = logging.getLogger(__name__)

Rules = Sequence[tuple[str, P]]

_COL = r"(q_proj|k_proj|v_proj|gate_proj|up_proj)"
_ROW = r"(o_proj|down_proj)"

#: Rules for every parameter of CausalLM / ValueModel (qwen2, qwen3, llama), with or without LoRA.
DEFAULT_RULES: tuple[tuple[str, P], ...] = (
    (r"embed_tokens/embedding$", P("tensor", "fsdp")),  # [V, D]
    (r"lm_head/kernel$", P("fsdp", "tensor")),  # [D, V]
    (_COL + r"/kernel$", P("fsdp", "tensor")),  # [D, out]
    (_COL + r"/bias$", P("tensor")),  # [out]
    (_ROW + r"/kernel$", P("tensor", "fsdp")),  # [in, D]
    (_ROW + r"/bias$", P()),  # [D] (o_proj of a Llama/Qwen3 with attention_bias)
    (_COL + r"/lora_a$", P("fsdp", None)),  # [D, r]
    (_COL + r"/lora_b$", P(None, ("tensor", "fsdp"))),  # [r, out]
    (_ROW + r"/lora_a$", P(("tensor", "fsdp"), None)),  # [in, r]
    (_ROW + r"/lora_b$", P(None, "fsdp")),  # [r, D]
    (r"(norm|layernorm)/weight$", P()),  # RMSNorm scales (layer, final, Qwen3 q/k norms)
    (r"score/kernel$", P()),  # value head [D, 1]: D floats; split over fsdp it moved in every micro-batch
    (r"score/bias$", P()),  # [1]
    # Qwen2.5-VL's vision tower (`visual/...`; its MLPs' gate/up/down match the rules above): attention and merger
    # weights split over fsdp and kept whole over tensor (its heads are few and its sequences short)
    (r"visual/.*attn/qkv/kernel$", P("fsdp", None)),  # [D, 3D]
    (r"visual/.*attn/proj/kernel$", P(None, "fsdp")),  # [D, D]
    (r"visual/merger/mlp/0/kernel$", P("fsdp", None)),  # [4D, 4D]
    (r"visual/merger/mlp/2/kernel$", P(None, "fsdp")),  # [4D, out]
    (r"visual/.*(attn/qkv|attn/proj|merger/mlp/\d+)/bias$", P()),
    (r"visual/patch_embed/proj/weight$", P("fsdp")),  # [D, C, T, P, P]
    (r"visual/.*(norm1|norm2|ln_q)/weight$", P()),
)


def path_str(path: Sequence[Any]) -> str:
    """A pytree key path as 'a/b/0/c' (NNX's trailing `.value` dropped)."""
    parts = []
    for k in path:
        name = getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))
        parts.append(str(name))
    if parts and parts[-1] in ("value", "raw_value"):
        parts.pop()
    return "/".join(parts)


def _axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def fit_spec(spec: P, shape: Sequence[int], mesh: Mesh) -> P:
    """spec with each dimension's axes trimmed (from the right) until their product divides that dimension.

    E.g. a vocab of 1119 cannot split over tensor=2, so that dimension stays replicated.
    """
    if len(spec) > len(shape):
        raise ValueError(f"PartitionSpec {spec} has more entries than the array's rank {len(shape)} (shape {shape}).")
    out = []
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        axes = list(_axes(entry))
        missing = [a for a in axes if a not in mesh.shape]
        if missing:
            raise ValueError(f"PartitionSpec {spec} names axes {missing} that the mesh {dict(mesh.shape)} lacks.")
        while axes and dim % math.prod(mesh.shape[a] for a in axes):
            axes.pop()
        out.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    while out and out[-1] is None:
        out.pop()
    return P(*out)


def _rule_specs(path: str, shape: Sequence[int], mesh: Mesh, rules: Rules) -> tuple[P, P] | None:
    """(the spec the first matching rule asks for on this mesh, the one the array's dims allow), None without a
    match. 0 divides by anything, so the first is the rule's spec untrimmed."""
    for pattern, spec in rules:
        if re.search(pattern, path):
            return fit_spec(spec, [0] * len(shape), mesh), fit_spec(spec, shape, mesh)
    return None


def undivided_arrays(state: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> list[str]:
    """"path shape: wanted -> used" for each array of `state` that the rules would split further than its dims
    divide by the mesh (it stays whole along that dimension: those devices hold copies of it)."""
    found = []

    def visit(key_path, x):
        path, shape = path_str(key_path), np.shape(x)
        specs = _rule_specs(path, shape, mesh, rules) if shape else None
        if specs and specs[0] != specs[1]:
            found.append(f"{path} {tuple(shape)}: {specs[0]} -> {specs[1]}")

    jax.tree_util.tree_map_with_path(visit, state)
    return found


def spec_for(path: str, shape: Sequence[int], mesh: Mesh, rules: Rules = DEFAULT_RULES, strict: bool = True) -> P:
    """The PartitionSpec of the array at `path` with `shape` (scalars are replicated)."""
    if len(shape) == 0:
        return P()
    specs = _rule_specs(path, shape, mesh, rules)
    if specs is not None:
        if specs[0] != specs[1]:
            log.debug("sharding: %s %s does not divide as %s; using %s", path, tuple(shape), *specs)
        return specs[1]
    if strict:
        raise ValueError(
            f"No partition rule matches parameter {path!r} (shape {tuple(shape)}). Add a (regex, PartitionSpec) "
            "entry to the rules (ragen_jax.sharding.rules.DEFAULT_RULES), e.g. (r'my_param$', P()) to replicate it."
        )
    return P()


def state_specs(state: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES, strict: bool = True) -> Any:
    """A pytree like `state` (params, optimizer state, ...) of PartitionSpecs."""
    return jax.tree_util.tree_map_with_path(
        lambda p, x: spec_for(path_str(p), np.shape(x), mesh, rules, strict), state)


def state_shardings(state: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES, strict: bool = True) -> Any:
    """A pytree like `state` of NamedShardings (leaves may be arrays or jax.ShapeDtypeStruct)."""
    return jax.tree.map(lambda s: NamedSharding(mesh, s), state_specs(state, mesh, rules, strict),
                        is_leaf=lambda x: isinstance(x, P))


def put(x: Any, sharding: NamedSharding) -> jax.Array:
    """device_put that also works across hosts: a global array is resharded where it lives; a host-local
    value (equal on every process) becomes a global array."""
    if sharding.is_fully_addressable or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return jax.device_put(x, sharding)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_state(state: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES, strict: bool = True) -> Any:
    """`state` with every array placed by the rules (a NamedSharding each); same pytree structure."""
    return jax.tree.map(put, state, state_shardings(state, mesh, rules, strict))


def without_axis(rules: Rules, axis: str) -> tuple[tuple[str, P], ...]:
    """The same rules with `axis` removed from every spec (e.g. no fsdp for decoding)."""
    def drop(spec: P) -> P:
        entries = []
        for entry in spec:
            kept = tuple(a for a in _axes(entry) if a != axis)
            entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
        return P(*entries)
    return tuple((pattern, drop(spec)) for pattern, spec in rules)


def batch_spec(rank: int) -> P:
    """Rows over (data, fsdp), every other dimension replicated."""
    return P(BATCH_AXES, *([None] * (rank - 1))) if rank else P()


def cache_spec() -> P:
    """A layer of the KV cache (keys [B, kv_heads, head_dim, S], values [B, kv_heads, S, head_dim]): rows over
    (data, fsdp), kv heads over tensor."""
    return P(BATCH_AXES, "tensor", None, None)


def shard_cache(cache: Any, mesh: Mesh) -> Any:
    """A KVCache placed with `cache_spec` (dimensions that do not divide stay replicated)."""
    return jax.tree.map(lambda x: put(x, NamedSharding(mesh, fit_spec(cache_spec(), x.shape, mesh))), cache)
