"""A run folder's config.json: written at the start of a run, read back by eval, diagnostics and resume, which
continue from the run's own config and show a command line's overrides as changes to it."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from ragen_jax.config.schema import RunConfig, as_config_dict, to_plain
from ragen_jax.errors import ConfigError

# keys a resume changes by design (resume itself) or that do not steer the run (where it writes)
RESUME_FREE_KEYS = ("trainer.resume", "workdir")


def resolved_config(run: RunConfig) -> str:
    """The whole resolved config as JSON text (what config.json gets)."""
    return as_config_dict(run.raw).to_json_best_effort(indent=2, sort_keys=True)


def write_config_json(folder: str, run: RunConfig, custom_functions: Mapping[str, str]) -> str:
    """folder/config.json: the resolved config, plus the custom functions it names (module:name and file)."""
    os.makedirs(folder, exist_ok=True)
    data = json.loads(resolved_config(run))
    data["custom_functions"] = dict(custom_functions)
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    return path


def read_config_json(folder: str) -> dict | None:
    """The config a run folder's config.json holds (plain dicts, without `custom_functions`), or None when it
    has none or it cannot be read."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data.pop("custom_functions", None)
    return data


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model.lora.rank": 0, ...} from a nested mapping."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_changes(before: Mapping, after: Mapping, limit: int = 12, free: tuple[str, ...] = RESUME_FREE_KEYS
                   ) -> list[str]:
    """"key: before -> after" for each setting that differs between two resolved configs (config.json's
    contents), except the `free` keys and `custom_functions`; at most `limit` lines and a count of the rest."""
    old, new = (flatten({k: v for k, v in c.items() if k != "custom_functions"}) for c in (before, after))
    shown = lambda flat, k: repr(flat[k]) if k in flat else "(absent)"  # noqa: E731
    changes = [f"{k}: {shown(old, k)} -> {shown(new, k)}" for k in sorted(old.keys() | new.keys())
               if k not in free and (k in old, old.get(k)) != (k in new, new.get(k))]
    return changes[:limit] + ([f"... and {len(changes) - limit} more"] if len(changes) > limit else [])


def resumed_config_warning(folder: str, run: RunConfig) -> str | None:
    """What a resume changes against the config the run last ran with (folder/config.json), or None when
    nothing does (or no config.json is there)."""
    before = read_config_json(folder)
    if before is None:
        return None
    changes = config_changes(before, json.loads(resolved_config(run)))
    if not changes:
        return None
    path = os.path.join(folder, "config.json")
    return (f"This resume's config differs from the one the run in {folder} last ran with ({path}): "
            f"{'; '.join(changes)}. The resumed steps follow the new values, so they do not continue the run as it "
            "would have gone on (a changed trainer.total_steps also stretches a warmup or cosine lr schedule). "
            "config.json now holds the new config. Give the old values on the command line to continue as before.")


def overrides_of(argv: list[str]) -> dict[str, str]:
    """The `--config.KEY=VALUE` overrides of a command line, as {KEY: VALUE text} in their order."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--config.") and "=" in arg:
            key, value = arg[len("--config."):].split("=", 1)
            out[key] = value
        elif arg.startswith("--config.") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[arg[len("--config."):]] = argv[i + 1]
    return out


def run_config_with_overrides(folder: str, given: Any, argv: list[str], mode: str) -> tuple[RunConfig | None,
                                                                                              list[str]]:
    """The run's own config (folder/config.json) with the command line's explicit `--config.K=V` overrides applied
    as `given` resolved them -> (its RunConfig, "key: run's -> override" lines); (None, []) when the folder holds
    no config.json (the command line's config is used as it is)."""
    before = read_config_json(folder)
    if before is None:
        return None, []
    given_plain = to_plain(given)
    after = json.loads(json.dumps(before))
    for key in overrides_of(argv):
        node, source = after, given_plain
        *parents, last = key.split(".")
        try:
            for part in parents:
                node, source = node.setdefault(part, {}), source[part]
            node[last] = source[last]
        except (KeyError, TypeError):
            raise ConfigError(f"Invalid config: --config.{key} is not a key of the run's config ({folder}/config.json)")
    after["workdir"] = given_plain.get("workdir", after.get("workdir"))
    changes = config_changes(before, after, free=("workdir",))
    return RunConfig.from_config(after, mode), changes
