"""Supervised warm-start (behaviour cloning): train the policy on demonstrations before RL.

Demonstrations come from the env's oracle (`rollout.demos`) or a JSONL of chat messages, in the
rollout's exact prompt format. The loss is the token-mean negative log-likelihood of the
response tokens only. Rows usually share a long prefix (system prompt): it is run once per
micro-batch into a KV cache that every row attends to, which gives the same loss and gradients
as running each full row, at a fraction of the cost.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import zipfile
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm import tqdm

from ragen_jax import sharding
from ragen_jax.models.transformer import init_cache
from ragen_jax.rollout.demos import DemoRows, demo_rows, load_jsonl_demos, oracle_demo_episodes
from ragen_jax.rollout.dump import write_jsonl
from ragen_jax.trainer.optim import guarded_apply, make_optimizer
from ragen_jax.trainer.steps import positions_from_mask

logger = logging.getLogger(__name__)
DEMO_CACHE_VERSION = 1


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


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-int(n) // multiple) * multiple)


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
    width = _round_up(int(lengths.max()) - P, multiple)
    n = rows.num_rows
    tokens = np.zeros((n, width), np.int32)
    attention = np.zeros((n, width), bool)
    src = rows.tokens[:, P:P + width]
    tokens[:, :src.shape[1]] = src
    attention[:, :src.shape[1]] = rows.attention_mask[:, P:P + width]
    k = _round_up(int(mask.sum(1).max()), multiple)
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


# ------------------------------------------------------------------------------ demonstrations
_DEMO_MEMO: dict[str, DemoRows] = {}


def _demo_cache_path(key: str) -> str:
    root = os.environ.get("RAGEN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "ragen_jax"))
    return os.path.join(root, "demos", f"{key}.npz")


def _demo_code_files(env_batch) -> list[str]:
    """The source files that shape demos: the rollout's prompts, contexts, parsing and batches, the env batch, the
    env's module and every file beside it (its generator, renderer, oracle), the env state descriptions and the
    grid symbol tables."""
    import inspect

    from envs import describe, symbols
    from ragen_jax.rollout import batching, context, demos, engine, parsing, prompts

    modules = (batching, context, demos, engine, parsing, prompts, describe, symbols)
    files = [inspect.getsourcefile(m) for m in modules]
    for obj in (env_batch, getattr(env_batch, "env", None)):
        module = inspect.getmodule(type(obj)) if obj is not None else None
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py"):
            folder = os.path.dirname(os.path.abspath(path))
            files.append(path)
            if os.path.isfile(os.path.join(folder, "__init__.py")):  # an env package: its sibling modules too
                files += [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
    return sorted({os.path.abspath(f) for f in files if f})


def _format_code_fingerprint(env_batch) -> str:
    """A hash of the code that shapes demos (`_demo_code_files`), so edits invalidate caches."""
    digest = hashlib.sha256()
    for path in _demo_code_files(env_batch):
        digest.update(os.path.basename(path).encode())  # not the folder: checkouts of one code share a cache
        try:
            with open(path, "rb") as f:
                digest.update(f.read())
        except OSError:
            pass
    return digest.hexdigest()[:16]


def _canonical_env_kwargs(name: str, overrides: Any) -> str:
    """The constructor kwargs of env `name` with `overrides` (envs.registry.env_kwargs: RAGEN's env_config names
    translated to ours, over the variant's values), less those at the constructor's default, as one string: one
    setting written either way keys one entry."""
    import inspect

    from envs import registry
    from envs.ragen_keys import plain

    spec = registry.get_spec(name)
    kwargs = plain(registry.env_kwargs(spec, dict(overrides or {})))
    try:
        params = inspect.signature(spec.resolve_factory()).parameters
    except (TypeError, ValueError):
        params = {}
    defaults = {k: plain(p.default) for k, p in params.items() if p.default is not inspect.Parameter.empty}
    return repr(sorted((k, v) for k, v in kwargs.items() if k not in defaults or defaults[k] != v))


def demo_cache_key(trainer, num: int) -> str:
    """The demo cache's key: everything the played rows depend on (code, env and its kwargs, demo count, seed and
    reasoning, the rollout format and lengths, and the tokenizer: vocabulary, chat template, end and pad ids)."""
    cfg, w, rcfg, tok = trainer.cfg, trainer.cfg.warmstart, trainer.rollout_cfg, trainer.tokenizer
    probe = tok.apply_chat_template([{"role": "user", "content": "probe"}], add_generation_prompt=True)
    blob = json.dumps({"v": DEMO_CACHE_VERSION, "code": _format_code_fingerprint(trainer.train_env),
                       "env": cfg.env.name, "kwargs": _canonical_env_kwargs(cfg.env.name, cfg.env.kwargs),
                       "num": int(num), "seed": int(w.seed), "source": w.source,
                       "reasoning": [w.reasoning, w.reasoning_text, int(w.filler_words)],
                       "rollout": dataclasses.asdict(rcfg), "vocab": len(tok), "probe": probe,
                       "probe_ids": tok.encode(probe + "</think><answer>Up || Left</answer>"),
                       "eos": [int(i) for i in tok.eos_token_ids], "pad": int(tok.pad_token_id)},
                      sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _load_cached_demos(path: str) -> DemoRows | None:
    """The rows cached at `path`, or None when there are none or the file is damaged (it is then rebuilt)."""
    if not os.path.exists(path):
        return None
    try:
        rows = DemoRows.load(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # truncated, empty or foreign
        return None
    shapes = {rows.tokens.shape, rows.attention_mask.shape, rows.loss_mask.shape}
    return rows if len(shapes) == 1 and rows.tokens.ndim == 2 and rows.num_rows else None


def _save_cached_demos(rows: DemoRows, path: str) -> None:
    """Write rows to `path` atomically (a private temporary file, then a rename): a reader, another process or
    another host sharing the folder never sees a partial file. A cache that cannot be written is skipped."""
    tmp = path + f".{jax.process_index()}.{os.getpid()}.tmp.npz"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        rows.save(tmp)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs rebuilding; leave no partial file behind
        try:
            os.remove(tmp)
        except OSError:
            pass


def build_demos(trainer, num_demos: int | None = None) -> DemoRows:
    """Demonstration rows for the trainer's env and rollout format (oracle or random play is cached on disk)."""
    cfg, w = trainer.cfg, trainer.cfg.warmstart
    rcfg = trainer.rollout_cfg
    if w.source not in ("oracle", "random"):
        if not os.path.isfile(w.source):
            raise FileNotFoundError(f"config.warmstart.source={w.source!r} is neither 'oracle', 'random' nor a "
                                    f"JSONL file.")
        return load_jsonl_demos(w.source, trainer.tokenizer, rcfg)
    num = int(num_demos or w.num_demos)
    tok = trainer.tokenizer
    key = demo_cache_key(trainer, num)
    if key in _DEMO_MEMO:
        return _DEMO_MEMO[key]
    path = _demo_cache_path(key)
    rows = _load_cached_demos(path)
    if rows is not None:
        _DEMO_MEMO[key] = rows
        return rows
    episodes = oracle_demo_episodes(cfg.env.name, num, tok, rcfg, seed=int(w.seed), env_kwargs=dict(cfg.env.kwargs),
                                    reasoning_text=w.reasoning_text, random_actions=w.source == "random",
                                    reasoning=w.reasoning, filler_words=int(w.filler_words))
    rows = _DEMO_MEMO[key] = demo_rows(episodes, tok, rcfg)
    _save_cached_demos(rows, path)
    return rows


# ------------------------------------------------------------------------------ training
def train_sft(trainer, data: SFTData, *, steps: int, max_seconds: float = 0.0, log_every: int = 10,
              callback: Callable[[int, float], Any] | None = None) -> dict[str, float]:
    """Run SFT steps on trainer.actor.trainable in place; `callback(step, train_seconds)` after each.

    Stops after `steps` or once `max_seconds` (> 0) of step time is spent. Returns the last metrics
    and throughput: tokens/s counts every real row token (shared prefix included).
    """
    w = trainer.cfg.warmstart
    batch_size = min(int(w.batch_size), data.num_rows)
    micro = min(int(w.micro_batch_size or batch_size), batch_size)  # fewer demo rows than a micro-batch: one step
    batch_size = batch_size // micro * micro
    tx, schedule = sft_optimizer(w, steps)
    step_fn = make_sft_step(trainer.actor.graphdef, tx, micro)
    opt_state = tx.init(trainer.actor.trainable)
    prefix = jnp.asarray(data.prefix)
    rng = np.random.default_rng(int(w.seed))
    order, cursor = rng.permutation(data.num_rows), 0
    spent, tokens_seen, targets_seen, compile_s = 0.0, 0.0, 0.0, 0.0
    metrics: dict[str, float] = {}
    step, logged = 0, False
    bar = tqdm(range(1, steps + 1), desc="warm start", leave=False, dynamic_ncols=True,
               disable=not getattr(trainer, "is_main", True))
    for step in bar:
        if cursor + batch_size > len(order):
            order, cursor = rng.permutation(data.num_rows), 0
        rows = order[cursor:cursor + batch_size]
        cursor += batch_size
        batch = _place_batch(data.batch(rows), getattr(trainer, "mesh", None))
        t0 = time.perf_counter()
        trainer.actor.trainable, opt_state, out = step_fn(trainer.actor.trainable, opt_state,
                                                          trainer.actor.frozen, prefix, batch)
        out = jax.device_get(out)
        dt = time.perf_counter() - t0
        if step == 1:
            compile_s = dt  # the first call compiles; keep it out of throughput
        else:
            spent += dt
            tokens_seen += float(data.real_tokens[rows].sum())
            targets_seen += float(data.target_mask[rows].sum())
        metrics = {f"sft/{k}": float(v) for k, v in out.items()}
        metrics["sft/lr"] = float(schedule(step - 1))
        bar.set_postfix(loss=f"{metrics.get('sft/loss', float('nan')):.3f}")
        logged = step % log_every == 0 or step == 1
        if logged:
            trainer.monitor.scalars(metrics, step)
        if callback is not None:
            callback(step, spent + compile_s)
        if max_seconds and sharding.agree_any(spent + compile_s >= max_seconds):  # all hosts stop together
            break
    bar.close()
    if step and not logged:  # the last step's metrics, unless its step logged them (one point per step)
        trainer.monitor.scalars(metrics, step)
    metrics.update({"sft/steps": float(step), "sft/train_seconds": spent + compile_s,
                    "sft/compile_seconds": compile_s,
                    "sft/tokens_per_s": tokens_seen / max(spent, 1e-9),
                    "sft/trained_tokens_per_s": targets_seen / max(spent, 1e-9),
                    "sft/step_seconds": spent / max(step - 1, 1)})
    return metrics


def run_warmstart(trainer, num_demos: int | None = None, steps: int | None = None) -> dict[str, float]:
    """Behaviour-clone the trainer's policy on demonstrations; validate before and after.

    Logs `sft/*` to trainer.monitor and returns metrics incl. `val_success_before_warmstart` and
    `val_success_after_warmstart`. A KL reference policy, if the trainer has one, becomes the
    warm-started policy (RL's KL then anchors to it).
    """
    w = trainer.cfg.warmstart
    steps = int(steps if steps is not None else w.steps)
    success_key = f"val/{trainer.val_tag}/success"
    t0 = time.perf_counter()
    rows = build_demos(trainer, num_demos)
    data = prepare_sft_data(rows, share_prefix=bool(w.share_prefix))
    demo_s = time.perf_counter() - t0
    logger.info("Warm-start: %d demo rows (shared prefix %d tokens, suffix width %d) in %.1f s.",
                data.num_rows, len(data.prefix), data.tokens.shape[1], demo_s)
    before, _ = trainer.run_validation(0)
    last_val: dict[int, tuple] = {}  # the latest in-run validation: {step: (metrics, episodes)}

    def validate(step: int, spent: float) -> None:
        if w.val_every and step % w.val_every == 0 and step < steps:
            vm, episodes = trainer.run_validation(0)
            last_val.clear()
            last_val[step] = (vm, episodes)
            trainer.monitor.scalars({f"sft/{k}": v for k, v in vm.items()}, step)
            logger.info("Warm-start step %d (%.0f s): val success %.3f.", step, spent, vm.get(success_key, 0.0))

    trainer.monitor.scalars({f"sft/{k}": v for k, v in before.items()}, 0)
    metrics = train_sft(trainer, data, steps=steps, max_seconds=float(w.max_seconds), callback=validate)
    last = int(metrics["sft/steps"])
    if last in last_val:  # max_seconds ended the warm start right after a validation: the same weights
        after, after_episodes = last_val[last]
    else:
        after, after_episodes = trainer.run_validation(0)
        trainer.monitor.scalars({f"sft/{k}": v for k, v in after.items()}, last)
    if getattr(trainer, "is_main", False):
        trainer.warmstart_jsonl = write_jsonl(os.path.join(trainer.workdir, "rollouts", "val_after_warmstart.jsonl"),
                                              after_episodes, **trainer._dump_kwargs())
    trainer.monitor.flush()
    trainer.reset_reference()
    metrics.update({"sft/num_rows": float(data.num_rows), "sft/demo_seconds": demo_s,
                    "val_success_before_warmstart": float(before.get(success_key, 0.0)),
                    "val_success_after_warmstart": float(after.get(success_key, 0.0))})
    metrics.update({f"val_after_warmstart/{k[4:]}": v for k, v in after.items()})
    logger.info("Warm-start: %d steps in %.0f s, loss %.3f, token accuracy %.3f, val success %.3f -> %.3f.",
                metrics["sft/steps"], metrics["sft/train_seconds"], metrics["sft/loss"],
                metrics["sft/token_accuracy"], metrics["val_success_before_warmstart"],
                metrics["val_success_after_warmstart"])
    return metrics
