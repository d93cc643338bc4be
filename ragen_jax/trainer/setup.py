"""Build the run's parts from a config: tokenizer, policy, critic, reference, env batches."""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

from envs.batch import make_env_batch
from ragen_jax.models import CausalLM, CheckpointError, ValueModel, apply_lora, load_model, load_tokenizer
from ragen_jax.models.lora import parse_target_modules, trainable_filter
from ragen_jax.models.sources import resolve_model_path


@dataclasses.dataclass
class SplitModel:
    """A model as (graphdef, trainable state, frozen state); `full()` merges both for inference."""

    graphdef: Any
    trainable: Any
    frozen: Any

    def full(self) -> Any:
        return nnx.merge_state(self.trainable, self.frozen)

    def module(self) -> nnx.Module:
        return nnx.merge(self.graphdef, self.trainable, self.frozen)


VISION_TOWER = "visual"  # where a vision-language model keeps its vision tower (Qwen25VLModel.visual)


def split_model(model: nnx.Module, lora: bool, head: str | None = None, freeze_vision: bool = False) -> SplitModel:
    """Trainable = LoRA adapters (and the parameters under `head`, a critic's value head) when LoRA is on, else
    every parameter; with `freeze_vision`, none of a vision-language model's tower (`visual`)."""
    trains = trainable_filter(lora, head)
    if freeze_vision:
        trains = nnx.All(trains, nnx.Not(nnx.PathContains(VISION_TOWER)))
    graphdef, trainable, frozen = nnx.split(model, trains, ...)
    return SplitModel(graphdef, trainable, frozen)


CRITIC_HEAD = ValueModel.HEAD  # the critic's value head: trained whole under LoRA too


def _lora_targets(model_cfg) -> tuple[str, ...]:
    return parse_target_modules(model_cfg.lora.target_modules)


def load_policy_and_tokenizer(model_cfg) -> tuple[nnx.Module, Any]:
    """The policy model (LoRA applied when rank > 0) and its tokenizer."""
    dtype_kwargs = {k: model_cfg[k] for k in ("param_dtype", "dtype") if model_cfg[k]}
    if model_cfg.preset == "tiny":
        from ragen_jax.models.tiny import make_tiny_model

        model, tokenizer = make_tiny_model(seed=model_cfg.seed, **dict(model_cfg.tiny), **dtype_kwargs,
                                           remat=model_cfg.remat)
    elif model_cfg.preset == "tiny_vision":
        from ragen_jax.models.vision.tiny import make_tiny_vl_model

        model, tokenizer = make_tiny_vl_model(seed=model_cfg.seed, **dict(model_cfg.tiny), **dtype_kwargs,
                                              remat=model_cfg.remat)
    elif model_cfg.preset:
        raise ValueError(f"Unknown model preset {model_cfg.preset!r}; use 'tiny', 'tiny_vision' or '' (load "
                         "model.path).")
    else:
        folder = resolve_model_path(model_cfg.path)
        tokenizer = load_tokenizer(folder)  # first: a missing tokenizer fails before the weights load
        check_chat_template(tokenizer, folder)
        model = load_model(folder, remat=model_cfg.remat, **dtype_kwargs)
    if model_cfg.lora.rank > 0:
        model = apply_lora(model, model_cfg.lora.rank, model_cfg.lora.alpha, _lora_targets(model_cfg),
                           rngs=nnx.Rngs(model_cfg.seed + 1))
    return model, tokenizer


def check_chat_template(tokenizer, folder: str) -> None:
    """Every prompt goes through the tokenizer's chat template: a folder without one (a base model's) is refused
    when it loads, not at the first rollout after the weights loaded and compiled."""
    if not getattr(tokenizer.hf, "chat_template", None):
        raise CheckpointError(
            f"The tokenizer in {folder!r} has no chat template (a base model's?), and every prompt is built with it. "
            "Use the model's Instruct variant, or add a chat template (chat_template.jinja, or 'chat_template' in "
            "tokenizer_config.json) from a model of the same family.")


def make_critic(model_cfg, policy: CausalLM) -> ValueModel:
    """The PPO critic: from `critic_path` if set (with model.param_dtype / dtype, as the policy), else the policy's
    backbone + a fresh value head. With LoRA on, the critic is a LoRA model too (RAGEN's critic lora_rank /
    lora_alpha / target_modules): fresh adapters on a `critic_path` model; else the policy's base weights with a
    copy of its adapters (zero at the start of a run; a warm start's after it), so its frozen part is always the
    base model's. Split it with `split_model(critic, lora, head=CRITIC_HEAD)`."""
    lora = model_cfg.lora.rank > 0
    if model_cfg.critic_path:  # in the dtypes the policy uses (and the memory plan counts)
        dtype_kwargs = {k: model_cfg[k] for k in ("param_dtype", "dtype") if model_cfg[k]}
        critic = load_model(resolve_model_path(model_cfg.critic_path), model_cls=ValueModel, remat=model_cfg.remat,
                            **dtype_kwargs)
        if lora:
            critic = apply_lora(critic, model_cfg.lora.rank, model_cfg.lora.alpha, _lora_targets(model_cfg),
                                rngs=nnx.Rngs(model_cfg.seed + 3))
        return critic
    return ValueModel.from_causal_lm(policy, rngs=nnx.Rngs(model_cfg.seed + 2), keep_lora=lora)


def env_batch(env_cfg, name: str, batch_size: int, extra_kwargs=None):
    """An EnvBatch of `batch_size` episodes of registered env `name` with the config's overrides (env.kwargs, then
    `extra_kwargs` over them: val.env_kwargs for validation envs)."""
    return make_env_batch(name, batch_size, later_overrides=dict(extra_kwargs or {}), **dict(env_cfg.kwargs))
