"""Fail fast on a bad config: every check runs before any model is loaded or compiled."""

from __future__ import annotations

import math
import os

CHOICES = {
    ("rollout", "context_mode"): ("full", "limited_multi_turn", "single_turn"),
    ("rollout", "prompt_style"): ("ragen", "compact"),
    ("rollout", "engine"): ("auto", "continuous", "lockstep"),
    ("rollout", "reward_norm_method"): ("identity", "mean_std", "mean", "asym_clip"),
    ("rollout", "reward_norm_grouping"): ("state", "inductive", "batch"),
    ("model", "remat"): ("none", "full", "dots"),
    ("model", "param_dtype"): ("", "float32", "bfloat16"),
    ("model", "dtype"): ("", "float32", "bfloat16"),
    ("model", "preset"): ("", "tiny"),
    ("warmstart", "reasoning"): ("fixed", "state", "filler", "state_filler"),
    ("algo", "loss_scope"): ("mini_batch", "micro_batch"),
    ("algo", "bi_level_turn_ends"): ("reward", "turn"),
    ("algo", "kl_ctrl_type"): ("fixed", "adaptive"),
}
# config.algo keys that name an entry of an algos registry (a registered name or 'package.module:attr'); the
# registry's own error lists the known names and how to add one (docs/custom_losses.md)
REGISTRY_KEYS = {"value_loss": "VALUE_LOSSES", "loss_agg_mode": "AGG_MODES", "critic_loss_agg_mode": "AGG_MODES",
                 "kl_loss_type": "KL_ESTIMATORS", "kl_penalty": "KL_ESTIMATORS",
                 "rollout_correction": "ROLLOUT_CORRECTIONS"}


def validate_config(cfg, mode: str = "train") -> None:
    """Raise ValueError naming the key, the bad value and the allowed ones.

    mode "eval" skips the checks that only training needs (mini-batches)."""
    from configs.base import get_base_config
    from envs.registry import get_spec
    import ragen_jax.algos  # noqa: F401  registers the built-ins
    from ragen_jax.algos import registry as algos_registry
    from ragen_jax.algos.policy_loss import required_agg_mode_problem
    from ragen_jax.algos.presets import needs_critic
    from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
    from ragen_jax.filtering import FilterConfig
    from ragen_jax.rollout.batching import turn_scores_problem
    from ragen_jax.trainer.settings import validation_envs

    errors = _unknown_keys(cfg, get_base_config())
    for (section, key), allowed in CHOICES.items():
        value = cfg[section][key]
        if value not in allowed:
            errors.append(f"config.{section}.{key}={value!r} is not one of {allowed}")
    env_names = [("env", cfg.env.name)]
    if cfg.val.name:
        try:
            env_names += [("val", name) for name in validation_envs(cfg.val.name, cfg.env.name)]
        except ValueError as e:
            errors.append(f"config.{e}")
    for section, name in env_names:
        if name:
            try:
                spec = get_spec(name)
            except KeyError as e:
                errors.append(f"config.{section}.name: {e.args[0]}")
                continue
            if section == "env":
                errors += _warmstart_errors(cfg.warmstart, spec, mode)
    errors += _lora_errors(cfg.model.lora)
    if cfg.model.preset == "tiny" and cfg.model.path:
        errors.append(f"config.model.path={cfg.model.path!r} is not loaded: config.model.preset='tiny' builds the "
                      "built-in model; to load the folder instead add --config.model.preset='', to train the built-in "
                      "model add --config.model.path=''")
    algo = cfg.algo
    try:
        ADVANTAGE_ESTIMATORS.get(algo.custom_adv_estimator or algo.adv_estimator)
        policy_loss = POLICY_LOSSES.get(algo.custom_policy_loss or algo.policy_loss)
    except (KeyError, ImportError, AttributeError, ValueError) as e:
        errors.append(f"config.algo: {_message(e)}")
    else:
        errors += _algo_kwargs_errors(cfg) or _algo_contract_errors(cfg)
        agg_problem = required_agg_mode_problem(policy_loss, algo.loss_agg_mode,
                                                algo.custom_policy_loss or algo.policy_loss)
        errors += [f"config.algo: {agg_problem}"] if agg_problem else []
    if not algo.clip_cov_lb < algo.clip_cov_ub:
        errors.append(f"config.algo.clip_cov_lb ({algo.clip_cov_lb}) must be below config.algo.clip_cov_ub "
                      f"({algo.clip_cov_ub}): they bound the covariance band clip_cov picks tokens from")
    for key, registry in REGISTRY_KEYS.items():
        try:
            getattr(algos_registry, registry).get(algo[key])
        except (KeyError, ImportError, AttributeError, ValueError, TypeError) as e:
            errors.append(f"config.algo.{key}: {_message(e)}")
    try:
        filter_cfg = FilterConfig.from_mapping(dict(cfg.filter))
    except ValueError as e:
        errors.append(f"config.filter: {e}")
    else:
        errors += _filter_metric_errors(filter_cfg.metric, cfg.env.group_size)
    errors += _range_errors(cfg)
    if cfg.trainer.micro_batch_size > 0 and cfg.trainer.mini_batch_size % cfg.trainer.micro_batch_size:
        errors.append(f"config.trainer.mini_batch_size ({cfg.trainer.mini_batch_size}) must be a multiple of "
                      f"config.trainer.micro_batch_size ({cfg.trainer.micro_batch_size})")
    episodes = cfg.env.groups * cfg.env.group_size
    mini = cfg.trainer.mini_batch_size
    if mode != "eval" and episodes > 0 and mini > 0:
        if cfg.rollout.context_mode == "full" and (mini > episodes or episodes % mini):
            errors.append(f"config.trainer.mini_batch_size={mini} must divide the {episodes} episodes (rows) of a "
                          f"step (env.groups x env.group_size = {cfg.env.groups} x {cfg.env.group_size})")
        elif mini > episodes * cfg.env.max_turn:  # one row per turn: at most episodes x max_turn rows
            errors.append(f"config.trainer.mini_batch_size={mini} exceeds the at most {episodes * cfg.env.max_turn} "
                          f"rows of a step ({episodes} episodes x env.max_turn {cfg.env.max_turn})")
    if cfg.val.group_size > 0 and cfg.val.batch_size % cfg.val.group_size:
        errors.append(f"config.val.batch_size ({cfg.val.batch_size}) must be a multiple of config.val.group_size "
                      f"({cfg.val.group_size}): validation plays whole groups")
    errors += _sampling_errors(cfg.rollout, cfg.val)
    turn_scores = turn_scores_problem(cfg.rollout.context_mode, cfg.rollout.use_turn_scores)
    errors += [f"config.{turn_scores}"] if turn_scores else []
    for m in ("actor", "critic"):
        o = cfg.optim[m]
        if o.warmup_steps and o.warmup_steps_ratio:  # veRL lets the steps win silently: say it
            errors.append(f"config.optim.{m}.warmup_steps={o.warmup_steps} and warmup_steps_ratio="
                          f"{o.warmup_steps_ratio} are both set; set one of them (the other to 0)")
    if cfg.rollout.response_length >= cfg.rollout.max_model_len:
        errors.append("config.rollout.response_length must be < config.rollout.max_model_len")
    if not algo.custom_adv_estimator and needs_critic(dict(algo)) and not algo.use_critic:
        errors.append(f"config.algo.adv_estimator={algo.adv_estimator!r} needs config.algo.use_critic=True "
                      "(it reads the critic's values)")
    if len(errors) == 1:
        raise ValueError(f"Invalid config: {errors[0]}")
    if errors:
        raise ValueError("Invalid config:\n  - " + "\n  - ".join(errors))


def _filter_metric_errors(metric: str, group_size: int) -> list[str]:
    """A user's filter metric (registered or by import path) run once on made-up groups, so a score that breaks
    its contract (one finite score per group) stops the run before any model is built, not at the first step."""
    import numpy as np

    from ragen_jax.filtering import METRICS, group_scores

    if metric in METRICS or group_size < 1:
        return []
    values = np.linspace(0.0, 1.0, 3 * group_size)
    try:
        group_scores(values, group_size, metric, entropy=values, length=values)
    except Exception as e:  # the user's code: whatever it raises
        return [f"config.filter.metric: {metric!r} failed on 3 made-up groups of {group_size}: "
                f"{type(e).__name__}: {e}"]
    return []


def _message(error: Exception) -> str:
    """An exception's own text (a KeyError's str() is the repr of its message, quotes and escapes included)."""
    return str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)


FREE_FORM = ("env.kwargs", "val.env_kwargs")  # sections whose keys are the user's (an env's constructor arguments)


def _unknown_keys(cfg, reference, prefix: str = "") -> list[str]:
    """Keys a config file set that the base config does not have (a typo there would be ignored silently;
    on the command line ml_collections already refuses them)."""
    import difflib

    errors = []
    for key in cfg.keys():
        path = f"{prefix}{key}"
        if path in FREE_FORM:
            continue
        if key not in reference:
            close = difflib.get_close_matches(key, list(reference.keys()), n=1)
            hint = f" (did you mean config.{prefix}{close[0]}?)" if close else ""
            errors.append(f"config.{path} is not a config key{hint}: a config file sets only the keys configs/base.py "
                          f"defines ({', '.join(FREE_FORM)} takes any)")
        elif hasattr(cfg[key], "keys") and hasattr(reference[key], "keys"):
            errors += _unknown_keys(cfg[key], reference[key], f"{path}.")
    return errors


def _lora_errors(lora) -> list[str]:
    """LoRA settings that would fail with a traceback once the model is built, or train nothing at all."""
    from ragen_jax.models.lora import DEFAULT_TARGETS, parse_target_modules

    if lora.rank < 0:
        return [f"config.model.lora.rank must be >= 0 (got {lora.rank}; 0 = LoRA off, full fine-tuning)"]
    if lora.rank == 0:
        return []
    errors = []
    targets = parse_target_modules(lora.target_modules)
    known = ",".join(DEFAULT_TARGETS)
    if unknown := [t for t in targets if t not in DEFAULT_TARGETS]:
        errors.append(f"config.model.lora.target_modules={lora.target_modules!r} names {unknown}, which are not "
                      f"projections of a decoder layer: choose comma-separated names from {known}, "
                      "or all-linear for every one")
    elif not targets:
        errors.append(f"config.model.lora.target_modules is empty, so LoRA (rank {lora.rank}) would train nothing: "
                      f"name projections from {known}, or set config.model.lora.rank=0 to train every weight")
    if not lora.alpha > 0:
        errors.append(f"config.model.lora.alpha must be > 0 (got {lora.alpha}): the adapters' scale is alpha / rank, "
                      "and 0 would train nothing")
    return errors


def _sampling_errors(rollout, val) -> list[str]:
    """What `SamplingConfig` would refuse at the first rollout, said in config keys (validation samples with its
    own top_p and top_k; a greedy validation still reports log-probs at its temperature)."""
    errors = []
    if not rollout.temperature > 0:
        errors.append(f"config.rollout.temperature must be > 0 (got {rollout.temperature}): RL samples its "
                      "rollouts; 1.0 samples from the model as it is")
    if not val.temperature > 0:
        errors.append(f"config.val.temperature must be > 0 (got {val.temperature}); for argmax validation add "
                      "--config.val.greedy=True and keep a positive temperature")
    for name, section in (("rollout", rollout), ("val", val)):
        if not 0 < section.top_p <= 1:
            errors.append(f"config.{name}.top_p must be in (0, 1] (got {section.top_p}); 1.0 turns nucleus "
                          "filtering off")
        if section.top_k < -1:
            errors.append(f"config.{name}.top_k must be >= 0 or -1 (0 and -1, veRL's vLLM default, = off) "
                          f"(got {section.top_k})")
    return errors


_POSITIVE = (lambda v: v > 0, "must be > 0")
_AT_LEAST_0 = (lambda v: v >= 0, "must be >= 0")
_AT_LEAST_1 = (lambda v: v >= 1, "must be >= 1")
_UNIT = (lambda v: 0 <= v <= 1, "must be in [0, 1]")
RANGES = {  # key: (valid, what the error says): values that cannot run, or would train silently wrong
    **{key: _POSITIVE for key in (
        "env.groups", "env.group_size", "env.max_turn", "env.max_actions_per_turn", "env.max_actions_per_traj",
        "rollout.response_length", "trainer.mini_batch_size", "trainer.micro_batch_size", "trainer.epochs",
        "val.group_size", "val.batch_size")},
    **{key: _AT_LEAST_0 for key in ("trainer.total_steps", "trainer.save_every", "val.every")},
    # the validation env batch is built whatever val.every says (0 rows failed later with a mesh error)
    "val.groups": (lambda v: v >= 1, "must be >= 1 (to turn validation off set config.val.every=0)"),
    # Orbax deletes every checkpoint past max_to_keep: 0 would delete each one as soon as it is written
    "trainer.keep_checkpoints": (lambda v: v >= 1, "must be >= 1 (checkpoints kept on disk)"),
    "trainer.checkpoint_barrier_timeout_s": (lambda v: v > 0, "must be > 0 seconds (how long each host waits for "
                                             "the slowest at a multi-host checkpoint step; Orbax's default is 300)"),
    # added to the reward of every invalid turn: NaN or inf would turn the rewards and so every update non-finite
    "rollout.format_penalty": (lambda v: math.isfinite(v), "must be a finite number"),
    **{f"optim.{m}.{k}": _AT_LEAST_0 for m in ("actor", "critic") for k in ("lr", "warmup_steps", "weight_decay")},
    **{f"optim.{m}.grad_clip": (lambda v: v >= 0, "must be >= 0 (0 = off)") for m in ("actor", "critic")},
    # AdamW's bias correction divides by 1 - beta^t: a beta of 1 made every update NaN, so every one was skipped
    # (torch.optim.AdamW refuses such betas, and a negative eps, when it is built)
    **{f"optim.{m}.{k}": (lambda v: 0 <= v < 1, "must be in [0, 1)")
       for m in ("actor", "critic") for k in ("b1", "b2")},
    **{f"optim.{m}.eps": _AT_LEAST_0 for m in ("actor", "critic")},
    **{f"optim.{m}.{k}": _UNIT for m in ("actor", "critic") for k in ("min_lr_ratio", "warmup_steps_ratio")},
    **{f"optim.{m}.num_cycles": _AT_LEAST_0 for m in ("actor", "critic")},
    **{f"optim.{m}.schedule": (lambda v: v in ("constant", "cosine"), "must be 'constant' or 'cosine'")
       for m in ("actor", "critic")},
    **{f"warmstart.{k}": _AT_LEAST_0 for k in ("lr", "warmup_steps", "weight_decay", "steps", "max_seconds",
                                               "val_every", "filler_words")},
    **{f"warmstart.{k}": _POSITIVE for k in ("batch_size", "num_demos")},
    "warmstart.micro_batch_size": (lambda v: v >= 0, "must be >= 0 (0 = the batch size)"),
    "diagnostics.every": _AT_LEAST_0, "diagnostics.max_pairs": _POSITIVE, "diagnostics.batch_size": _POSITIVE,
    "diagnostics.ema_decay": _UNIT, "diagnostics.std_eps": _POSITIVE,
    "algo.gamma": _UNIT, "algo.lam": _UNIT, "algo.high_level_gamma": _UNIT,
    "algo.kl_loss_coef": _AT_LEAST_0, "algo.clip_ratio_low": _AT_LEAST_0, "algo.clip_ratio_high": _AT_LEAST_0,
    "algo.clip_ratio_c": (lambda v: v == 0 or v > 1, "must be 0 (off) or > 1"),  # dual-clip's lower bound, as veRL
    **{f"algo.{k}": (lambda v: 0 < v <= 1, "must be in (0, 1], a share of the response tokens (veRL: 0.0002)")
       for k in ("clip_cov_ratio", "kl_cov_ratio")},
    "algo.ppo_kl_coef": _AT_LEAST_0, "algo.tau_pos": _POSITIVE, "algo.tau_neg": _POSITIVE,
    "algo.loss_scale_factor": (lambda v: v >= 0, "must be >= 0 tokens (0 = the padded width)"),
    "algo.kl_ctrl_coef": _AT_LEAST_0, "algo.kl_ctrl_target": _POSITIVE, "algo.kl_ctrl_horizon": _POSITIVE,
    "trainer.logprob_chunk": _AT_LEAST_1, "rollout.chunk": _AT_LEAST_1,
    "rollout.context_window": (lambda v: v >= 1 or v == -1, "must be >= 1 or -1 (every turn)"),
    "rollout.slots": (lambda v: v >= 0, "must be >= 0 (0 = one per episode)"),
    "trainer.early_stop.reward_collapse_window": _AT_LEAST_0, "trainer.early_stop.reward_collapse_ratio": _AT_LEAST_0,
    "rollout.prompt_max_tokens": (lambda v: v >= 0, "must be >= 0 (0 = the env's, else rollout.response_length)"),
    "rollout.lanes": (lambda v: v >= 0, "must be >= 0 (0 = the sampler's default)"),
    "rollout.action_sep": (lambda v: bool(v.strip()) and not set("<>") & set(v),
                           "must hold a visible character and no '<' or '>' (it sits inside <answer>...</answer>)"),
}


def _range_errors(cfg) -> list[str]:
    errors = []
    for key, (valid, requirement) in RANGES.items():
        value = cfg
        for part in key.split("."):
            value = value[part]
        if not valid(value):
            errors.append(f"config.{key} {requirement} (got {value})")
    return errors


PLAYED_DEMO_SOURCES = ("oracle", "random")  # played in a JAX env batch (warmstart.demos.play_oracle_episodes)


def _warmstart_errors(warmstart, spec, mode: str) -> list[str]:
    """An oracle or random warm start plays its demos in a JAX env batch, whose states the policy reads;
    `spec.kind` is what envs.batch.make_env_batch builds the batch from. A host env needs a JSONL of demos."""
    runs = mode == "sft" or (mode == "train" and warmstart.enabled)
    if not runs:
        return []
    errors = []
    if warmstart.steps == 0:  # the warm start would validate twice, then fail on the metrics of no step
        errors.append("config.warmstart.steps=0 trains nothing: set it > 0"
                      + ("" if mode == "sft" else ", or config.warmstart.enabled=False"))
    if warmstart.micro_batch_size > 0 and warmstart.batch_size % warmstart.micro_batch_size:  # was cut silently
        errors.append(f"config.warmstart.batch_size ({warmstart.batch_size}) must be a multiple of "
                      f"config.warmstart.micro_batch_size ({warmstart.micro_batch_size})")
    if warmstart.source not in PLAYED_DEMO_SOURCES and not os.path.isfile(warmstart.source):
        # found out after the model was built and validated, with a traceback
        errors.append(f"config.warmstart.source={warmstart.source!r} is neither 'oracle', 'random' nor an existing "
                      f"JSONL file of demonstrations (looked from {os.getcwd()})")
    if spec.kind == "jax" and warmstart.source == "oracle" and (env_class := _without_oracle(spec)):
        fix = "" if mode == "sft" else ", or config.warmstart.enabled=False"
        errors.append(f"config.warmstart.source='oracle' plays the env's solver, but config.env.name={spec.name!r} "
                      f"({env_class}) has no oracle_actions(state): set config.warmstart.source='random' (the answer "
                      f"format only) or to a JSONL file of demonstrations{fix}")
    if spec.kind == "jax" or warmstart.source not in PLAYED_DEMO_SOURCES:
        return errors
    jsonl = "config.warmstart.source to a JSONL file of demonstrations"
    fix = f"set {jsonl}" if mode == "sft" else f"set config.warmstart.enabled=False, or {jsonl}"
    return errors + [f"config.warmstart.source={warmstart.source!r} plays demonstrations in a JAX env batch, but "
                     f"config.env.name={spec.name!r} is a host env: {fix}"]


def _without_oracle(spec) -> str | None:
    """The name of the JAX env class `spec` builds when it has no oracle for demonstrations (what
    warmstart.demos.oracle_policy looks for), else None; a factory that is not a class is not judged here."""
    from envs.bandit.env import Bandit

    try:
        factory = spec.resolve_factory()
    except (ImportError, AttributeError):
        return None
    if not isinstance(factory, type) or issubclass(factory, Bandit):
        return None
    return None if callable(getattr(factory, "oracle_actions", None)) else factory.__name__


def _algo_kwargs_errors(cfg) -> list[str]:
    """config.algo.kwargs that is not a JSON object, names a keyword the update already passes, or one that no
    function of the run takes (a misspelled keyword would otherwise be dropped without a word)."""
    from ragen_jax.algos import accepts_keyword
    from ragen_jax.algos.presets import resolve_adv_estimator
    from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, VALUE_LOSSES
    from ragen_jax.trainer.settings import parse_algo_kwargs
    from ragen_jax.trainer.steps import BUILT_IN_KEYWORDS

    algo = cfg.algo
    try:
        kwargs = parse_algo_kwargs(algo.kwargs)
    except ValueError as e:
        return [str(e)]
    named = [("advantage estimator", ADVANTAGE_ESTIMATORS, algo.custom_adv_estimator or
              resolve_adv_estimator(dict(algo))), ("policy loss", POLICY_LOSSES, algo.custom_policy_loss or
                                                   algo.policy_loss)]
    if algo.use_critic:
        named.append(("value loss", VALUE_LOSSES, algo.value_loss))
    functions = {}
    for what, registry, name in named:
        try:
            functions[f"{what} {name!r}"] = registry.get(name)
        except (KeyError, ImportError, AttributeError, ValueError, TypeError):
            continue  # reported by the registry-name check
    errors = []
    for key, _ in kwargs:
        if key in BUILT_IN_KEYWORDS:
            where = "the update passes it" if key == "sampler_logprobs" else f"set config.algo.{key} instead"
            errors.append(f"config.algo.kwargs: {key!r} is a keyword the trainer sets itself ({where})")
        elif not any(accepts_keyword(fn, key) for fn in functions.values()):
            errors.append(f"config.algo.kwargs: no function of this run takes a keyword {key!r} "
                          f"({', '.join(functions)}); a misspelled one would be dropped")
    return errors


def _algo_contract_errors(cfg) -> list[str]:
    """A user's advantage estimator or policy loss (an import path, or a name it registered) whose signature or
    output breaks its contract; only built-ins selected: nothing to check (their contracts are tested)."""
    from ragen_jax.algos.presets import resolve_adv_estimator
    from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    algo = cfg.algo
    adv = ADVANTAGE_ESTIMATORS.get(algo.custom_adv_estimator or resolve_adv_estimator(dict(algo)))
    loss = POLICY_LOSSES.get(algo.custom_policy_loss or algo.policy_loss)
    if all(getattr(fn, "__module__", "").startswith("ragen_jax.") for fn in (adv, loss)):
        return []
    from ragen_jax.trainer.settings import algo_settings
    from ragen_jax.trainer.steps import algo_contract_problems

    return [f"config.algo: {p}" for p in algo_contract_problems(algo_settings(cfg))]
