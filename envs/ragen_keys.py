"""RAGEN's `env_config` keys (config/envs.yaml, ragen/env/*/config.py) accepted in `config.env.kwargs`.

An env class lists the RAGEN keys it understands in a `ragen_keys` class attribute (a `RagenKeys`);
`translate` rewrites one layer of kwargs (a variant's, the user's env.kwargs, val.env_kwargs) to our argument
names, so a RAGEN name given by the user replaces the variant's value under our name. Both names of one setting
given in one layer with different values, a RAGEN key we do not implement, and RAGEN's process-layout keys are
refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

# custom_envs keys that only size RAGEN's process pools; envs here run in one process (threads for host envs).
PROCESS_KEYS = ("max_workers", "parallel_friendly")
_PROCESS_REASON = ("only sizes RAGEN's env worker pool (one Python process per env group); ragen-jax steps JAX envs "
                   "as one vmapped batch and host envs in threads of the trainer, so it has no equivalent: remove it")


@dataclasses.dataclass(frozen=True)
class RagenKeys:
    """How an env reads RAGEN's env_config keys.

    renames: RAGEN name -> our argument with the same meaning and form.
    fixed: RAGEN name -> (RAGEN's default, the only value we implement; what to use instead of other values).
    unsupported: RAGEN name -> what ragen-jax offers instead (the key is refused).
    convert: env-specific forms (e.g. Sokoban's dim_x/dim_y), run after the checks above on the layer's dict;
    converted: the RAGEN keys `convert` reads (for messages and docs)."""

    renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, tuple[Any, str]] = dataclasses.field(default_factory=dict)
    unsupported: Mapping[str, str] = dataclasses.field(default_factory=dict)
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    converted: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """Every RAGEN key this env reads (accepted or refused by name)."""
        return sorted({*self.renames, *self.fixed, *self.unsupported, *self.converted})


def plain(value: Any) -> Any:
    """A config value as plain Python: mappings (ConfigDict too) -> dict with digit-string keys as ints, tuples ->
    lists."""
    if isinstance(value, Mapping) or hasattr(value, "to_dict"):
        items = value.to_dict().items() if hasattr(value, "to_dict") else value.items()
        return {(int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k): plain(v) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def take_one(kwargs: dict[str, Any], ours: str, ragen: str, ragen_value: Any, env: str) -> None:
    """Put `ragen_value` (RAGEN's `ragen` key, already in our form) under `ours`; refuse both given, differing."""
    if ours in kwargs and plain(kwargs[ours]) != plain(ragen_value):
        raise ValueError(f"{env}: {ours}={kwargs[ours]!r} and RAGEN's {ragen} (= {ours}={ragen_value!r}) set the same "
                         f"setting to different values; give one of them")
    kwargs[ours] = ragen_value


def translate(keys: RagenKeys | None, kwargs: Mapping[str, Any], env: str) -> dict[str, Any]:
    """One layer of env kwargs with RAGEN's names rewritten to ours (ours pass unchanged); ValueError names a RAGEN
    key that does not apply or contradicts ours."""
    out = dict(kwargs)
    for key in PROCESS_KEYS:
        if key in out:
            raise ValueError(f"{env}: {key} is a key of RAGEN's custom_envs entry that {_PROCESS_REASON}.")
    if keys is None:
        return out
    for key, offer in keys.unsupported.items():
        if key in out:
            raise ValueError(f"{env}: RAGEN's env_config key {key}={out[key]!r} is not implemented in ragen-jax; "
                             f"{offer}.")
    for key, (default, offer) in keys.fixed.items():
        if key in out:
            value = out.pop(key)
            if plain(value) != plain(default):
                raise ValueError(f"{env}: RAGEN's env_config key {key}={value!r} is not supported: ragen-jax "
                                 f"implements only RAGEN's default {default!r}; {offer}.")
    if keys.convert is not None:
        out = keys.convert(out)
    for ragen, ours in keys.renames.items():
        if ragen in out:
            take_one(out, ours, ragen, out.pop(ragen), env)
    return out


def observation_format(kwargs: dict[str, Any], env: str) -> dict[str, Any]:
    """RAGEN's render_mode ("text") + observation_format ("grid" | "coord" | "grid_coord") -> our render_mode."""
    if kwargs.get("render_mode") == "rgb_array":
        raise ValueError(f"{env}: render_mode='rgb_array' (RAGEN's image observations) is not implemented in "
                         "ragen-jax, whose envs render text; use observation_format 'grid', 'coord' or 'grid_coord'")
    if "observation_format" not in kwargs:
        return kwargs
    fmt = kwargs.pop("observation_format")
    if fmt not in ("grid", "coord", "grid_coord"):
        raise ValueError(f"{env}: unsupported observation_format {fmt!r} (RAGEN's check): use 'grid', 'coord' or "
                         "'grid_coord'")
    if kwargs.get("render_mode", "text") == "text":  # RAGEN's render_mode "text" renders observation_format
        kwargs["render_mode"] = fmt
    take_one(kwargs, "render_mode", "observation_format", fmt, env)
    return kwargs
