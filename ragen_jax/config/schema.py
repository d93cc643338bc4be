"""One schema for a run's config: `RunConfig`, built from the command line's ml_collections config in one place.

`default_config()` is the ml_collections config every config file starts from (configs/base.py), made from the
sections' defaults, so each default is held once. `RunConfig.from_config(cfg)` checks the config (every problem at
once, in config keys) and returns the typed sections that the trainer's stages take. The resolved config as the user
wrote it (`RunConfig.raw`) is what a run folder's config.json keeps.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import ml_collections

from ragen_jax.config import sections as s
from ragen_jax.config.algo import AlgoSection
from ragen_jax.config.checks import config_problems
from ragen_jax.config.fields import field_problems, section
from ragen_jax.errors import ConfigError
from ragen_jax.filtering import FilterConfig


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run's whole config, typed. Build it with `from_config` (which validates); sections are frozen."""

    model: s.ModelSection = section(s.ModelSection)
    env: s.EnvSection = section(s.EnvSection)
    val: s.ValSection = section(s.ValSection)
    rollout: s.RolloutSection = section(s.RolloutSection)
    filter: FilterConfig = section(FilterConfig)
    algo: AlgoSection = section(AlgoSection)
    optim: s.OptimSection = section(s.OptimSection)
    trainer: s.TrainerSection = section(s.TrainerSection)
    diagnostics: s.DiagnosticsSection = section(s.DiagnosticsSection)
    warmstart: s.WarmstartSection = section(s.WarmstartSection)
    logging: s.LoggingSection = section(s.LoggingSection)
    mesh: s.MeshSection = section(s.MeshSection)
    distributed: s.DistributedSection = section(s.DistributedSection)
    workdir: str = "runs/default"
    # the config as given (plain dicts): what config.json, the hparams and --print_config show
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: Any, mode: str = "train") -> "RunConfig":
        """The typed config of `cfg` (an ml_collections config, a RunConfig, or a plain nested dict), checked as
        `mode` ("train", "eval" or "sft") runs it; ConfigError lists every problem."""
        if isinstance(cfg, RunConfig):
            cfg = cfg.raw
        raw = to_plain(cfg)
        run, problems = _build(raw)
        if not problems or not problems[0].endswith(f"({', '.join(FREE_FORM)} takes any)"):  # known keys only
            problems += config_problems(run, raw, mode)
        if len(problems) == 1:
            raise ConfigError(f"Invalid config: {problems[0]}")
        if problems:
            raise ConfigError("Invalid config:\n  - " + "\n  - ".join(problems))
        return run

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with dotted keys changed ("model.path": ...), its raw config alike (not re-checked)."""
        raw = to_plain(self.raw)
        for key, value in changes.items():
            *parents, last = key.split(".")
            node = raw
            for part in parents:
                node = node[part]
            node[last] = value
        run, problems = _build(raw)
        if problems:
            raise ConfigError("Invalid config:\n  - " + "\n  - ".join(problems))
        return run

    def to_config_dict(self) -> ml_collections.ConfigDict:
        """The ml_collections config this run was built from (its raw values)."""
        return as_config_dict(self.raw)


FREE_FORM = ("env.kwargs", "val.env_kwargs")  # sections whose keys are the user's (an env's constructor arguments)


def to_plain(cfg: Any) -> dict:
    """An ml_collections config (or a mapping of them) as plain nested dicts."""
    if isinstance(cfg, ml_collections.ConfigDict):
        cfg = cfg.to_dict()
    return {k: to_plain(v) if isinstance(v, (Mapping, ml_collections.ConfigDict)) else v for k, v in cfg.items()}


def _build(raw: dict) -> tuple[RunConfig, list[str]]:
    """(the RunConfig of plain dict `raw`, the keys it has that the schema lacks and the entries that break their
    own rules); the RunConfig has defaults wherever raw is silent."""
    problems = _unknown_keys(raw, default_plain())
    if problems:
        return RunConfig(raw=raw), problems
    run = _instance(RunConfig, raw, "")
    run = dataclasses.replace(run, raw=raw)
    problems = []
    for f in dataclasses.fields(RunConfig):
        value = getattr(run, f.name)
        if dataclasses.is_dataclass(value) and f.name != "filter":  # FilterConfig checks itself (config_problems)
            problems += field_problems(value, f.name)
    return run, problems


def _instance(cls: type, values: Mapping, path: str) -> Any:
    """`cls` built from `values`, nested sections recursively; the filter section through its own constructor."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values or f.name == "raw":
            continue
        value = values[f.name]
        kind = _section_type(cls, f.name)
        if kind is FilterConfig:
            kwargs[f.name] = _filter(value)
        elif kind is not None:
            kwargs[f.name] = _instance(kind, value, f"{path}{f.name}.")
        else:
            kwargs[f.name] = dict(value) if isinstance(value, Mapping) else value
    return cls(**kwargs)


def _filter(values: Mapping) -> FilterConfig:
    """The filter section; values it refuses are reported by `config_problems`, so here they fall back to the
    defaults (the RunConfig must still be built to find the other problems)."""
    try:
        return FilterConfig.from_mapping(dict(values))
    except ValueError:
        return FilterConfig()


_SECTION_TYPES: dict[tuple[type, str], type] = {}


def _section_type(cls: type, name: str) -> type | None:
    """The dataclass type of `cls`'s field `name` when it is a nested section, else None."""
    key = (cls, name)
    if key not in _SECTION_TYPES:
        default = next(f for f in dataclasses.fields(cls) if f.name == name)
        value = default.default_factory() if default.default_factory is not dataclasses.MISSING else default.default
        _SECTION_TYPES[key] = type(value) if dataclasses.is_dataclass(value) else None
    return _SECTION_TYPES[key]


def _unknown_keys(given: Mapping, reference: Mapping, prefix: str = "") -> list[str]:
    """Keys a config sets that the schema does not have (a typo there would be ignored silently; on the command
    line ml_collections already refuses them)."""
    import difflib

    errors = []
    for key in given:
        path = f"{prefix}{key}"
        if path in FREE_FORM:
            continue
        if key not in reference:
            close = difflib.get_close_matches(key, list(reference), n=1)
            hint = f" (did you mean config.{prefix}{close[0]}?)" if close else ""
            errors.append(f"config.{path} is not a config key{hint}: a config file sets only the keys configs/base.py "
                          f"defines ({', '.join(FREE_FORM)} takes any)")
        elif isinstance(given[key], Mapping) and isinstance(reference[key], Mapping):
            errors += _unknown_keys(given[key], reference[key], f"{path}.")
    return errors


def _defaults_as_dict(obj: Any) -> Any:
    """A section's defaults as plain nested dicts (the filter section in its config keys)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _defaults_as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "raw"}
    return dict(obj) if isinstance(obj, Mapping) else obj


def default_plain() -> dict:
    """Every entry's default as plain nested dicts (RAGEN's `_2_sokoban` run)."""
    return _defaults_as_dict(RunConfig())


def as_config_dict(plain: Mapping) -> ml_collections.ConfigDict:
    """Plain nested dicts as an ml_collections config; the free-form sections (env kwargs) stay open to new keys."""
    cfg = ml_collections.ConfigDict()
    for key, value in plain.items():
        cfg[key] = as_config_dict(value) if isinstance(value, Mapping) else value
    return cfg


def default_config() -> ml_collections.ConfigDict:
    """The config every config file starts from: each entry at its default."""
    return as_config_dict(default_plain())
