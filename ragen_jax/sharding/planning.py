"""A run's memory plan: built from its config (or only a model's shapes, before any weight is downloaded), judged
against this machine's devices and against an H100 80GB / H200 141GB, and the bytes a compiled program measures."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import jax

from ragen_jax.models import ModelConfig, target
from ragen_jax.models.lora import parse_target_modules
from ragen_jax.models.transformer import decode_weights_pay_off
from ragen_jax.sharding.memory import GiB, MemoryPlan, MemoryPlanError, estimate_memory
from ragen_jax.sharding.mesh import AXES, validation_batch_size


def _advice(plan: MemoryPlan) -> list[str]:
    """Knobs to turn, most effective first, from which category dominates."""
    data, fsdp, tensor = plan.mesh_shape
    tips = []
    state = plan.params + plan.grads + plan.optimizer
    if plan.training_peak >= plan.sampling_peak and plan.activations >= state:
        tips.append("lower trainer.micro_batch_size (activations scale with it)")
        tips.append("turn on rematerialisation: model.remat='dots' or 'full'")
        tips.append("shard activations further with mesh.tensor > 1")
    if state >= plan.activations or plan.sampling_peak > plan.training_peak:
        tips.append(f"shard parameters and optimizer state over more devices: raise mesh.fsdp (now {fsdp}) "
                    f"or mesh.tensor (now {tensor}) at the expense of mesh.data (now {data})")
        tips.append("use bfloat16: model.param_dtype='bfloat16', model.dtype='bfloat16'")
        tips.append("train LoRA adapters only: model.lora.rank > 0 (no full-size grads or optimizer state)")
    if plan.sampling_peak > plan.training_peak:
        tips.append("shrink the KV cache: fewer rollout episodes per device (env.groups x env.group_size or more "
                    "data-parallel devices) or a shorter rollout.max_model_len")
        if plan.sampling_params:
            tips.append("keep the training layout for sampling (sampling_layout='training') to avoid a second copy")
    return tips


def check_plan(plan: MemoryPlan, device_bytes: int | None, headroom: float = 0.9) -> MemoryPlan:
    """Returns the plan if its peak fits in `headroom` x device_bytes; else raises MemoryPlanError naming knobs."""
    if device_bytes is None:
        return plan
    budget = int(device_bytes * headroom)
    if plan.peak <= budget:
        return plan
    phase = "training" if plan.training_peak >= plan.sampling_peak else "sampling"
    tips = "\n".join(f"  - {t}" for t in _advice(plan))
    raise MemoryPlanError(
        f"The plan needs {plan.peak / GiB:.2f} GiB per device at its {phase} peak but only {budget / GiB:.2f} GiB "
        f"({headroom:.0%} of {device_bytes / GiB:.2f} GiB) is available on mesh (data, fsdp, tensor) = "
        f"{plan.mesh_shape}.\nPer-device estimate:\n{plan.table()}\nTo make it fit:\n{tips}")


# Device memory of the cards a run is sized for, as the driver reports it (XLA's H100 SXM and H200 target specs).
CARD_BYTES = {"H100 80GB": 84_942_979_072, "H200 141GB": 151_397_597_184}
DEFAULT_ALLOCATOR_FRACTION = 0.75  # jax's GPU allocator takes this share of the card (XLA_PYTHON_CLIENT_MEM_FRACTION)


def allocator_fraction() -> float:
    """The share of a GPU's memory jax's allocator may use (its `bytes_limit`): XLA_PYTHON_CLIENT_MEM_FRACTION, or
    jax's default 0.75."""
    return float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", DEFAULT_ALLOCATOR_FRACTION))


def card_verdicts(plan: MemoryPlan, fraction: float | None = None) -> list[str]:
    """Whether `plan` fits each card of CARD_BYTES as `check_plan` would judge it on that card (its budget: 90% of
    the allocator's share of the card), one line per card with the numbers."""
    fraction = allocator_fraction() if fraction is None else fraction
    lines = []
    for card, total in CARD_BYTES.items():
        budget = 0.9 * fraction * total
        share = f"90% of {fraction:.0%} of {total / GiB:.1f} GiB"
        try:
            check_plan(plan, int(fraction * total))
        except MemoryPlanError:
            lines.append(f"  {card}: REFUSED: needs {plan.peak / GiB:.2f} GiB per device, {budget / GiB:.2f} GiB "
                         f"usable ({share}; XLA_PYTHON_CLIENT_MEM_FRACTION raises the share)")
        else:
            lines.append(f"  {card}: fits: {plan.peak / GiB:.2f} GiB per device of {budget / GiB:.2f} GiB usable "
                         f"({share})")
    return lines


def plan_model_config(model_cfg) -> tuple[ModelConfig, str]:
    """The policy's ModelConfig for planning, and where it came from: its config.json (the weights may be absent:
    a folder holding config.json alone, or a hub id in the local cache), the tiny preset's, or, for a hub id not
    downloaded yet, its published shapes (`models.known`)."""
    from ragen_jax.models.known import known_config
    from ragen_jax.models.sources import model_config_for

    try:
        return model_config_for(model_cfg), ""
    except FileNotFoundError:
        dtypes = {k: model_cfg[k] for k in ("param_dtype", "dtype") if model_cfg[k]}
        known = known_config(model_cfg.path, **dtypes)
        if known is None:
            raise
        return known.replace(remat=model_cfg.remat), f" (shapes of {model_cfg.path}'s published config.json: its " \
                                                     "files are not here)"


def plan_report(cfg: Any, model_config: ModelConfig, mesh_shape: Mapping[str, int], source: str = "",
                device_bytes: int | None = None) -> str:
    """`--print_config`'s memory section: the per-device plan, whether it fits this device (`device_bytes`, where
    the backend reports it) and each card of CARD_BYTES."""
    plan = plan_from_config(cfg, model_config, mesh_shape)
    budget = f" of {device_bytes / GiB:.2f} GiB" if device_bytes else " (this backend reports no memory limit)"
    lines = [f"memory plan per device, mesh {dict(mesh_shape)}, peak {plan.peak / GiB:.3f} GiB{budget}{source}:",
             plan.table()]
    if device_bytes:
        try:
            check_plan(plan, device_bytes)
        except MemoryPlanError as e:
            lines.append(f"REFUSED on this device: {e}")
    lines.append("on one GPU of each card (this mesh's per-device share, XLA:GPU's working set):")
    return "\n".join(lines + card_verdicts(plan_from_config(cfg, model_config, mesh_shape, platform="gpu")))


def device_memory_bytes() -> int | None:
    """The first local device's memory limit (None where the backend does not report one, e.g. CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def plan_from_config(cfg: Any, model_config: ModelConfig, mesh_shape: Mapping[str, int] | Sequence[int],
                     platform: str | None = None) -> MemoryPlan:
    """estimate_memory for a run config (trainer / rollout / env / algo / model.lora keys) on `platform` (default:
    this backend's)."""
    lora = cfg.model.lora
    targets = parse_target_modules(lora.target_modules)
    axes = dict(mesh_shape) if isinstance(mesh_shape, Mapping) else dict(zip(AXES, mesh_shape))
    rollout_rows = cfg.env.groups * cfg.env.group_size
    if cfg.val.every or cfg.val.at_start:  # the validation engine's cache, allocated in turn with the rollout's
        rollout_rows = max(rollout_rows, validation_batch_size(cfg.val, axes))
    return estimate_memory(
        model_config, micro_batch_size=cfg.trainer.micro_batch_size, mini_batch_size=cfg.trainer.mini_batch_size,
        seq_len=cfg.rollout.max_model_len, rollout_batch_size=rollout_rows,
        cache_len=cfg.rollout.max_model_len, mesh_shape=mesh_shape, lora_rank=lora.rank, lora_targets=targets,
        logprob_chunk=cfg.trainer.logprob_chunk, sampling_layout=cfg.mesh.get("sampling_layout", "no_fsdp"),
        optimizer_dtype=cfg.optim.actor.get("state_dtype") or None,
        with_critic=bool(cfg.algo.use_critic), with_reference=bool(cfg.algo.use_kl_loss or cfg.algo.use_kl_in_reward),
        decode_weights=decode_weights_pay_off(model_config, platform or target.backend()),  # the Sampler's default
        platform=platform)


def measured_bytes(compiled: Any) -> int:
    """Peak per-device bytes XLA reserves for a compiled program: arguments + outputs - aliased + temporaries."""
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)
