"""The warm start's supervised step: behaviour cloning on demonstration rows.

The loss is the token-mean negative log-likelihood of the response tokens only. Rows usually share a long prefix
(system prompt): it is run once per micro-batch into a KV cache that every row attends to, which gives the same
loss and gradients as running each full row, at a fraction of the cost.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ragen_jax import sharding
from ragen_jax.models.cache import init_cache
from ragen_jax.shapes import round_up
from ragen_jax.optim import guarded_apply, make_optimizer
from ragen_jax.models.rope import positions_from_mask
from ragen_jax.warmstart.demos import DemoRows



@dataclasses.dataclass
class SFTData:
    """Demo rows split into a shared prefix and per-row suffixes, with gathered targets.

    prefix [P] int32 (P may be 0); tokens [N, W] int32 and attention_mask [N, W] bool: the rest of
    each row; pred_pos [N, K] int32: suffix index of the hidden state predicting targets [N, K];
    target_mask [N, K] f32: 1 on real targets. real_tokens [N]: full row length (prefix included).
    """

    prefix: np.ndarray
    tokens: np.ndarray
    attention_mask: np.ndarray
    pred_pos: np.ndarray
    targets: np.ndarray
    target_mask: np.ndarray
    real_tokens: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    def batch(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens[rows], "attention_mask": self.attention_mask[rows],
                "pred_pos": self.pred_pos[rows], "targets": self.targets[rows],
                "target_mask": self.target_mask[rows]}


def prepare_sft_data(rows: DemoRows, *, share_prefix: bool = True, multiple: int = 8) -> SFTData:
    """Split off the longest prefix all rows share (before any trained token) and gather targets."""
    mask = rows.loss_mask > 0
    if not mask.any(axis=1).all():
        raise ValueError("Every demonstration row needs at least one trained (assistant) token.")
    if mask[:, 0].any():
        raise ValueError("A row trains its first token, which has no context to predict it from.")
    lengths = rows.attention_mask.sum(1)
    first_target = mask.argmax(axis=1)
    P = 0
    if share_prefix and rows.num_rows > 1:
        limit = int(min(lengths.min(), first_target.min() - 1))
        same = (rows.tokens[:, :limit] == rows.tokens[:1, :limit]).all(axis=0)
        P = int(np.argmin(same)) if not same.all() else limit
    width = max(multiple, round_up(int(lengths.max()) - P, multiple))
    n = rows.num_rows
    tokens = np.zeros((n, width), np.int32)
    attention = np.zeros((n, width), bool)
    src = rows.tokens[:, P:P + width]
    tokens[:, :src.shape[1]] = src
    attention[:, :src.shape[1]] = rows.attention_mask[:, P:P + width]
    k = max(multiple, round_up(int(mask.sum(1).max()), multiple))
    pred_pos = np.zeros((n, k), np.int32)
    targets = np.zeros((n, k), np.int32)
    target_mask = np.zeros((n, k), np.float32)
    for i in range(n):
        pos = np.nonzero(mask[i])[0]
        pred_pos[i, :len(pos)] = pos - 1 - P
        targets[i, :len(pos)] = rows.tokens[i, pos]
        target_mask[i, :len(pos)] = 1.0
    return SFTData(rows.tokens[0, :P].astype(np.int32), tokens, attention, pred_pos, targets, target_mask,
                   lengths.astype(np.int64))


def sft_sums(model, prefix: jax.Array, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """(summed NLL, number of argmax-correct targets) of one batch under `model`, scalars."""
    tokens, attention = batch["tokens"], batch["attention_mask"]
    chex.assert_rank([tokens, attention, batch["pred_pos"], batch["targets"]], 2)
    b, w = tokens.shape
    p = prefix.shape[0]
    positions = positions_from_mask(attention)
    if p == 0:
        hidden, _ = model.hidden(tokens, positions, attention_mask=attention)
    else:
        cache = init_cache(model.config, 1, p + w)
        _, cache = model.hidden(prefix[None], jnp.arange(p, dtype=jnp.int32)[None], cache=cache,
                                cache_index=jnp.zeros((1,), jnp.int32))
        cache = cache.broadcast_rows(b)
        full_mask = jnp.concatenate([jnp.ones((b, p), bool), attention.astype(bool)], axis=1)
        hidden, _ = model.hidden(tokens, positions + p, attention_mask=full_mask, cache=cache,
                                 cache_index=jnp.full((b,), p, jnp.int32))
    h = jnp.take_along_axis(hidden, batch["pred_pos"][..., None], axis=1)  # [B, K, D]
    logits = model.logits(h)
    logp = jax.nn.log_softmax(logits, axis=-1)
    target_lp = jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
    m = batch["target_mask"]
    correct = (jnp.argmax(logits, axis=-1) == batch["targets"]).astype(jnp.float32)
    return -jnp.sum(target_lp * m), jnp.sum(correct * m)


def make_sft_step(graphdef, tx: optax.GradientTransformation, micro_batch_size: int) -> Callable:
    """Jitted `step(trainable, opt_state, frozen, prefix, batch) -> (trainable, opt_state, metrics)`.

    Gradients accumulate over micro-batches (a scan); the token-mean divides once by the batch's
    target count. Params and optimizer state are donated; a non-finite gradient skips the update.
    """
    def step(trainable, opt_state, frozen, prefix, batch):
        count = jnp.maximum(jnp.sum(batch["target_mask"]), 1.0)
        n = batch["tokens"].shape[0]
        if n % micro_batch_size:
            raise ValueError(f"SFT batch of {n} rows is not a multiple of micro_batch_size {micro_batch_size}.")
        micro = jax.tree.map(lambda x: x.reshape(n // micro_batch_size, micro_batch_size, *x.shape[1:]), batch)

        def loss_fn(params, mb):
            nll, correct = sft_sums(nnx.merge(graphdef, params, frozen), prefix, mb)
            return nll / count, correct

        def body(carry, mb):
            loss_acc, correct_acc, grads_acc = carry
            (loss, correct), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, mb)
            return (loss_acc + loss, correct_acc + correct, jax.tree.map(jnp.add, grads_acc, grads)), None

        zeros = jax.tree.map(jnp.zeros_like, trainable)
        (loss, correct, grads), _ = jax.lax.scan(body, (jnp.float32(0), jnp.float32(0), zeros), micro)
        trainable, opt_state, grad_norm, applied = guarded_apply(tx, trainable, opt_state, grads, loss)
        metrics = {"loss": loss, "token_accuracy": correct / count, "grad_norm": grad_norm,
                   "update_skipped": 1.0 - applied.astype(jnp.float32)}
        return trainable, opt_state, metrics

    return jax.jit(step, donate_argnums=(0, 1))


def _place_batch(batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
    """Rows over the mesh's (data, fsdp) when they divide (data-parallel SFT), else replicated."""
    if mesh is not None and len(next(iter(batch.values()))) % sharding.batch_shards(mesh) == 0:
        return sharding.shard_batch(batch, mesh)
    return {k: jnp.asarray(v) for k, v in batch.items()}


def sft_optimizer(w, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW with linear warmup then constant lr, global-norm clipping at 1 (config.warmstart)."""
    return make_optimizer(dict(lr=w.lr, weight_decay=w.weight_decay, b1=0.9, b2=0.999, eps=1e-8,
                               warmup_steps=w.warmup_steps, schedule="constant", grad_clip=1.0), total_steps)
