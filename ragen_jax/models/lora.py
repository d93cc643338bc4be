"""LoRA adapters for the decoder's Linear layers: only `nnx.LoRAParam` variables train; merge for export."""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from ragen_jax.models.linear import rows_matmul

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


#: PEFT's shorthand (RAGEN's default `lora.target_modules: all-linear`): every Linear but the output layer, which
#: in a decoder layer are these projections.
ALL_LINEAR = "all-linear"


def parse_target_modules(text: str) -> tuple[str, ...]:
    """The config's `model.lora.target_modules` as names: comma-separated ("q_proj, v_proj"), as a YAML list
    ("[q_proj, v_proj]"), or PEFT's "all-linear" (every projection of a decoder layer)."""
    names = tuple(t.strip().strip("'\"").strip() for t in text.strip().strip("[]").split(","))
    names = tuple(t for t in names if t)
    if len(names) == 1 and names[0].lower() == ALL_LINEAR:
        return DEFAULT_TARGETS
    return names

#: Filter selecting the trainable LoRA variables: `nnx.split(model, lora_filter, ...)`,
#: `nnx.Optimizer(model, tx, wrt=lora_filter)`.
lora_filter = nnx.LoRAParam


def trainable_filter(lora: bool, head: str | None = None):
    """What trains: every parameter without LoRA; with it the adapters, plus the parameters under `head`
    (a ValueModel's fresh `score` head: PEFT's modules_to_save for veRL's LoRA critic)."""
    if not lora:
        return nnx.Param
    return nnx.Any(nnx.LoRAParam, nnx.All(nnx.Param, nnx.PathContains(head))) if head else nnx.LoRAParam


class LoRALinear(nnx.Module):
    """y = x W + b + (alpha / rank) * (x A) B, sharing W and b with the wrapped nnx.Linear.

    W keeps its name (`kernel`), so checkpoint paths are unchanged; A [in, r], B [r, out] are LoRAParams.
    """

    def __init__(self, base: nnx.Linear, rank: int, alpha: float, *, rngs: nnx.Rngs):
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}.")
        d_in, d_out = base.in_features, base.out_features
        self.in_features, self.out_features = d_in, d_out
        self.kernel = base.kernel
        self.bias = base.bias
        self.dtype = base.dtype
        bound = 1.0 / math.sqrt(d_in)
        self.lora_a = nnx.LoRAParam(jax.random.uniform(rngs.params(), (d_in, rank), jnp.float32, -bound, bound))
        self.lora_b = nnx.LoRAParam(jnp.zeros((rank, d_out), jnp.float32))
        self.scale = float(alpha) / rank

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or x.dtype
        x = x.astype(dtype)
        y = rows_matmul(x, self.kernel[...].astype(dtype))
        if self.bias is not None and self.bias[...] is not None:
            y = y + self.bias[...].astype(dtype)
        delta = rows_matmul(rows_matmul(x, self.lora_a[...].astype(dtype)), self.lora_b[...].astype(dtype))
        return y + (self.scale * delta).astype(dtype)

    def merged_kernel(self) -> jax.Array:
        """W + scale * A B [in, out] in W's dtype."""
        w = self.kernel[...]
        delta = self.scale * (self.lora_a[...] @ self.lora_b[...])
        return (w.astype(jnp.float32) + delta).astype(w.dtype)


def _decoders(model: nnx.Module):
    decoder = getattr(model, "model", None)
    if decoder is None or not hasattr(decoder, "layers"):
        raise TypeError(f"apply_lora expects a CausalLM or ValueModel, got {type(model).__name__}.")
    return decoder.layers


def apply_lora(
    model: nnx.Module,
    rank: int,
    alpha: float,
    target_modules: Sequence[str] = DEFAULT_TARGETS,
    *,
    rngs: nnx.Rngs,
) -> nnx.Module:
    """Wraps the named Linear layers of every decoder layer with LoRA (in place; returns the model).

    B starts at zero, so the model's outputs are unchanged until the adapters are trained.
    """
    unknown = set(target_modules) - set(DEFAULT_TARGETS)
    if unknown:
        raise ValueError(f"Unknown LoRA target modules {sorted(unknown)}; choose from {DEFAULT_TARGETS}.")
    for layer in _decoders(model):
        for block in (layer.self_attn, layer.mlp):
            for name in target_modules:
                base = getattr(block, name, None)
                if isinstance(base, nnx.Linear):
                    setattr(block, name, LoRALinear(base, rank, alpha, rngs=rngs))
    return model


def has_lora(model: nnx.Module) -> bool:
    """Whether any LoRALinear is present."""
    return any(isinstance(m, LoRALinear) for _, m in nnx.iter_graph(model))


def merge_lora(model: nnx.Module) -> nnx.Module:
    """A new model of the same class with every adapter folded into its base weight (for export)."""
    merged = {}
    for path, node in nnx.iter_graph(model):
        if isinstance(node, LoRALinear):
            merged[tuple(path) + ("kernel",)] = node.merged_kernel()
    plain = nnx.eval_shape(lambda: type(model)(model.config, rngs=nnx.Rngs(0)))
    graphdef, abstract = nnx.split(plain)
    source = dict(nnx.to_flat_state(nnx.state(model)))
    flat = []
    for path, var in nnx.to_flat_state(abstract):
        value = merged[path] if path in merged else source[path].get_value()
        flat.append((path, var.replace(value)))
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


merged_copy = merge_lora
