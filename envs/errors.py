"""Why an env could not be built: a user-facing error (`ragen_jax.errors.RagenError`), printed by run.py as one line."""

from __future__ import annotations

from ragen_jax.errors import RagenError


class EnvSetupError(RagenError, ValueError):
    """An env that cannot be built (a data file without usable rows, a missing setting, package or service, a
    constructor that raised)."""
