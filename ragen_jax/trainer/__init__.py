"""The StarPO trainer: a run's parts (`Trainer`, `RLModels`, `RunState`), the training step's stages, the jitted
update programs, optimizers, warm start and evaluation flows.

    from ragen_jax.trainer import Trainer
"""

from ragen_jax.trainer.models import RLModels
from ragen_jax.trainer.state import RunState
from ragen_jax.trainer.trainer import Trainer

__all__ = ["RLModels", "RunState", "Trainer"]
