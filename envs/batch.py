"""Env batches from env names: `make_env_batch` builds the batch the rollout plays (a JAX env's vmapped batch or a
host env's threaded one), and turns any failure to build it into one EnvSetupError naming the env and the fix."""

from __future__ import annotations

import traceback
from typing import Any

from envs import registry
from envs.errors import EnvSetupError
from envs.host_batch import HostEnvBatch
from envs.jax_batch import JaxEnvBatch
from envs.protocols import EnvBatch, HostEnv, JaxEnv

__all__ = ["EnvSetupError", "HostEnvBatch", "JaxEnvBatch", "make_env_batch", "setup_error_message"]


def setup_error_message(env: str, error: Exception) -> str:
    """Why env `env` could not be built, where it was raised (a bug in an env's own code is found from there), and
    what to change: its kwargs (a bad or missing setting, a missing package), the file or service an OSError names,
    or the env's code (anything else its constructor raised)."""
    where = traceback.extract_tb(error.__traceback__)[-1]
    cause = f"{type(error).__name__}: {error} (raised at {where.filename}:{where.lineno})"
    if isinstance(error, (ValueError, ImportError, TypeError)):
        return f"env {env} could not be built from its kwargs (--config.env.kwargs.*): {cause}"
    if isinstance(error, OSError):
        return (f"env {env} could not be built: {cause}. Make the file or service it names available, or point the "
                "env elsewhere with --config.env.kwargs.*")
    return f"env {env} could not be built: its constructor raised {cause}. Fix the env's code there."


def make_env_batch(name_or_spec: str | registry.EnvSpec, batch_size: int, *, later_overrides: Any = None,
                   **overrides: Any) -> EnvBatch:
    """A batch of `batch_size` episodes of a registered env (`overrides`, then `later_overrides`, replace its
    kwargs; either may use RAGEN's env_config names, see registry.env_kwargs).

    Any exception while building the env (its kwargs, files, packages, service or constructor) comes back as an
    EnvSetupError that names the env and the fix (`setup_error_message`), so run.py prints it as one line."""
    spec = registry.get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    try:
        factory = spec.resolve_factory()
        problem = registry.env_class_problem(factory, spec.name) if isinstance(factory, type) and issubclass(
            factory, (HostEnv, JaxEnv)) else None
        if problem:
            raise EnvSetupError(problem)
        kwargs = registry.env_kwargs(spec, overrides, later_overrides)
        if spec.kind == "jax":
            batch = JaxEnvBatch(factory(**kwargs), batch_size)
        else:
            batch = HostEnvBatch([factory(**kwargs) for _ in range(batch_size)], factory=lambda: factory(**kwargs))
    except EnvSetupError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to build the env is the setup's: one line naming the env
        raise EnvSetupError(setup_error_message(spec.name, e)) from e
    batch.prompt_max_tokens = spec.prompt_max_tokens  # what the prompts state as the "Max response length"
    return batch
