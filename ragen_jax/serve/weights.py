"""The weights a server answers with: a training run's latest checkpoint (or its `hf_export/`), an Orbax step folder
or a Hugging Face folder, resolved as `run.py --mode=eval --checkpoint=...` resolves them (`eval_target`)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx

from ragen_jax.models import CheckpointError, Tokenizer, load_model, load_tokenizer, merge_lora
from ragen_jax.trainer.evaluate import EvalTarget, eval_target


@dataclasses.dataclass
class Served:
    """A model ready for the sampler: (graphdef, params), its tokenizer, the name clients call it by, and what it is."""

    graphdef: Any
    params: Any
    tokenizer: Tokenizer
    name: str
    source: str


def resolve(checkpoint: str) -> EvalTarget:
    """The Orbax step or Hugging Face folder `checkpoint` names (a run folder: its latest checkpoint, else its
    hf_export/); FileNotFoundError says what was expected."""
    if checkpoint == "init":
        raise FileNotFoundError("--checkpoint=init serves no trained weights; give a run folder, an Orbax step folder "
                                "or a Hugging Face folder.")
    return eval_target(checkpoint, checkpoint)


def default_name(target: EvalTarget) -> str:
    """The model id clients send: the run's folder name (with the step of an Orbax checkpoint), or the HF folder's."""
    if target.kind == "orbax":
        return f"{os.path.basename(os.path.dirname(target.path))}-step{target.step}"
    folder = target.path.rstrip(os.sep)
    base = os.path.basename(folder)
    return os.path.basename(os.path.dirname(folder)) if base == "hf_export" else base


def load_served(checkpoint: str, name: str | None = None) -> Served:
    """Load what `checkpoint` names (see `resolve`); LoRA adapters are merged into the weights."""
    target = resolve(checkpoint)
    if target.kind == "hf":
        tokenizer = load_tokenizer(target.path)
        model = load_model(target.path)
        source = f"Hugging Face folder {target.path}"
    else:
        model, tokenizer = load_orbax_policy(target.path, target.step)
        source = target.describe()
    graphdef, params = nnx.split(model)
    return Served(graphdef, params, tokenizer, name or default_name(target), source)


def load_orbax_policy(checkpoints: str, step: int):
    """(policy model, tokenizer) of Orbax checkpoint `step` in a run's checkpoints folder: the model its run's
    config.json describes (model.*), with the checkpoint's actor weights (only those are read)."""
    import ml_collections

    from ragen_jax.trainer.setup import load_policy_and_tokenizer, split_model

    config_path = os.path.join(os.path.dirname(os.path.abspath(checkpoints)), "config.json")
    try:
        with open(config_path) as f:
            model_cfg = ml_collections.ConfigDict(json.load(f)["model"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"Serving Orbax checkpoint {step} needs its run's config.json (with a 'model' section) "
                              f"at {config_path} ({type(e).__name__}: {e}); serve the run's hf_export/ instead, or "
                              "export one.") from None
    model, tokenizer = load_policy_and_tokenizer(model_cfg)
    lora = model_cfg.lora.rank > 0
    split = split_model(model, lora)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), split.trainable)
    folder = os.path.join(checkpoints, str(step), "state")
    try:
        restored = ocp.PyTreeCheckpointer().restore(folder, args=ocp.args.PyTreeRestore(
            item={"actor": abstract}, restore_args=ocp.checkpoint_utils.construct_restore_args({"actor": abstract}),
            partial_restore=True))
    except Exception as e:  # noqa: BLE001 - Orbax's errors vary by cause; the fix is the same
        raise CheckpointError(f"Could not read the actor weights of {folder} into the model {config_path} describes "
                              f"({type(e).__name__}: {e}). Serve the run's hf_export/ instead.") from e
    model = nnx.merge(split.graphdef, restored["actor"], split.frozen)
    return (merge_lora(model) if lora else model), tokenizer
