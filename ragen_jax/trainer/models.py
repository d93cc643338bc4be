"""The run's models and what trains them, in one object: the policy (actor), the critic, the KL reference, their
optimizers and learning-rate schedules, their placement on the mesh, and their state for checkpoints and exports.

The training stages take it as an argument and put new parameters back into it; nothing else owns a model.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ragen_jax import sharding
from ragen_jax.config import RunConfig
from ragen_jax.trainer import setup as setup_lib
from ragen_jax.optim import MasterWeights, make_optimizer, with_rebuilt_master, without_masters
from ragen_jax.trainer.setup import SplitModel

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Optimizer:
    """One model's optimizer: the transformation, its learning-rate schedule (over the RL steps the model trained)
    and its state."""

    tx: Any
    schedule: Any
    state: Any


class RLModels:
    """Actor, critic and reference with their optimizers, placed on `mesh` (tunix's RLCluster, for one process
    group)."""

    def __init__(self, run: RunConfig, mesh, policy: nnx.Module, tokenizer: Any):
        self.run, self.mesh, self.tokenizer = run, mesh, tokenizer
        self.lora = run.model.lora.rank > 0
        self.use_critic = bool(run.algo.use_critic)
        self.need_ref = bool(run.algo.use_kl_loss or run.algo.use_kl_in_reward)
        critic = setup_lib.make_critic(run.model, policy) if self.use_critic else None
        self.actor = sharding.place_for_training(
            setup_lib.split_model(policy, self.lora, freeze_vision=bool(run.model.freeze_vision)), mesh)
        self.critic = (sharding.place_for_training(setup_lib.split_model(critic, self.lora, setup_lib.CRITIC_HEAD),
                                                   mesh) if critic is not None else None)
        self.ref_params = jax.tree.map(jnp.copy, self.actor.full()) if self.need_ref else None
        self.ref_is_initial = True  # the reference is the policy as built (rebuilt alike on resume)
        self._ref_parts = None
        total = run.trainer.total_steps  # schedules over RL steps, as veRL's (every mini-batch at its step's rate)
        self.actor_optim = self._optimizer(run.optim.actor, total, self.actor)
        self.critic_optim = self._optimizer(run.optim.critic, total, self.critic) if self.critic else None

    @classmethod
    def build(cls, run: RunConfig, mesh) -> "RLModels":
        """Load (or build) the policy and tokenizer the config names, check the memory plan, place everything."""
        policy, tokenizer = setup_lib.load_policy_and_tokenizer(run.model)
        device_bytes = sharding.device_memory_bytes()
        if device_bytes:
            sharding.check_plan(sharding.plan_from_config(run, policy.config, mesh.shape), device_bytes)
        return cls(run, mesh, policy, tokenizer)

    def _optimizer(self, section: Any, total: int, model: SplitModel) -> Optimizer:
        tx, schedule = make_optimizer(vars(section), total, lr_outside=True)
        return Optimizer(tx, schedule, sharding.shard_state(tx.init(model.trainable), self.mesh))

    # ------------------------------------------------------------------ what the stages read
    def sampling_params(self) -> Any:
        """The policy's full state in the sampling layout (no fsdp gathers inside the decode loop)."""
        return sharding.reshard_for_sampling(self.actor.full(), self.mesh, layout=self.run.mesh.sampling_layout)

    def reference_split(self) -> tuple[Any, Any]:
        """The KL reference as (trainable-like, frozen) parts, in the actor's split (so the actor's scoring
        program serves it)."""
        if self._ref_parts is None:
            _, trainable, frozen = nnx.split(nnx.merge(self.actor.graphdef, self.ref_params),
                                             nnx.LoRAParam if self.lora else nnx.Param, ...)
            self._ref_parts = (trainable, frozen)
        return self._ref_parts

    def learning_rates(self, actor_steps: int, critic_steps: int) -> tuple[float, float | None]:
        """(actor, critic) learning rates after each model trained on `*_steps` RL steps (veRL steps each
        scheduler once per update call)."""
        actor = float(self.actor_optim.schedule(actor_steps))
        return actor, None if self.critic is None else float(self.critic_optim.schedule(critic_steps))

    # ------------------------------------------------------------------ changes between phases
    def rebuild_critic_from_policy(self) -> None:
        """Re-initialise the critic from the (warm-started) policy backbone, as at the start of RL."""
        if self.critic is None or self.run.model.critic_path:
            return
        critic = setup_lib.make_critic(self.run.model, self.actor.module())
        self.critic = sharding.place_for_training(setup_lib.split_model(critic, self.lora, setup_lib.CRITIC_HEAD),
                                                  self.mesh)
        self.critic_optim.state = sharding.shard_state(self.critic_optim.tx.init(self.critic.trainable), self.mesh)

    def reset_reference(self) -> None:
        """Make the current policy the KL reference (e.g. after the warm start); checkpoints then carry it."""
        if self.need_ref:
            self.ref_params = jax.tree.map(jnp.copy, self.actor.full())
            self.ref_is_initial = False
            self._ref_parts = None

    # ------------------------------------------------------------------ checkpoints and exports
    @property
    def saves_reference(self) -> bool:
        """Whether a checkpoint must carry the reference (it is not the policy as built)."""
        return self.need_ref and not self.ref_is_initial

    def state(self, with_reference: bool) -> dict:
        """The trainable state a checkpoint holds; the reference's frozen part is the actor's."""
        state = {"actor": self.actor.trainable, "actor_opt": self.actor_optim.state}
        if self.critic is not None:
            state.update(critic=self.critic.trainable, critic_opt=self.critic_optim.state)
        if with_reference:
            state["reference"] = self.reference_split()[0]
        return state

    def restore(self, checkpointer, step: int, with_reference: bool) -> dict:
        """Load checkpoint `step` into the models -> the checkpoint's meta. A bfloat16 run's checkpoint written
        before the float32 master copy (its optimizer states are what is now `.inner`) restores that state and
        rebuilds the master from the restored parameters, as init would."""
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                self.state(with_reference))
        state, meta = restore_state(checkpointer, step, abstract)
        self.actor.trainable, self.actor_optim.state = state["actor"], state["actor_opt"]
        if self.critic is not None:
            self.critic.trainable, self.critic_optim.state = state["critic"], state["critic_opt"]
        if with_reference:
            self.ref_params = nnx.merge_state(state["reference"], self.actor.frozen)
            self.ref_is_initial = False
            self._ref_parts = None
        return meta

    def export(self, folder: str, rl_steps: int) -> str:
        """Write the policy as a Hugging Face folder (LoRA merged) that transformers can load, recording the RL
        steps it trained. Every process calls it (the parameters are gathered from all hosts); process 0 writes."""
        from ragen_jax.models import merge_lora, save_pretrained

        params = self.actor.full()
        if jax.process_count() > 1:
            params = jax.tree.map(jnp.asarray, sharding.gather_to_host(params))
        model = nnx.merge(self.actor.graphdef, params)
        if self.lora:
            model = merge_lora(model)
        if jax.process_index() == 0:
            record = {"rl_steps": int(rl_steps)}
            if hasattr(model, "vl_config"):  # a vision-language policy: transformers' Qwen2.5-VL folder
                from ragen_jax.models.vision import image_processor_for, save_vl_pretrained

                save_vl_pretrained(model, folder, tokenizer=self.tokenizer, training_record=record,
                                   image_processor=image_processor_for(model.vl_config.vision))
            else:
                save_pretrained(model, folder, tokenizer=self.tokenizer, training_record=record)
        return folder


def restore_state(checkpointer, step: int, abstract: dict) -> tuple[dict, dict]:
    """Checkpoint `step` into `abstract` -> (state, meta), a checkpoint from before the float32 master copy
    included (see `RLModels.restore`)."""
    from ragen_jax.checkpoint import leaf_dtypes, leaf_shapes

    legacy, stored = without_masters(abstract), checkpointer.stored_state(step)
    if (leaf_shapes(stored) == leaf_shapes(abstract) or leaf_shapes(stored) != leaf_shapes(legacy)
            or leaf_dtypes(stored) != leaf_dtypes(legacy)):  # this case exactly, not a float32 run's checkpoint
        return checkpointer.restore(step, abstract)
    state, meta = checkpointer.restore(step, legacy)
    rebuilt = [k for k, v in abstract.items() if isinstance(v, MasterWeights)]
    for key in rebuilt:  # "actor_opt" holds the master of "actor"
        state[key] = with_rebuilt_master(state[key.removesuffix("_opt")], state[key], abstract[key])
    logger.info("Checkpoint %d predates the float32 master copy of bfloat16 parameters (%s): rebuilt it from the "
                "restored parameters.", step, ", ".join(rebuilt))
    return state, meta
