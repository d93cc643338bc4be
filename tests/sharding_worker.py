"""Runs sharding cases on 8 forced CPU devices and saves the results: `python tests/sharding_worker.py MODE OUT`.

Started by tests/test_sharding_devices.py in a subprocess with XLA_FLAGS set before jax is imported.
MODE: placement (per-device shard shapes) | train | generate (results per mesh and on one device) |
checkpoint (Orbax save of a sharded state, restore on the same and on another mesh) | config_errors
(the Trainer's errors for batch sizes and meshes that do not fit 8 devices) | validation_rows (the validation
batch the Trainer builds when val sizes do not split 8 ways) | update_collectives (the
collectives inside the compiled micro-batch scan of the actor and critic updates).
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import sharding_testlib as L
from ragen_jax.models import init_cache
from ragen_jax.sharding import (make_mesh, place_for_training, reshard_for_sampling, shard_batch, shard_cache,
                                shard_state)
from ragen_jax.sharding.rules import path_str


def _describe(tree) -> dict:
    out = {}
    for p, x in jax.tree_util.tree_leaves_with_path(tree):
        shards = {tuple(s.data.shape) for s in x.addressable_shards}
        distinct = len({str(s.index) for s in x.addressable_shards})
        out[path_str(p)] = dict(shape=list(x.shape), spec=str(x.sharding.spec), shard_shapes=[list(s) for s in shards],
                                distinct=distinct)
    return out


def placement() -> dict:
    result = {}
    for shape in L.MESHES:
        mesh = make_mesh(shape)
        name = str(shape)
        actor = place_for_training(L.make_actor(lora=True), mesh)
        result[name] = dict(trainable=_describe(actor.trainable), frozen=_describe(actor.frozen),
                            sampling=_describe(reshard_for_sampling(actor.full(), mesh)),
                            batch=_describe(shard_batch(L.synthetic_batch(), mesh)),
                            cache=_describe(shard_cache(init_cache(_config(), 8, 32), mesh)))
        try:
            shard_batch({"tokens": np.zeros((6, 4), np.int32)}, mesh)
            result[name]["bad_batch_error"] = ""
        except ValueError as e:
            result[name]["bad_batch_error"] = str(e)
    return result


def activation_hints() -> dict:
    """Sharding constraints in the lowered forward pass with and without an active (1, 4, 2) mesh."""
    actor = L.make_actor()
    params = actor.full()
    tokens = np.ones((8, 16), np.int32)

    def forward(p, t):
        from flax import nnx
        return nnx.merge(actor.graphdef, p)(t, jnp.broadcast_to(jnp.arange(16), t.shape))[0]

    def constraints(text: str) -> list[str]:
        """The dimension shardings of every sharding constraint, e.g. '[{"data", "fsdp"}, {}, {"tensor"}]'."""
        return [line.split("<@mesh, ", 1)[1].split(">", 1)[0] for line in text.splitlines()
                if "sharding_constraint" in line]

    mesh = make_mesh((1, 4, 2))
    without = constraints(jax.jit(forward).lower(params, tokens).as_text())
    with jax.set_mesh(mesh):
        placed = shard_state(params, mesh)
        within = constraints(jax.jit(forward).lower(placed, tokens).as_text())
        logits = jax.jit(forward)(placed, tokens)
    return dict(without=without, within=within, logits_spec=str(logits.sharding.spec))


def checkpoint(directory: str) -> dict:
    """Save a sharded actor + AdamW state on (2, 2, 2); restore it on (2, 2, 2) and onto (1, 8, 1)."""
    import optax

    from ragen_jax.checkpoint import Checkpointer

    mesh = make_mesh((2, 2, 2))
    actor = place_for_training(L.make_actor(), mesh)
    tx = optax.adamw(1e-3)
    state = {"actor": actor.trainable, "actor_opt": shard_state(tx.init(actor.trainable), mesh)}
    state["actor_opt"] = jax.tree.map(lambda x: x + 1 if jnp.issubdtype(x.dtype, jnp.floating) else x,
                                      state["actor_opt"])  # non-zero moments: a restore of zeros would not pass
    ckpt = Checkpointer(directory)
    ckpt.save(3, state, {"step": 3})
    want = L.to_host(state)
    result = {}
    for shape in ((2, 2, 2), (1, 8, 1)):
        target = make_mesh(shape)
        like = {"actor": place_for_training(L.make_actor(), target).trainable}
        like["actor_opt"] = shard_state(tx.init(like["actor"]), target)
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), like)
        restored, meta = ckpt.restore(ckpt.latest_step(), abstract)
        got = L.to_host(restored)
        pairs = zip(jax.tree.leaves(restored), jax.tree.leaves(abstract))
        same_layout = all(r.sharding == a.sharding for r, a in pairs)
        result[str(shape)] = dict(equal=all(np.array_equal(got[k], want[k]) for k in want), keys=len(want),
                                  same_layout=same_layout, meta=meta)
    bad = jax.tree.map(lambda x: x * np.nan if jnp.issubdtype(x.dtype, jnp.floating) else x, state)
    try:
        ckpt.save(4, bad, {"step": 4})
        result["nan_error"] = ""
    except FloatingPointError as e:
        result["nan_error"] = str(e)
    result["latest"] = ckpt.latest_step()
    ckpt.close()
    return result


def config_errors() -> dict:
    """The Trainer's error for each bad mesh / batch setting on 8 devices, and whether it came before the model."""
    from configs.base import apply_tiny, get_base_config
    from ragen_jax.trainer import setup as setup_lib
    from ragen_jax.trainer import Trainer

    def refuse(*args, **kwargs):
        raise AssertionError("the model was built before the config error")
    setup_lib.load_policy_and_tokenizer = refuse
    cases = {"rollout batch": dict(env=dict(groups=3, group_size=4)),
             "mini and micro": dict(trainer=dict(mini_batch_size=12, micro_batch_size=4)),
             "device count": dict(mesh=dict(data=3)), "two free axes": dict(mesh=dict(data=-1, fsdp=-1))}
    out = {}
    for name, override in cases.items():
        c = get_base_config()
        apply_tiny(c)
        c.env.name, c.env.groups, c.env.group_size = "SimpleSokoban", 2, 8
        c.trainer.mini_batch_size, c.trainer.micro_batch_size = 16, 8
        for section, values in override.items():
            c[section].update(values)
        try:
            Trainer(c, workdir="/nonexistent")
            out[name] = "no error"
        except Exception as e:  # noqa: BLE001 - the test reads the type and message
            out[name] = f"{type(e).__name__}: {e}"
    return out


def validation_rows() -> dict:
    """The rows the Trainer builds its validation env batch for (val.groups, val.group_size, val.batch_size) on 8
    devices (data=-1): the model is never loaded."""
    from configs.base import apply_tiny, get_base_config
    from ragen_jax.trainer import setup as setup_lib
    from ragen_jax.trainer import Trainer

    built = []

    def stop(*args, **kwargs):
        raise StopIteration  # the env batches are built: nothing more is needed

    setup_lib.env_batch = lambda env_cfg, name, rows, extra_kwargs=None: built.append(rows)
    setup_lib.load_policy_and_tokenizer = stop
    out = {}
    for groups, group_size, batch_size in ((3, 4, 12), (6, 1, 6), (4, 4, 16), (6, 2, 4)):
        c = get_base_config()
        apply_tiny(c)
        c.env.name, c.env.groups, c.env.group_size = "SimpleSokoban", 2, 8
        c.trainer.mini_batch_size, c.trainer.micro_batch_size = 16, 8
        c.val.groups, c.val.group_size, c.val.batch_size = groups, group_size, batch_size
        built.clear()
        try:
            Trainer(c, workdir="/nonexistent")
        except StopIteration:
            pass
        out[f"{groups}x{group_size} in {batch_size}"] = built[1]  # built[0]: the training envs
    return out


def _scan_body_collectives(text: str, fn: str) -> dict[str, int]:
    """Collective-permutes and all-to-alls (resharding) in the compiled HLO `text` inside the outermost while loop
    of jitted `fn` (the micro-batch scan) and every computation it calls, by kind; the embedding lookup's
    (`jit(_take)` on a table split over vocab and fsdp) are left out: they belong to that layout, not the batch's."""
    import re

    comps, name = {}, None
    for line in text.splitlines():
        head = re.match(r"(?:ENTRY )?(%[\w.\-]+) ", line)
        if head and line.rstrip().endswith("{"):
            name = head.group(1)
            comps[name] = []
        elif name is not None:
            comps[name].append(line)
    loop = [line for lines in comps.values() for line in lines
            if " while(" in line and f'op_name="jit({fn})/while"' in line]
    assert len(loop) == 1, f"expected one micro-batch scan in {fn}, found {len(loop)}"
    todo, seen = [re.search(r"body=(%[\w.\-]+)", loop[0]).group(1)], set()
    counts: dict[str, int] = {}
    while todo:
        comp = todo.pop()
        if comp in seen:
            continue
        seen.add(comp)
        for line in comps[comp]:
            todo += re.findall(r"(?:calls|body|condition|to_apply)=(%[\w.\-]+)", line)
            found = re.search(r"= \S+ (collective-permute|all-to-all)(-start)?\(", line)
            if found and "jit(_take)" not in line:
                counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


def update_collectives() -> dict:
    """Per mesh and update (actor, critic): the resharding collectives inside the compiled micro-batch scan."""
    import optax
    from flax import nnx
    from ragen_jax.models import ValueModel
    from ragen_jax.trainer.setup import split_model
    from ragen_jax.trainer.steps import make_step_fns

    tx = optax.sgd(0.5)
    batch = L.synthetic_batch()
    batch["returns"] = batch["values"] = batch["advantages"]
    out = {}
    for shape in ((8, 1, 1), (1, 4, 2), (2, 2, 2)):
        actor = L.make_actor()
        critic = split_model(ValueModel.from_causal_lm(nnx.merge(actor.graphdef, actor.trainable, actor.frozen),
                                                       rngs=nnx.Rngs(2)), False)
        fns = make_step_fns(actor.graphdef, critic.graphdef, L.algo(), tx, tx, L.MICRO)
        for name, model in (("actor", actor), ("critic", critic)):
            model, opt, placed, mesh = L.placed(model, tx, batch, shape)
            with jax.set_mesh(mesh):
                text = fns[f"{name}_update"].lower(model.trainable, opt, model.frozen, placed).compile().as_text()
            out[f"{shape} {name}"] = _scan_body_collectives(text, f"_{name}_update")
    return out


def _config():
    from ragen_jax.sampling import model_config_of
    return model_config_of(L.make_actor().graphdef)


def equivalence(fn) -> dict[str, np.ndarray]:
    out = {f"single/{k}": v for k, v in fn(None).items()}
    for shape in L.MESHES:
        out.update({f"{shape}/{k}": v for k, v in fn(shape).items()})
    return out


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    assert jax.device_count() == 8, f"expected 8 forced CPU devices, got {jax.device_count()}"
    if mode == "placement":
        with open(path, "w") as f:
            json.dump(dict(placement(), hints=activation_hints()), f)
    elif mode == "train":
        res = equivalence(L.train_step)
        lora = L.train_step(None, lora=True)
        res.update({f"single_lora/{k}": v for k, v in lora.items()})
        res.update({f"(2, 2, 2)_lora/{k}": v for k, v in L.train_step((2, 2, 2), lora=True).items()})
        res.update({f"single_critic/{k}": v for k, v in L.critic_step(None).items()})
        res.update({f"(2, 2, 2)_critic/{k}": v for k, v in L.critic_step((2, 2, 2)).items()})
        np.savez(path, **res)
    elif mode == "checkpoint":
        import os
        with open(path, "w") as f:
            json.dump(checkpoint(os.path.join(os.path.dirname(path), "ckpt")), f)
    elif mode == "config_errors":
        with open(path, "w") as f:
            json.dump(config_errors(), f)
    elif mode == "validation_rows":
        with open(path, "w") as f:
            json.dump(validation_rows(), f)
    elif mode == "update_collectives":
        with open(path, "w") as f:
            json.dump(update_collectives(), f)
    elif mode == "generate":
        np.savez(path, **equivalence(L.generate))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
