"""Environments by name, with RAGEN's variant names and parameters.

An entry names a factory by import path (imported only when the env is made, so optional
dependencies of one env never break another) and the keyword arguments of that variant.
Users add their own with `register("MyEnv", MyEnvClass, kind="host", size=3)`, or name one by import
path ("my_pkg.envs:MyEnv") wherever an env name is taken.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import traceback
from typing import Any, Callable, Literal

EnvKind = Literal["jax", "host"]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """A registered environment: `factory(**kwargs)` builds one env instance."""

    name: str
    factory: str | Callable[..., Any]  # "package.module:ClassName" or a callable
    kind: EnvKind
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    prompt_max_tokens: int | None = None  # RAGEN's envs.yaml `max_tokens`: the prompts' "Max response length"

    def resolve_factory(self) -> Callable[..., Any]:
        if callable(self.factory):
            return self.factory
        module_name, _, attr = self.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ImportError(
                f"Environment {self.name!r} needs module {module_name!r}, which failed to import: "
                f"{e}. Install that environment's optional dependencies."
            ) from e
        except Exception as e:  # noqa: BLE001 - the module's own code failed: named, not a bare traceback
            raise ImportError(f"Environment {self.name!r}: {import_failure(module_name, e)}") from e
        if not hasattr(module, attr):
            raise ImportError(f"Environment {self.name!r}: module {module_name!r} has no {attr!r} (its factory "
                              f"{self.factory!r}); fix the name it was registered with.")
        return getattr(module, attr)


def import_failure(module_name: str, error: BaseException) -> str:
    """What went wrong while a module's own code ran at import (not a missing module), with where it was raised."""
    if isinstance(error, SyntaxError):
        where = f"{error.filename}:{error.lineno}"
    else:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{frame.filename}:{frame.lineno}"
    return (f"importing module {module_name!r} raised {type(error).__name__}: {error} (at {where}). Fix that "
            "module so that `import` of it runs.")


_REGISTRY: dict[str, EnvSpec] = {}


def register(
    name: str,
    factory: str | Callable[..., Any],
    *,
    kind: EnvKind,
    overwrite: bool = False,
    prompt_max_tokens: int | None = None,
    **kwargs: Any,
) -> EnvSpec:
    """Register an environment variant under `name` (kind "jax" for JaxEnv, "host" for HostEnv); its prompts state
    "Max response length: {prompt_max_tokens}" (None: rollout.response_length)."""
    if kind not in ("jax", "host"):
        raise ValueError(f"kind must be 'jax' or 'host', got {kind!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"Environment {name!r} is already registered; pass overwrite=True to replace it.")
    spec = EnvSpec(name=name, factory=factory, kind=kind, kwargs=dict(kwargs), prompt_max_tokens=prompt_max_tokens)
    _REGISTRY[name] = spec
    return spec


def spec_from_import_path(path: str) -> EnvSpec:
    """An env given as "package.module:ClassName" (a JaxEnv or HostEnv subclass, or an EnvSpec object),
    so `--config.env.name=my_pkg.envs:GuessNumber` works without registering it first."""
    from envs.protocols import HostEnv, JaxEnv

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise KeyError(f"Environment {path!r}: an import path reads 'package.module:ClassName'.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        if missing and missing != module_name and not module_name.startswith(missing + "."):
            raise KeyError(f"Environment {path!r}: module {module_name!r} imports {missing!r}, which is not "
                           f"installed ({e}). Install it in this environment (pip install ...).") from None
        raise KeyError(f"Environment {path!r}: module {module_name!r} failed to import ({e}). Put its folder "
                       "on PYTHONPATH (run.py adds the current directory) or install it.") from None
    except Exception as e:  # noqa: BLE001 - the module exists but its code fails: say so, and where
        raise KeyError(f"Environment {path!r}: {import_failure(module_name, e)}") from e
    if not hasattr(module, attr):
        raise KeyError(f"Environment {path!r}: module {module_name!r} ({module.__file__}) has no {attr!r}; define "
                       f"that class there or fix the name after the colon.")
    target = getattr(module, attr)
    if isinstance(target, EnvSpec):
        return target
    if isinstance(target, type) and issubclass(target, (JaxEnv, HostEnv)):
        problem = env_class_problem(target, path)
        if problem:
            raise KeyError(problem)
        return EnvSpec(name=path, factory=target, kind="jax" if issubclass(target, JaxEnv) else "host")
    raise KeyError(f"Environment {path!r}: {module_name}.{attr} is a {type(target).__name__}; it must be a JaxEnv "
                   "or HostEnv subclass (envs.protocols) or an envs.registry.EnvSpec.")


def env_class_problem(cls: type, name: str) -> str | None:
    """What env class `cls` (registered or imported as `name`) still has to define, as an error message; None if
    nothing."""
    from envs.protocols import JaxEnv, missing_methods

    missing = missing_methods(cls)
    if not missing:
        return None
    base = "JaxEnv" if issubclass(cls, JaxEnv) else "HostEnv"
    return (f"Environment {name!r}: {cls.__module__}.{cls.__qualname__} does not define {'; '.join(missing)}. "
            f"A {base} needs them all (docs/custom_envs.md).")


OPENENV_PREFIX = "openenv:"


def openenv_spec(name: str) -> EnvSpec:
    """An OpenEnv environment by URL ("openenv:http://127.0.0.1:8000"): a host env whose episodes run on that server
    through OpenEnv's client (envs.openenv.client); its kwargs (action_field, observation_field, timeout_s) come
    from env.kwargs."""
    url = name[len(OPENENV_PREFIX):]
    if not url.startswith("http://"):
        raise KeyError(f"Environment {name!r}: give the OpenEnv server's http:// URL after 'openenv:', e.g. "
                       "openenv:http://127.0.0.1:8000.")
    return EnvSpec(name=name, factory="envs.openenv.client:OpenEnvHostEnv", kind="host", kwargs={"url": url})


def get_spec(name: str) -> EnvSpec:
    """The spec of a registered env, of an OpenEnv server's URL ("openenv:http://HOST:PORT") or of an import path
    ("package.module:ClassName"), or a clear error."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name.startswith(OPENENV_PREFIX):
        return openenv_spec(name)
    if ":" in name:
        return spec_from_import_path(name)
    import difflib

    by_lower = {known.lower(): known for known in _REGISTRY}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
    raise KeyError(f"Unknown environment {name!r}{hint}. Registered: {', '.join(sorted(_REGISTRY))}. A name given "
                   "to envs.register exists once the module that registers it is imported (with run.py: import it "
                   "in the config file); or give an import path, e.g. my_pkg.envs:MyEnv.")


def registered_names() -> list[str]:
    return sorted(_REGISTRY)


def _unknown_arguments(factory: Callable[..., Any], kwargs: dict[str, Any], env: str) -> None:
    """ValueError naming keywords `factory` does not take, with the ones it does (instead of a bare TypeError)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n != "self"]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        keys = getattr(factory, "ragen_keys", None)
        ragen = keys.names() if keys is not None else []
        also = f"; RAGEN env_config keys it reads: {', '.join(ragen)}" if ragen else ""
        raise ValueError(f"{env} takes no argument {', '.join(map(repr, unknown))} (config.env.kwargs / "
                         f"val.env_kwargs); its arguments: {', '.join(names)}{also}")


def env_kwargs(spec: EnvSpec, *layers: Any) -> dict[str, Any]:
    """The constructor kwargs of `spec`: its variant's kwargs, then each layer of overrides (env.kwargs, then
    val.env_kwargs) over them. Each layer may use RAGEN's env_config names (envs.ragen_keys), translated to ours
    first, so RAGEN's name of a setting replaces the variant's value under our name."""
    from envs.ragen_keys import translate

    factory = spec.resolve_factory()
    keys = getattr(factory, "ragen_keys", None)
    kwargs = translate(keys, spec.kwargs, spec.name)
    for layer in layers:
        kwargs.update(translate(keys, dict(layer or {}), spec.name))
    _unknown_arguments(factory, kwargs, spec.name)
    return kwargs


def make(name: str, **overrides: Any) -> Any:
    """Build one env instance of variant `name`; `overrides` (our or RAGEN's names) replace the variant's kwargs."""
    spec = get_spec(name)
    return spec.resolve_factory()(**env_kwargs(spec, overrides))


# RAGEN's built-in variants (config/envs.yaml in the original, with its max_tokens for the prompts).
register("SimpleSokoban", "envs.sokoban.env:Sokoban", kind="jax", prompt_max_tokens=100,
         dim_room=(6, 6), num_boxes=1, max_steps=100, search_depth=300, render_mode="text")
register("CoordSokoban", "envs.sokoban.env:Sokoban", kind="jax", prompt_max_tokens=120,
         dim_room=(6, 6), num_boxes=1, max_steps=100, search_depth=300, render_mode="grid_coord")
register("LargerSokoban", "envs.sokoban.env:Sokoban", kind="jax", prompt_max_tokens=100,
         dim_room=(8, 8), num_boxes=2, max_steps=100, search_depth=10, render_mode="text")
register("SokobanDifferentGridVocab", "envs.sokoban.env:Sokoban", kind="jax", prompt_max_tokens=100,
         dim_room=(6, 6), num_boxes=1, max_steps=100, search_depth=30, render_mode="text",
         grid_vocab="different")
register("FrozenLake", "envs.frozenlake.env:FrozenLake", kind="jax", prompt_max_tokens=100,
         size=4, p=0.9, success_rate=0.8, render_mode="text")
register("CoordFrozenLake", "envs.frozenlake.env:FrozenLake", kind="jax", prompt_max_tokens=120,
         size=4, p=0.9, success_rate=0.8, render_mode="grid_coord")
# RAGEN's game_2048 and rubikscube custom_envs entries (envs.yaml max_tokens 8192 and 96).
register("game_2048", "envs.game_2048.env:Game2048", kind="jax", prompt_max_tokens=8192)
register("rubikscube", "envs.rubikscube.env:RubiksCube", kind="jax", prompt_max_tokens=96, scramble_depth=1,
         max_steps=20)
register("Bandit", "envs.bandit.env:Bandit", kind="jax", prompt_max_tokens=100, arm_names="train")
register("BanditTest", "envs.bandit.env:Bandit", kind="jax", prompt_max_tokens=100, arm_names="test")
# data_path=None: seeded offline tasks; point it at a local copy of the original data to use that.
register("Countdown", "envs.countdown.env:CountdownEnv", kind="host", prompt_max_tokens=100,
         data_path=None, solvable_ops="+-")
# Countdown through tools (rollout.action_format="tool_call"): a calculator, then submit
register("ToolCountdown", "envs.countdown.tool_env:ToolCountdownEnv", kind="host", prompt_max_tokens=100,
         data_path=None, solvable_ops="+-")
register("MetamathQA", "envs.metamathqa.env:MetaMathQAEnv", kind="host", prompt_max_tokens=100,
         data_path=None, max_attempts=1)
# RAGEN's `static` env_type (no envs.yaml entry in RAGEN): dataset_name picks metamathqa, gsm8k, theoremqa, math,
# mmlu or mmlu_stem; data_path a local copy (metamathqa without one: offline problems).
register("Static", "envs.static.env:StaticEnv", kind="host", dataset_name="metamathqa", data_path=None)
register("SimpleSudoku", "envs.sudoku.env:SudokuEnv", kind="host", prompt_max_tokens=150, difficulty="easy",
         max_steps=81, render_format="with_feedback")
register("MediumSudoku", "envs.sudoku.env:SudokuEnv", kind="host", prompt_max_tokens=150, difficulty="medium",
         max_steps=81, render_format="with_feedback")
# RAGEN's Alfworld / AlfworldOOD (validation on ALFWorld's valid_seen / valid_unseen games): generated household games
# without data_dir; needs the optional textworld[pddl] (envs/alfworld/README.md).
register("Alfworld", "envs.alfworld.env:AlfworldEnv", kind="host", prompt_max_tokens=512,
         eval_dataset="eval_in_distribution")
register("AlfworldOOD", "envs.alfworld.env:AlfworldEnv", kind="host", prompt_max_tokens=512,
         eval_dataset="eval_out_of_distribution")
register("WebShop", "envs.webshop.env:WebShopEnv", kind="host", prompt_max_tokens=200)
# WebShop through tools (rollout.action_format="tool_call"): search, click
register("ToolWebShop", "envs.webshop.tool_env:ToolWebShopEnv", kind="host", prompt_max_tokens=200)
register("SearchQA", "envs.searchqa.env:SearchQAEnv", kind="host", prompt_max_tokens=300)
# SearchQA through tools (rollout.action_format="tool_call"): search, then answer
register("ToolSearchQA", "envs.searchqa.tool_env:ToolSearchQAEnv", kind="host", prompt_max_tokens=300)
register("DeepCoder", "envs.deepcoder.env:DeepCoderEnv", kind="host", prompt_max_tokens=8000)
register("Lean", "envs.lean.env:LeanEnv", kind="host", prompt_max_tokens=512)
