"""The policy the offline diagnostics score with: a Hugging Face folder, or a run folder (workdir).

A run folder gives its `hf_export/` (written at the end of training) when present, else the policy of
its latest Orbax checkpoint under `checkpoints/`, rebuilt from the run's `config.json` the way the
trainer builds it (the model from `config.model`, then the checkpoint's trainable weights).
"""

from __future__ import annotations

import glob
import json
import os
from ragen_jax.errors import MissingFileError
from typing import Any


def is_hf_folder(path: str) -> bool:
    """A folder with a model config and safetensors weights."""
    return os.path.isfile(os.path.join(path, "config.json")) and bool(
        glob.glob(os.path.join(path, "*.safetensors")) or os.path.isfile(
            os.path.join(path, "model.safetensors.index.json")))


def resolve_policy(path: str) -> tuple[str, str]:
    """(kind, folder): ("hf", a Hugging Face folder) or ("orbax", a run folder with checkpoints)."""
    if not os.path.isdir(path):
        raise MissingFileError(f"--checkpoint {path!r} is not a folder; pass a Hugging Face model folder "
                                "or a run folder (the --workdir of a training run).")
    if is_hf_folder(path):
        return "hf", path
    export = os.path.join(path, "hf_export")
    if is_hf_folder(export):
        return "hf", export
    if os.path.isdir(os.path.join(path, "checkpoints")) and _latest_step(os.path.join(path, "checkpoints")) is not None:
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise MissingFileError(f"Run folder {path!r} has checkpoints but no config.json to rebuild the "
                                    "model from; pass its hf_export/ or a Hugging Face folder instead.")
        return "orbax", path
    raise MissingFileError(
        f"--checkpoint {path!r} is neither a Hugging Face model folder (config.json + *.safetensors) nor a "
        "run folder with hf_export/ or checkpoints/. A run writes hf_export/ at the end of training "
        "(config.trainer.export_hf) and checkpoints every config.trainer.save_every steps.")


def _latest_step(directory: str) -> int | None:
    steps = [int(d) for d in os.listdir(directory) if d.isdigit() and os.path.isdir(os.path.join(directory, d))]
    return max(steps) if steps else None


def load_policy(path: str, step: int | None = None) -> tuple[Any, Any, str]:
    """(model, tokenizer, description of what was loaded) for `--checkpoint path`; `step` picks a checkpoint of a
    run folder (default: its hf_export/, else its latest checkpoint)."""
    if step is not None:
        pick_checkpoint(path, step)
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise MissingFileError(f"Run folder {path!r} has checkpoints but no config.json to rebuild the model "
                                   "from.")
        return _load_from_orbax(path, step)
    kind, folder = resolve_policy(path)
    if kind == "hf":
        from ragen_jax.models import from_pretrained

        model, tokenizer = from_pretrained(folder)
        return model, tokenizer, f"Hugging Face folder {folder}"
    return _load_from_orbax(folder)


def pick_checkpoint(run_dir: str, step: int | None) -> int:
    """Checkpoint `step` of a run folder if it holds it, else (None) its latest; a clear error otherwise."""
    directory = os.path.join(run_dir, "checkpoints")
    saved = sorted(int(d) for d in os.listdir(directory) if d.isdigit()) if os.path.isdir(directory) else []
    if not saved:
        raise MissingFileError(f"{run_dir!r} has no checkpoints/ to load (a run saves every "
                               "config.trainer.save_every steps).")
    if step is None:
        return saved[-1]
    if step not in saved:
        raise MissingFileError(f"{run_dir!r} holds no checkpoint {step}; it holds {saved}.")
    return step


def checkpoint_meta(run_dir: str, step: int) -> dict:
    """The JSON metadata the trainer saved with checkpoint `step` (its state, the diagnostics' EMA, whether the KL
    reference is saved)."""
    from ragen_jax.checkpoint import Checkpointer

    checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"), max_to_keep=None)
    try:
        return checkpointer.restore_meta(step)
    finally:
        checkpointer.close()


def _load_from_orbax(run_dir: str, step: int | None = None) -> tuple[Any, Any, str]:
    """The policy of a checkpoint of the run (default its latest): the config's model with the checkpoint's
    trainable part."""
    import jax
    import ml_collections
    import orbax.checkpoint as ocp
    from flax import nnx

    from ragen_jax.trainer.setup import load_policy_and_tokenizer, split_model

    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    directory = os.path.abspath(os.path.join(run_dir, "checkpoints"))
    step = pick_checkpoint(run_dir, step)
    policy, tokenizer = load_policy_and_tokenizer(cfg.model)
    model = split_model(policy, cfg.model.lora.rank > 0)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), model.trainable)
    restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=jax.sharding.SingleDeviceSharding(
        jax.devices()[0])), abstract)
    try:
        state = ocp.PyTreeCheckpointer().restore(
            os.path.join(directory, str(step), "state"),
            args=ocp.args.PyTreeRestore(item={"actor": abstract}, restore_args={"actor": restore_args},
                                        partial_restore=True))
    except Exception as e:  # noqa: BLE001 - damaged, cut short or another model's: the same advice
        from ragen_jax.checkpoint import unreadable_checkpoint
        from ragen_jax.models import CheckpointError

        raise CheckpointError(unreadable_checkpoint(directory, step, e)) from e
    module = nnx.merge(model.graphdef, state["actor"], model.frozen)
    if cfg.model.lora.rank > 0:
        from ragen_jax.models import merge_lora

        module = merge_lora(module)
    return module, tokenizer, f"checkpoint {step} of {run_dir} (model from its config.json)"
