"""What every config file starts from, and the variants they share.

Every env config starts from `get_base_config()` (RAGEN's `_2_sokoban` defaults, from the schema in
ragen_jax/config), then applies variants named after the colon: `--config configs/sokoban.py:tiny,grpo`. Every
config shares the algorithm presets (`:grpo`, ...), the model sizes (`:0.5b`, ...) and `:smoke` (a cheap run
through the whole pipeline: `:tiny,smoke`). Keys mirror RAGEN's meaning; docs/configuration.md maps the names.
"""

from __future__ import annotations

import difflib

import ml_collections

from ragen_jax.algos.presets import preset_names
from ragen_jax.config import MODEL_PATHS, algo_preset_values, default_config



def get_base_config() -> ml_collections.ConfigDict:
    """Every entry at its default: RAGEN's `_2_sokoban` run (the defaults and their meanings live in
    ragen_jax/config/sections.py)."""
    return default_config()


def apply_algo_preset(c: ml_collections.ConfigDict, preset: str) -> None:
    c.algo.update(algo_preset_values(preset))


def apply_variants(c: ml_collections.ConfigDict, arg: str | None, variants: dict) -> ml_collections.ConfigDict:
    """Apply comma-separated variants: algorithm presets, model sizes, and env-specific ones; `smoke` (every
    config has it) goes last wherever it is named, so `:smoke,tiny` is `:tiny,smoke`."""
    names = [name.strip().lower() for name in filter(None, (arg or "").split(","))]
    for name in [n for n in names if n != "smoke"] + [n for n in names if n == "smoke"]:
        if name == "smoke":
            apply_smoke(c)
        elif name in preset_names():
            apply_algo_preset(c, name)
        elif name in MODEL_PATHS:
            c.model.path = MODEL_PATHS[name]
        elif name in variants:
            variants[name](c)
        else:
            known = sorted(set(variants) | set(MODEL_PATHS) | set(preset_names()) | {"smoke"})
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Unknown config variant {name!r}.{hint} Known variants: {known}.")
    return c


# The smoke variant's sizes: enough to pass through every part of a run once, nothing to learn from.
SMOKE_STEPS = 3
SMOKE_WARMSTART_STEPS = 20
SMOKE_DEMOS = 200
SMOKE_VAL_EPISODES = 32
SMOKE_PAIRS = 32


def apply_smoke(c: ml_collections.ConfigDict) -> None:
    """A smoke run: the config's whole pipeline (its warm start, validations, diagnostics, update, checkpoint and
    export) at sizes that check it runs, not that it learns: 3 RL steps, a warm start of at most 20 updates on at
    most 200 demos, validations of about 32 episodes, the MI diagnostics (when on) at step 1 only with at most 32
    pairs. The filter keeps every group (it still runs and reports): a barely trained policy's groups often all
    score alike, and a filter that drops them would leave the update stage untried. The model and the step's
    episodes stay the config's, so the compiled shapes are the real run's."""
    c.trainer.total_steps = SMOKE_STEPS
    no_filter(c)
    c.warmstart.steps = min(c.warmstart.steps, SMOKE_WARMSTART_STEPS)
    c.warmstart.num_demos = min(c.warmstart.num_demos, SMOKE_DEMOS)
    c.warmstart.warmup_steps = min(c.warmstart.warmup_steps, c.warmstart.steps // 2)
    c.warmstart.val_every = 0
    c.val.groups = max(1, min(c.val.groups, SMOKE_VAL_EPISODES // c.val.group_size))
    c.val.batch_size = min(c.val.batch_size, c.val.groups * c.val.group_size)
    if c.diagnostics.every:  # step 1 is always diagnosed; the next would be after the run
        c.diagnostics.every = max(c.diagnostics.every, SMOKE_STEPS + 1)
    c.diagnostics.max_pairs = min(c.diagnostics.max_pairs, SMOKE_PAIRS)


def apply_tool_calls(c):
    """The tool-call action format (docs/tools.md): one tool call a turn, its result back in the tool role, every turn
    in the context (a call's result is what the next turn reads)."""
    c.rollout.action_format = "tool_call"
    c.rollout.context_mode = "full"
    c.rollout.context_window = -1


def apply_tiny(c: ml_collections.ConfigDict) -> None:
    """The built-in tiny model on CPU: small batches and short turns, learning in minutes."""
    c.model.preset = "tiny"
    c.model.path = ""  # the preset needs no files; a path set after this is a conflict (config_check)
    c.model.param_dtype = "float32"
    c.env.groups = 8
    c.env.group_size = 8
    c.val.groups = 128
    c.val.batch_size = 128
    c.val.every = 5
    c.val.temperature = 0.5
    c.rollout.response_length = 32
    c.rollout.max_model_len = 1024
    c.rollout.context_mode = "single_turn"
    if c.rollout.context_window < 0:  # only the current turn (an env's own window, Lean's 5, stays)
        c.rollout.context_window = 1
    c.optim.actor.lr = 1e-4
    c.optim.critic.lr = 1e-3
    c.optim.actor.warmup_steps = 0
    c.trainer.total_steps = 30
    c.trainer.mini_batch_size = 32
    # ~2k tokens per micro-batch: on a CPU the update and the scoring run fastest at 1-2k tokens a call, each op's
    # data staying in cache (`experiments/bench/profile_steps.py update` shows where a larger call's time goes)
    c.trainer.micro_batch_size = 8
    c.trainer.save_every = 0
    c.diagnostics.every = 5
    c.diagnostics.max_pairs = 32
    c.diagnostics.batch_size = 64
    c.diagnostics.gradient_every = 0  # an analysis, not training: off in the minutes-long CPU recipes


def apply_reasoning(c: ml_collections.ConfigDict) -> None:
    """The reasoning variant of the quickstart recipe (RAGEN-2's MI diagnostics need thinking that depends on the
    input): demonstrations think the env's own short description of the state ("box below left, target left"),
    responses get room for it, and the MI diagnostics run at RAGEN's defaults (every 5 steps, 64 pairs)."""
    c.warmstart.reasoning = "state"
    c.rollout.response_length = 40
    c.diagnostics.every, c.diagnostics.max_pairs, c.diagnostics.batch_size = 5, 64, 64


def no_filter(c: ml_collections.ConfigDict) -> None:
    """The SNR filter off (top_p 1.0 keeps every group), for ablations."""
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 1.0, True


def apply_quickstart_rl(c: ml_collections.ConfigDict) -> None:
    """The quickstart recipe for grid games on the tiny model (docs/quickstart.md): the compact prompt
    (actions + state, a documented departure from RAGEN's texts), a warm start on BFS-oracle play, then GRPO
    with RAGEN-2's SNR filter (top_p 0.9) and a k3 KL leash to the warm-started policy. The warm start is
    limited by steps, not seconds, so a run's numbers do not depend on how busy the machine is."""
    c.rollout.prompt_style = "compact"
    c.rollout.response_length = 24
    c.rollout.max_model_len = 256
    c.warmstart.enabled = True
    c.warmstart.num_demos = 5000
    c.warmstart.steps = 500
    c.warmstart.max_seconds = 0.0
    # ~1k tokens a micro-batch, in cache on a CPU (`experiments/bench/bench_warmstart.py --batch 64 --micro 16` vs 64)
    c.warmstart.batch_size, c.warmstart.micro_batch_size = 64, 16
    c.warmstart.lr = 1e-3
    c.env.groups, c.env.group_size = 16, 8
    c.trainer.total_steps = 80
    c.trainer.mini_batch_size, c.trainer.micro_batch_size = 64, 16  # ~2k tokens a micro-batch: as :tiny's
    c.trainer.epochs = 1
    c.algo.update(dict(preset="grpo", adv_estimator="grpo", use_critic=False, norm_adv_by_std_in_grpo=True,
                       loss_agg_mode="seq-mean-token-mean", use_kl_loss=True, kl_loss_coef=0.05,
                       kl_loss_type="low_var_kl", entropy_coeff=0.0))
    c.optim.actor.lr = 5e-5
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 0.9, False
    c.val.groups, c.val.batch_size, c.val.every = 512, 128, 20
