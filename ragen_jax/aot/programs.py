"""Every program a run compiles, as (jitted function, abstract arguments), built without any array in memory.

`PROGRAMS` maps a program's name to the function that builds it from a `Build` (model config, sizes, mesh): the
sampler's begin and decode programs of both rollout engines, scoring, advantages, the actor and critic updates
(full and LoRA), the warm-start SFT step and the MI cross-score's two programs. Each comes from the module that
compiles it in a run (this file is the one place that names them), with arguments laid out as the trainer lays
them out: parameters and optimizer states by the partition rules, rows over (data, fsdp), the KV cache's kv heads
over tensor, the sampler's parameters in the sampling layout. `Program.trace()` then lowers or compiles for any
platform (ragen_jax.aot.gpu).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from ragen_jax.models import CausalLM, ModelConfig, ValueModel, init_cache
from ragen_jax.models.lora import parse_target_modules
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.sampler import KEY_WIDTH, Sampler
from ragen_jax.sampling.turn import idle_state
from ragen_jax.sharding.memory import abstract_split
from ragen_jax.sharding.placement import row_sharding, sampling_rules
from ragen_jax.sharding.rules import DEFAULT_RULES, cache_spec, fit_spec, state_shardings

PAD_ID = 0


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The batch and sequence sizes the programs are built at (global rows; a mesh splits them over data*fsdp)."""

    micro_batch: int = 2  # trainer.micro_batch_size: rows an update's scan step and a scoring call hold
    mini_batch: int = 4  # trainer.mini_batch_size: rows one update call takes
    seq_len: int = 64  # a trained row's length (rollout.max_model_len at most)
    scored: int = 32  # trained positions per row (`scored_positions`: a multiple of 32)
    rollout_rows: int = 4  # the lockstep engine's batch (env.groups x env.group_size)
    slots: int = 4  # the continuous engine's decode slots
    begin_rows: int = 2  # continuous: rows whose turn begins in one call
    cache_len: int = 128  # rollout.max_model_len: the KV cache's slots
    window: int = 128  # the cache slots attention reads (`Sampler.window_length`)
    prefill: int = 32  # a begin call's bucket of new tokens
    new_tokens: int = 16  # rollout.response_length (max_new_tokens)
    chunk: int = 8  # rollout.chunk: decode steps per continuous call
    lora_rank: int = 4
    sft_rows: int = 4  # warm-start: rows per SFT step
    sft_prefix: int = 16  # the demos' shared prefix
    sft_width: int = 32  # each row's suffix
    sft_targets: int = 16  # trained targets per row
    cross_columns: int = 4  # MI cross-score: prompt columns
    cross_prompt: int = 32
    cross_pairs: int = 4  # (reasoning, column) pairs per call
    cross_reasoning: int = 16

    @property
    def decode_steps(self) -> int:
        """Tokens one lockstep decode call generates (all but the first, which begin samples)."""
        return self.new_tokens


@dataclasses.dataclass
class Program:
    """One compiled program: `fn` (jitted) called as fn(*args); args are jax.ShapeDtypeStruct (sharded under a
    mesh) or static Python values. kind: what it does per call, for the roofline ("decode", "prefill", "update",
    "score" or "other"); tokens: the tokens one call produces or trains (global)."""

    name: str
    fn: Any
    args: tuple
    kind: str = "other"
    tokens: int = 0

    def trace(self):
        """jax's Traced stage: .lower(lowering_platforms=...) or .lower().compile()."""
        return self.fn.trace(*self.args)


class Build:
    """What every program is built from: a model config, `Sizes`, an optional mesh (NamedShardings on the
    arguments; the programs are traced under it), and the run config the optimizers and algorithm come from
    (default: configs/base.py's, with the critic and the KL loss on so that every program exists)."""

    def __init__(self, model_config: ModelConfig, sizes: Sizes = Sizes(), mesh: Mesh | None = None, cfg=None):
        self.config, self.sizes, self.mesh = model_config, sizes, mesh
        self.cfg = cfg if cfg is not None else default_run_config()

    # ----------------------------------------------------------------------- placement
    def abstract(self, tree: Any, shardings: Any = None) -> Any:
        """ShapeDtypeStructs of `tree`'s leaves, with `shardings` (a like pytree) under a mesh."""
        if self.mesh is None or shardings is None:
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
        return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)

    def rows(self, tree: Any) -> Any:
        """Batch arrays [B, ...] with rows over (data, fsdp) where they divide (`shard_batch`, `row_sharding`)."""
        if self.mesh is None:
            return self.abstract(tree)
        return self.abstract(tree, jax.tree.map(lambda x: row_sharding(self.mesh, x.shape), tree))

    def training_state(self, state: Any) -> Any:
        """Parameters or optimizer state in the training layout (`place_for_training`, `shard_state`)."""
        return self.abstract(state, None if self.mesh is None else state_shardings(state, self.mesh))

    def sampling_state(self, state: Any) -> Any:
        """The policy's parameters in the sampling layout (`reshard_for_sampling`, no_fsdp)."""
        if self.mesh is None:
            return self.abstract(state)
        layout = self.cfg.mesh.get("sampling_layout", "no_fsdp")
        return self.abstract(state, state_shardings(state, self.mesh, sampling_rules(DEFAULT_RULES, layout)))

    def cache(self, batch: int) -> Any:
        """A KV cache of `batch` rows and Sizes.cache_len slots, as `Sampler.init_cache` places it."""
        cache = jax.eval_shape(functools.partial(init_cache, self.config, batch, self.sizes.cache_len))
        if self.mesh is None:
            return self.abstract(cache)
        return self.abstract(cache, jax.tree.map(
            lambda x: NamedSharding(self.mesh, fit_spec(cache_spec(), x.shape, self.mesh)), cache))

    def scalar(self, dtype=jnp.float32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((), dtype)

    # ----------------------------------------------------------------------- models
    def split(self, lora: bool = False, critic: bool = False):
        """(graphdef, trainable, frozen) of the policy or the critic, abstract."""
        cls, head = (ValueModel, ValueModel.HEAD) if critic else (CausalLM, None)
        targets = parse_target_modules(self.cfg.model.lora.target_modules)
        return abstract_split(cls, self.config, self.sizes.lora_rank if lora else 0, targets, head)

    def optimizer(self, which: str = "actor"):
        from ragen_jax.optim import make_optimizer

        return make_optimizer(self.cfg.optim[which], self.cfg.trainer.total_steps, lr_outside=True)[0]

    @functools.cached_property
    def step_fns(self) -> dict[str, dict[str, Callable]]:
        """`make_step_fns` of the full and the LoRA run: {"full" | "lora": its functions}."""
        from ragen_jax.algos.settings import AlgoSettings
        from ragen_jax.config import RunConfig
        from ragen_jax.trainer.steps import make_step_fns

        out = {}
        for kind, lora in (("full", False), ("lora", True)):
            actor, critic = self.split(lora), self.split(lora, critic=True)
            out[kind] = make_step_fns(actor[0], critic[0], AlgoSettings.of(RunConfig.from_config(self.cfg)), self.optimizer("actor"),
                                      self.optimizer("critic"), self.sizes.micro_batch)
        return out

    def sampling_config(self) -> SamplingConfig:
        """RAGEN's rollout sampling: the response length, eos, a stop sequence ("</answer>") after a gate
        ("</think>"), full vocabulary."""
        return SamplingConfig(max_new_tokens=self.sizes.new_tokens, eos_ids=(1, 2), stop_sequences=((3, 4),),
                              stop_after=((5,),))

    def sampler(self, batch: int) -> Sampler:
        graphdef = self.split()[0]
        return Sampler(graphdef, cache_size=self.sizes.cache_len, pad_id=PAD_ID, batch_size=batch,
                       model_config=self.config, mesh=self.mesh)

    def turn_state(self, batch: int) -> Any:
        make = functools.partial(idle_state, batch, self.sizes.new_tokens, PAD_ID, KEY_WIDTH)
        return self.rows(jax.eval_shape(make))

    def ints(self, *shape: int, dtype=jnp.int32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype)


def default_run_config():
    """RAGEN's defaults (configs/base.py, every env config's start) with the critic and the KL loss on (a PPO
    run's every program)."""
    from configs.base import get_base_config

    cfg = get_base_config()
    cfg.algo.use_critic = True
    cfg.algo.use_kl_loss = True
    return cfg


# ------------------------------------------------------------------------------------------ sampling
def _begin(b: Build, batch: int, rows: int, prefills: int, in_place: bool, name: str) -> Program:
    """A begin program (`Sampler._begin_fn`) for `rows` rows of a `batch`-row sampler, `prefills` prefills."""
    s = b.sizes
    sampler = b.sampler(batch)
    fn = sampler._begin_fn(b.sampling_config(), rows, prefills, s.prefill, s.window, in_place)
    params = b.sampling_state(nnx.merge_state(*b.split()[1:]))
    row_args = b.rows({"rows": b.ints(rows), "source": b.ints(rows)}) if in_place else {
        "rows": b.ints(rows), "source": b.ints(rows)}
    prefill_args = b.rows({"prefill_rows": b.ints(prefills), "tokens": b.ints(prefills, s.prefill),
                           "cache_index": b.ints(prefills), "new_lens": b.ints(prefills)}) if in_place else {
        "prefill_rows": b.ints(prefills), "tokens": b.ints(prefills, s.prefill), "cache_index": b.ints(prefills),
        "new_lens": b.ints(prefills)}
    keys = b.rows(b.ints(rows, KEY_WIDTH, dtype=jnp.uint32)) if in_place else b.ints(rows, KEY_WIDTH,
                                                                                    dtype=jnp.uint32)
    args = (params, b.cache(batch), b.turn_state(batch), row_args["rows"], row_args["source"],
            prefill_args["prefill_rows"], prefill_args["tokens"], prefill_args["cache_index"],
            prefill_args["new_lens"], keys, b.scalar())
    return Program(name, fn, args, kind="prefill", tokens=prefills * s.prefill)


def _decode(b: Build, batch: int, steps: int, name: str) -> Program:
    """A decode program (`Sampler._decode_fn`): `steps` tokens for each of `batch` rows, decode weights as the
    sampler's default for the platform (none on a GPU)."""
    sampler = b.sampler(batch)
    fn = sampler._decode_fn(b.sampling_config(), sampler.decode_window(b.sizes.window), steps)
    params = b.sampling_state(nnx.merge_state(*b.split()[1:]))
    weights = None
    if sampler.out_first_weights:
        from ragen_jax.models.transformer import decode_weights

        graphdef = b.split()[0]
        weights = b.abstract(jax.eval_shape(lambda p: decode_weights(nnx.merge(graphdef, p)), params))
    args = (params, weights, b.cache(batch), b.turn_state(batch), b.scalar())
    return Program(name, fn, args, kind="decode", tokens=batch * steps)


def lockstep_begin(b: Build) -> Program:
    """The lockstep engine's turn start: every row of the batch, in place (`Sampler.generate`)."""
    n = b.sizes.rollout_rows
    return _begin(b, n, n, n, True, "lockstep/begin")


def lockstep_decode(b: Build) -> Program:
    return _decode(b, b.sizes.rollout_rows, b.sizes.decode_steps, "lockstep/decode")


def continuous_begin(b: Build) -> Program:
    """The continuous engine's turn start: a few slots whose turn ended take new tokens while the others wait;
    episodes of one group share their prompt's prefill."""
    s = b.sizes
    return _begin(b, s.slots, s.begin_rows, max(1, s.begin_rows // 2), False, "continuous/begin")


def continuous_decode(b: Build) -> Program:
    return _decode(b, b.sizes.slots, b.sizes.chunk, "continuous/decode")


# ------------------------------------------------------------------------------------------ training
def _token_grid(b: Build, rows: int, dtype=jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((rows, b.sizes.seq_len), dtype)


def score_policy(b: Build) -> Program:
    """Old/reference log-probs and entropies of one micro-batch at its trained positions (`_score_rows`)."""
    s = b.sizes
    _, trainable, frozen = b.split()
    args = (b.training_state(trainable), b.training_state(frozen),
            *b.rows((_token_grid(b, s.micro_batch, jnp.int32), _token_grid(b, s.micro_batch, jnp.bool_),
                     b.ints(s.micro_batch, s.scored))))
    return Program("score/policy", b.step_fns["full"]["score_policy"], args, kind="score",
                   tokens=s.micro_batch * s.seq_len)


def score_values(b: Build) -> Program:
    s = b.sizes
    _, trainable, frozen = b.split(critic=True)
    args = (b.training_state(trainable), b.training_state(frozen),
            *b.rows((_token_grid(b, s.micro_batch, jnp.int32), _token_grid(b, s.micro_batch, jnp.bool_))))
    return Program("score/values", b.step_fns["full"]["score_values"], args, kind="score",
                   tokens=s.micro_batch * s.seq_len)


def advantages(b: Build) -> Program:
    s = b.sizes
    grid = _token_grid(b, s.mini_batch)
    args = b.rows((grid, grid, grid, b.ints(s.mini_batch), b.ints(s.mini_batch)))
    return Program("advantages", b.step_fns["full"]["advantages"], args)


def _actor_update(b: Build, lora: bool, name: str) -> Program:
    s = b.sizes
    _, trainable, frozen = b.split(lora)
    opt = jax.eval_shape(b.optimizer("actor").init, trainable)
    grid = _token_grid(b, s.mini_batch)
    keys = ["tokens", "attention_mask", "loss_mask", "old_logprobs", "sample_logprobs", "advantages", "positions",
            "row_valid"] + (["ref_logprobs"] if b.cfg.algo.use_kl_loss else [])
    batch = {k: grid for k in keys} | {"tokens": _token_grid(b, s.mini_batch, jnp.int32),
                                       "attention_mask": _token_grid(b, s.mini_batch, jnp.bool_),
                                       "positions": b.ints(s.mini_batch, s.scored),
                                       "row_valid": jax.ShapeDtypeStruct((s.mini_batch,), jnp.float32)}
    args = (b.training_state(trainable), b.training_state(opt), b.training_state(frozen), b.rows(batch), b.scalar())
    return Program(name, b.step_fns["lora" if lora else "full"]["actor_update"], args, kind="update",
                   tokens=s.mini_batch * s.seq_len)


def _critic_update(b: Build, lora: bool, name: str) -> Program:
    s = b.sizes
    _, trainable, frozen = b.split(lora, critic=True)
    opt = jax.eval_shape(b.optimizer("critic").init, trainable)
    grid = _token_grid(b, s.mini_batch)
    batch = {"tokens": _token_grid(b, s.mini_batch, jnp.int32),
             "attention_mask": _token_grid(b, s.mini_batch, jnp.bool_), "loss_mask": grid, "values": grid,
             "returns": grid}
    args = (b.training_state(trainable), b.training_state(opt), b.training_state(frozen), b.rows(batch), b.scalar())
    return Program(name, b.step_fns["lora" if lora else "full"]["critic_update"], args, kind="update",
                   tokens=s.mini_batch * s.seq_len)


def sft_step(b: Build) -> Program:
    """The warm start's SFT step (`make_sft_step`): a shared prefix prefilled once, rows' suffixes trained."""
    from ragen_jax.warmstart.sft import make_sft_step, sft_optimizer

    s = b.sizes
    graphdef, trainable, frozen = b.split()
    tx = sft_optimizer(b.cfg.warmstart, 10)[0]
    opt = jax.eval_shape(tx.init, trainable)
    micro = min(b.sizes.micro_batch, s.sft_rows)
    batch = {"tokens": b.ints(s.sft_rows, s.sft_width), "attention_mask": b.ints(s.sft_rows, s.sft_width,
                                                                                  dtype=jnp.bool_),
             "pred_pos": b.ints(s.sft_rows, s.sft_targets), "targets": b.ints(s.sft_rows, s.sft_targets),
             "target_mask": jax.ShapeDtypeStruct((s.sft_rows, s.sft_targets), jnp.float32)}
    args = (b.training_state(trainable), b.training_state(opt), b.training_state(frozen), b.ints(s.sft_prefix),
            b.rows(batch))
    return Program("warmstart/sft_step", make_sft_step(graphdef, tx, micro), args, kind="update",
                   tokens=s.sft_rows * (s.sft_prefix + s.sft_width))


def cross_score_prefill(b: Build) -> Program:
    """The MI cross-score's prompt prefill (`cross_score_module._prefill`); one device, as the diagnostics run it."""
    cross_score_module = importlib.import_module("ragen_jax.diagnostics.cross_score")

    s = b.sizes
    graphdef, trainable, frozen = b.split()
    cache_len = s.cross_prompt + s.cross_reasoning + 1
    args = (graphdef, b.abstract(nnx.merge_state(trainable, frozen)), b.ints(s.cross_columns, s.cross_prompt),
            b.ints(s.cross_columns), cache_len)
    return Program("cross_score/prefill", cross_score_module._prefill, args,
                   kind="prefill", tokens=s.cross_columns * s.cross_prompt)


def cross_score_pairs(b: Build) -> Program:
    cross_score_module = importlib.import_module("ragen_jax.diagnostics.cross_score")

    s = b.sizes
    graphdef, trainable, frozen = b.split()
    cache_len = s.cross_prompt + s.cross_reasoning + 1
    cache = b.abstract(jax.eval_shape(functools.partial(init_cache, b.config, s.cross_columns, cache_len)))
    window = min(cache_len, s.cross_prompt + s.cross_reasoning)
    args = (graphdef, b.abstract(nnx.merge_state(trainable, frozen)), cache, b.ints(s.cross_pairs),
            b.ints(s.cross_pairs, s.cross_reasoning + 1), b.ints(s.cross_pairs),
            b.ints(s.cross_pairs, s.cross_reasoning, dtype=jnp.bool_), window, b.scalar())
    return Program("cross_score/pairs", cross_score_module._score_pairs, args,
                   kind="score", tokens=s.cross_pairs * (s.cross_reasoning + 1))


PROGRAMS: dict[str, Callable[[Build], Program]] = {
    "lockstep/begin": lockstep_begin,
    "lockstep/decode": lockstep_decode,
    "continuous/begin": continuous_begin,
    "continuous/decode": continuous_decode,
    "score/policy": score_policy,
    "score/values": score_values,
    "advantages": advantages,
    "update/actor": lambda b: _actor_update(b, False, "update/actor"),
    "update/actor_lora": lambda b: _actor_update(b, True, "update/actor_lora"),
    "update/critic": lambda b: _critic_update(b, False, "update/critic"),
    "update/critic_lora": lambda b: _critic_update(b, True, "update/critic_lora"),
    "warmstart/sft_step": sft_step,
    "cross_score/prefill": cross_score_prefill,
    "cross_score/pairs": cross_score_pairs,
}
# programs that run on one device whatever the trainer's mesh (the diagnostics score on the default device)
SINGLE_DEVICE = ("cross_score/prefill", "cross_score/pairs")


def build(name: str, b: Build) -> Program:
    """PROGRAMS[name] built from `b`; trace it under b.mesh (`Program.trace`, `ragen_jax.aot.gpu`)."""
    if name not in PROGRAMS:
        raise ValueError(f"Unknown program {name!r}; known: {', '.join(PROGRAMS)}.")
    return PROGRAMS[name](b)
