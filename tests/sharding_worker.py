"""Runs sharding cases on 8 forced CPU devices and saves the results: `python tests/sharding_worker.py MODE OUT`.

Started by tests/test_sharding_devices.py in a subprocess with XLA_FLAGS set before jax is imported.
MODE: placement (per-device shard shapes) | train | generate (results per mesh and on one device).
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np

import sharding_testlib as L
from ragen_jax.models import init_cache
from ragen_jax.sharding import make_mesh, place_for_training, reshard_for_sampling, shard_batch, shard_cache
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
            json.dump(placement(), f)
    elif mode == "train":
        res = equivalence(L.train_step)
        lora = L.train_step(None, lora=True)
        res.update({f"single_lora/{k}": v for k, v in lora.items()})
        res.update({f"(2, 2, 2)_lora/{k}": v for k, v in L.train_step((2, 2, 2), lora=True).items()})
        np.savez(path, **res)
    elif mode == "generate":
        np.savez(path, **equivalence(L.generate))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
