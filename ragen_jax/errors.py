"""The errors a user can act on. Each message names the problem and the fix; run.py prints one as a single
FATAL line (catching `RagenError` once), and library callers can catch it the same way.

Each class also derives from the builtin a caller would have caught before (ValueError, OSError, ...).
"""

from __future__ import annotations


class RagenError(Exception):
    """Base of the user-facing errors: bad input (config, files, env, model output lengths), not a bug."""


class ConfigError(RagenError, ValueError):
    """A config that cannot run: unknown keys, wrong types, impossible values (every problem, one per line)."""


class RunFolderError(RagenError, FileExistsError):
    """A workdir that this command may not use as it stands (an earlier run's checkpoints, a warm start only)."""


class ModelNotFoundError(RagenError, FileNotFoundError):
    """A model folder or hub id that is not on this machine."""


class NothingToEvaluateError(RagenError, FileNotFoundError):
    """`--mode=eval` pointed at a folder with nothing to score."""


class MissingFileError(RagenError, FileNotFoundError):
    """A file or folder the command needs (model files, a dataset, a rollout dump) is not there."""
