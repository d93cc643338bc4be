"""Optimizers from config: AdamW with warmup + constant/cosine schedule and global-norm clipping, and the
guarded step every update applies them with (a non-finite loss, gradient, weight or state changes nothing).

`state_dtype` ("float32" by default) keeps the AdamW moments (and the clipping norm) in that dtype
whatever the parameters' dtype: bfloat16 parameters train with float32 optimizer state and a float32 master copy
of themselves in it (`MasterWeights`): each update lands on the master, and the parameters are its rounding, as
veRL's FSDP keeps float32 parameters under bfloat16 compute. Without it, an update below bfloat16's resolution
(~0.4% of a weight; an actor lr of 1e-6 gives ~1e-6) rounds away and the weights never move. "" keeps
optax's default (moments in the gradients' dtype, no master copy).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import optax


def warmup_updates(cfg: Mapping[str, Any], total_updates: int) -> int:
    """`warmup_steps`, or veRL's `int(warmup_steps_ratio * total)` when only the ratio is given."""
    steps, ratio = int(cfg["warmup_steps"]), float(cfg.get("warmup_steps_ratio", 0.0))
    if steps and ratio:
        raise ValueError(f"warmup_steps={steps} and warmup_steps_ratio={ratio} are both set; set one of them.")
    return steps or int(ratio * total_updates)


def make_schedule(cfg: Mapping[str, Any], total_updates: int) -> optax.Schedule:
    """Linear warmup over `warmup_updates` updates, then constant, or cosine as veRL's get_cosine_schedule_with_warmup:
    lr * max(min_lr_ratio, min + (1 - min) (1 + cos(2 pi num_cycles p)) / 2) at progress p of the decay (0.5 cycles:
    one half-wave, down to lr * min_lr_ratio at the last update)."""
    lr, warmup = float(cfg["lr"]), warmup_updates(cfg, total_updates)
    kind = cfg["schedule"]
    if kind == "constant":
        main = optax.constant_schedule(lr)
    elif kind == "cosine":
        floor, cycles = float(cfg.get("min_lr_ratio", 0.0)), float(cfg.get("num_cycles", 0.5))
        decay = max(total_updates - warmup, 1)

        def main(count):
            progress = jnp.minimum(count, decay) / decay
            wave = 0.5 * (1.0 + jnp.cos(jnp.pi * 2.0 * cycles * progress))
            return lr * jnp.maximum(floor, floor + (1.0 - floor) * wave)
    else:
        raise ValueError(f"Unknown lr schedule {kind!r}; use 'constant' or 'cosine'.")
    if warmup <= 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])


class MasterWeights(NamedTuple):
    """Optimizer state of parameters stored narrower than the state dtype: `master`, their copy in that dtype
    (the weights updates land on; `guarded_apply` moves it and rounds the parameters from it), and `inner`."""

    master: Any
    inner: Any


def _narrower(params: Any, dtype: jnp.dtype) -> bool:
    """Whether some floating leaf of params is stored in fewer bytes than dtype (e.g. bfloat16 vs float32)."""
    return any(jnp.issubdtype(x.dtype, jnp.inexact) and jnp.dtype(x.dtype).itemsize < dtype.itemsize
               for x in jax.tree.leaves(params))


def master_copy(params: Any, dtype: Any = jnp.float32) -> Any:
    """params as `dtype` copies in their own buffers and shardings (a leaf already of `dtype` is copied, not
    returned: the update step donates both the parameters and the optimizer state, and one buffer given twice fails)."""
    return jax.tree.map(lambda x: jnp.array(x, dtype=dtype, copy=True), params)


def with_state_dtype(inner: optax.GradientTransformation, dtype: Any) -> optax.GradientTransformation:
    """`inner` run on `dtype` copies of the updates and parameters, so every state it keeps is `dtype`; parameters
    stored narrower get a `MasterWeights` copy in `dtype`, which `inner` then sees as the parameters."""
    dtype = jnp.dtype(dtype)
    cast = lambda tree: jax.tree.map(lambda x: x.astype(dtype), tree)  # noqa: E731

    def init(params):
        if _narrower(params, dtype):
            master = master_copy(params, dtype)
            return MasterWeights(master, inner.init(master))
        return inner.init(cast(params))

    def update(updates, state, params=None):
        if isinstance(state, MasterWeights):  # the master moves in guarded_apply, after the caller's lr
            new_updates, new_inner = inner.update(cast(updates), state.inner, state.master)
            return new_updates, MasterWeights(state.master, new_inner)
        return inner.update(cast(updates), state, None if params is None else cast(params))

    return optax.GradientTransformation(init, update)


def without_masters(tree: Any) -> Any:
    """`tree` (a state or its ShapeDtypeStructs) with each `MasterWeights` node replaced by its `inner`: the
    optimizer state of bfloat16 parameters as checkpoints written before the master copy existed hold it."""
    return jax.tree.map(lambda x: x.inner if isinstance(x, MasterWeights) else x, tree,
                        is_leaf=lambda x: isinstance(x, MasterWeights))


def with_rebuilt_master(params: Any, inner: Any, abstract: MasterWeights) -> MasterWeights:
    """The state `abstract` describes from a checkpoint's `inner` state alone: the master is the restored params'
    wide copy, as init makes it, in the dtype and shardings of `abstract.master`."""
    master = jax.tree.map(lambda p, a: jax.device_put(jnp.array(p, dtype=a.dtype, copy=True), a.sharding),
                          params, abstract.master)
    return MasterWeights(master, inner)


def _unit_rate(count: jax.Array) -> jax.Array:
    del count
    return jnp.ones((), jnp.float32)


def make_optimizer(cfg: Mapping[str, Any], total: int,
                   lr_outside: bool = False) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optimizer, schedule): clip_by_global_norm(grad_clip), then AdamW(schedule), run in `state_dtype`.

    The schedule runs over `total` of the optimizer's own updates. With `lr_outside` AdamW's rate is 1 and the
    caller scales each update by schedule(i) for an index of its own (`guarded_apply`'s lr): the RL trainer's
    index counts the RL steps that trained, as veRL steps its scheduler once per update call however many
    mini-batches the filter left. The state has the same structure either way. optax.apply_updates casts each
    update back to its parameter's dtype."""
    schedule = make_schedule(cfg, total)
    parts = []
    if cfg["grad_clip"] and cfg["grad_clip"] > 0:
        parts.append(optax.clip_by_global_norm(float(cfg["grad_clip"])))
    parts.append(optax.adamw(_unit_rate if lr_outside else schedule, b1=float(cfg["b1"]), b2=float(cfg["b2"]),
                             eps=float(cfg["eps"]),
                             weight_decay=float(cfg["weight_decay"])))
    tx = optax.chain(*parts)
    state_dtype = cfg.get("state_dtype", "float32")
    return (with_state_dtype(tx, state_dtype) if state_dtype else tx), schedule


def all_finite(tree: Any) -> jax.Array:
    """[] bool: every floating leaf of `tree` is finite (integer leaves, e.g. step counts, always are).

    One reduction per leaf, kept where its shards are: x * 0 is 0 where x is finite and NaN where it is inf or NaN,
    so each leaf's sum is 0 exactly when the leaf is finite, without the overflow a plain sum could have."""
    sums = [jnp.sum(x * 0, dtype=jnp.float32) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.isfinite(jnp.sum(jnp.stack(sums))) if sums else jnp.bool_(True)


def guarded_apply(tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any,
                  loss: jax.Array, lr: jax.Array | None = None) -> tuple[Any, Any, jax.Array, jax.Array]:
    """One optimizer step unless the loss, the gradient, the new weights or the new optimizer state is non-finite;
    then params and opt_state come back exactly as they were. -> (params, opt_state, grad global norm, applied).
    lr [] scales the optimizer's updates (for a `make_optimizer(..., lr_outside=True)` optimizer).

    The pick is one conditional over the whole state: an isfinite, an all-reduce and a select per leaf would
    compile to about twice the kernels, and XLA:CPU's compile time grows with them (docs/performance.md,
    "Compile time")."""
    grad_norm = optax.global_norm(grads)
    updates, new_opt = tx.update(grads, opt_state, params)
    if lr is not None:
        updates = jax.tree.map(lambda u: u * lr.astype(u.dtype), updates)
    if isinstance(new_opt, MasterWeights):  # the update lands on the wide copy; the parameters are its rounding
        master = optax.apply_updates(new_opt.master, updates)
        new_opt = new_opt._replace(master=master)
        new_params = jax.tree.map(lambda m, p: m.astype(p.dtype), master, params)
    else:
        new_params = optax.apply_updates(params, updates)
    applied = jnp.isfinite(grad_norm) & jnp.isfinite(loss) & all_finite((new_params, new_opt))
    # one pick of the whole state (no per-leaf select): a non-finite gradient's NaNs in `new` are dropped here
    params, opt_state = jax.lax.cond(applied, lambda new, old: new, lambda new, old: old,
                                     (new_params, new_opt), (params, opt_state))
    return params, opt_state, grad_norm, applied
