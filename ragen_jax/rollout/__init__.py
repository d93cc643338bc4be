"""StarPO rollout: prompts, parsing, the multi-turn loop and training batches.

Two engines play the same trajectories: `ContinuousEngine` (episodes advance on their own through decode slots; the
default on one process) and `LockstepEngine` (every row turn by turn; the reference, and the engine across hosts).
`make_engine` picks one from the config's name.
"""

import jax

from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.continuous import ContinuousEngine
from ragen_jax.rollout.episodes import ContextOverflowError
from ragen_jax.rollout.lockstep import LockstepEngine
from ragen_jax.rollout.parsing import ParsedResponse, parse_response
from ragen_jax.rollout.rewards import group_seeds, normalize_scores
from ragen_jax.rollout.types import Episode, RolloutResult, TrajectoryBatch

ENGINES = ("auto", "continuous", "lockstep")


def vl_config_of(graphdef):
    """A vision-language policy's VLConfig (it rolls out with the lockstep engine), else None."""
    from ragen_jax.sampling.vision import vl_config_of as find

    return find(graphdef)


def make_engine(kind: str, graphdef, tokenizer, config: RolloutConfig, batch_size: int, *, slots: int = 0,
                chunk: int = 8, lanes: int = 0, mesh=None) -> ContinuousEngine | LockstepEngine:
    """The rollout engine a config names: "continuous", "lockstep", or "auto" (continuous on one process,
    lockstep across hosts). Both play the same trajectories. lanes: the sampler's decode lanes (0: its default)."""
    if kind not in ENGINES:
        raise ValueError(f"rollout.engine={kind!r} must be 'auto', 'continuous' or 'lockstep'.")
    if kind == "lockstep" or (kind == "auto" and (jax.process_count() > 1 or vl_config_of(graphdef) is not None)):
        return LockstepEngine(graphdef, tokenizer, config, batch_size, lanes=lanes, mesh=mesh)
    return ContinuousEngine(graphdef, tokenizer, config, batch_size, slots=slots, chunk=chunk, lanes=lanes, mesh=mesh)


__all__ = ["ENGINES", "RolloutConfig", "ContinuousEngine", "LockstepEngine", "ContextOverflowError", "make_engine",
           "ParsedResponse", "parse_response", "group_seeds", "normalize_scores", "Episode", "RolloutResult",
           "TrajectoryBatch"]
