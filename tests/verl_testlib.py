"""veRL's own functions, run beside ours: their source read from the installed `verl` package (pinned in
requirements-test-nodeps.txt, installed with --no-deps) and exec'd with the few stubs they need.

The package is installed without its dependencies (they would pull a CUDA torch, vLLM and Ray), so it cannot be
imported: `import verl` imports Ray, and core_algos imports omegaconf, tensordict and veRL's config classes. We
read the installed module files instead (found through the package's metadata, nothing is imported) and exec
only the top-level functions a test names, so the code under test is exactly the installed release's source."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import types
from typing import Any, Optional

import pytest

CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
TORCH_FUNCTIONAL = "verl/utils/torch_functional.py"
INSTALL = "pip install --no-deps -r requirements-test-nodeps.txt (make install-test does it)"


@functools.cache
def _source(path: str) -> str:
    """The text of `path` (relative to site-packages) from the installed verl distribution."""
    try:
        dist = importlib.metadata.distribution("verl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"veRL is not installed: {INSTALL}")
    located = dist.locate_file(path)
    try:
        return located.read_text(encoding="utf-8")
    except OSError as e:
        raise FileNotFoundError(f"veRL {dist.version} has no {path} ({e}): reinstall it with {INSTALL}") from e


def _functions(path: str, names: tuple[str, ...]) -> str:
    """The source of the top-level functions `names` in veRL's `path`, without their decorators."""
    text = _source(path)
    found = {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
             if isinstance(node, ast.FunctionDef) and node.name in names}
    missing = set(names) - set(found)
    if missing:
        raise LookupError(f"{sorted(missing)} not found in veRL's {path}: this veRL release moved them "
                          f"(requirements-test-nodeps.txt pins the one the tests were written against)")
    return "\n\n".join(found[n] for n in names)


class ActorConfig(types.SimpleNamespace):
    """veRL's ActorConfig as its losses read it: attributes, .get(name, default), global_batch_info."""

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


class AlgoConfig(types.SimpleNamespace):
    pass


def actor_config(clip_ratio: float = 0.2, clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                 tau_pos: float = 1.0, tau_neg: float = 1.05, **policy_loss) -> ActorConfig:
    """An ActorConfig with veRL's defaults; policy_loss keywords (clip_cov_ratio, ...) go to config.policy_loss."""
    loss = dict(loss_mode="vanilla", clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0, kl_cov_ratio=0.0002,
                ppo_kl_coef=0.1)
    loss.update(policy_loss)
    return ActorConfig(clip_ratio=clip_ratio, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high,
                       clip_ratio_c=3.0, tau_pos=tau_pos, tau_neg=tau_neg, global_batch_info={},
                       policy_loss=types.SimpleNamespace(**loss))


@functools.cache
def core_algos(*names: str) -> types.SimpleNamespace:
    """veRL's core_algos functions `names` (plus agg_loss) exec'd against torch -> a namespace of them."""
    torch = pytest.importorskip("torch")
    verl_f: dict[str, Any] = {"torch": torch}
    exec(_functions(TORCH_FUNCTIONAL, ("masked_sum", "masked_mean")), verl_f)  # noqa: S102 - veRL's own source
    scope: dict[str, Any] = {"torch": torch, "Optional": Optional, "Any": Any, "ActorConfig": ActorConfig,
                             "AlgoConfig": AlgoConfig, "verl_F": types.SimpleNamespace(**verl_f)}
    exec(_functions(CORE_ALGOS, tuple(dict.fromkeys(("agg_loss", *names)))), scope)  # noqa: S102
    return types.SimpleNamespace(**{n: scope[n] for n in ("agg_loss", *names)})
