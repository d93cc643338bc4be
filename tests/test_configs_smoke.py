"""The `:smoke` variant every env config shares: the whole pipeline at a size that checks a run works (a few RL
steps, a short warm start, small validations, every group trained), alone or after any other variant, in either
order."""

import glob
import importlib
import os

import pytest

from configs.base import SMOKE_DEMOS, SMOKE_PAIRS, SMOKE_STEPS, SMOKE_VAL_EPISODES, SMOKE_WARMSTART_STEPS
from ragen_jax.config import validate_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))
                 if os.path.basename(p) not in ("base.py", "__init__.py"))


def val_episodes(c) -> int:
    names = c.val.name or c.env.name
    return c.val.groups * c.val.group_size * len(names.split(","))


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("base", ["", "tiny"])
def test_smoke_validates_and_is_small(module, base):
    assert len(MODULES) >= 10 and "sokoban" in MODULES
    get_config = importlib.import_module(f"configs.{module}").get_config
    full = get_config(base or None)
    for arg in (f"{base},smoke".lstrip(","), f"smoke,{base}".rstrip(",")):
        c = get_config(arg)
        validate_config(c)
        assert c.trainer.total_steps == SMOKE_STEPS
        assert c.warmstart.enabled == full.warmstart.enabled  # the pipeline stays whole
        assert c.warmstart.steps <= SMOKE_WARMSTART_STEPS and c.warmstart.num_demos <= SMOKE_DEMOS
        assert c.warmstart.warmup_steps <= c.warmstart.steps
        assert c.val.group_size == full.val.group_size
        assert c.val.groups * c.val.group_size <= max(SMOKE_VAL_EPISODES, c.val.group_size)  # per validation env
        assert c.val.batch_size <= c.val.groups * c.val.group_size
        assert c.diagnostics.max_pairs <= SMOKE_PAIRS
        assert c.diagnostics.every == 0 or c.diagnostics.every > SMOKE_STEPS  # step 1 only
        # every group trains, so the update stage runs even when a barely warm-started policy's groups score alike
        assert (c.filter.strategy, c.filter.value, c.filter.include_zero) == ("top_p", 1.0, True)
        # what the run compiles stays the real run's: the model, the step's episodes, the turn lengths
        for key in ("model", "env", "rollout", "algo"):
            assert c[key].to_dict() == full[key].to_dict(), key


def test_smoke_shrinks_the_quickstart():
    from configs.sokoban import get_config

    full, smoke = get_config("tiny"), get_config("tiny,smoke")
    assert full.warmstart.enabled and full.warmstart.steps > SMOKE_WARMSTART_STEPS
    assert full.trainer.total_steps > SMOKE_STEPS and val_episodes(full) > SMOKE_VAL_EPISODES
    assert (smoke.warmstart.steps, smoke.warmstart.num_demos, val_episodes(smoke)) == (
        SMOKE_WARMSTART_STEPS, SMOKE_DEMOS, SMOKE_VAL_EPISODES)


def test_a_misspelt_smoke_is_refused_with_the_name_it_meant():
    from configs.sokoban import get_config

    with pytest.raises(ValueError, match="Did you mean 'smoke'"):
        get_config("tiny,smoek")
