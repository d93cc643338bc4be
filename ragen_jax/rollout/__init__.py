"""StarPO rollout: prompts, parsing, the multi-turn loop and training batches."""

from ragen_jax.rollout.engine import RolloutConfig, RolloutEngine
from ragen_jax.rollout.parsing import ParsedResponse, parse_response
from ragen_jax.rollout.rewards import group_seeds, normalize_scores
from ragen_jax.rollout.types import Episode, RolloutResult, TrajectoryBatch

__all__ = ["RolloutConfig", "RolloutEngine", "ParsedResponse", "parse_response", "group_seeds",
           "normalize_scores", "Episode", "RolloutResult", "TrajectoryBatch"]
