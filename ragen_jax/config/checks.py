"""The checks that read several entries at once, or a registry (envs, losses, estimators, filter metrics): every
one runs before any model is loaded or compiled, and says what to change in config keys."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import ragen_jax.algos  # noqa: F401  registers the built-ins
from envs.registry import get_spec
from ragen_jax.algos import accepts_keyword
from ragen_jax.algos import registry as algos_registry
from ragen_jax.algos.policy_loss import required_agg_mode_problem
from ragen_jax.algos.presets import needs_critic, resolve_adv_estimator
from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, VALUE_LOSSES
from ragen_jax.algos.settings import BUILT_IN_KEYWORDS, AlgoSettings, parse_algo_kwargs
from ragen_jax.filtering import METRICS, FilterConfig, group_scores
from ragen_jax.models.lora import DEFAULT_TARGETS, parse_target_modules

# config.algo keys that name an entry of an algos registry (a registered name or 'package.module:attr'); the
# registry's own error lists the known names and how to add one (docs/custom_losses.md)
REGISTRY_KEYS = {"value_loss": "VALUE_LOSSES", "loss_agg_mode": "AGG_MODES", "critic_loss_agg_mode": "AGG_MODES",
                 "kl_loss_type": "KL_ESTIMATORS", "kl_penalty": "KL_ESTIMATORS",
                 "rollout_correction": "ROLLOUT_CORRECTIONS"}
PLAYED_DEMO_SOURCES = ("oracle", "random")  # played in a JAX env batch (warmstart.demos.play_oracle_episodes)


def config_problems(run, raw: dict, mode: str) -> list[str]:
    """Every problem of RunConfig `run` that its entries' own rules do not catch (raw: the config as given)."""
    errors = _env_problems(run, mode)
    errors += _lora_errors(run.model.lora)
    errors += _api_problems(run.model, mode)
    if run.model.preset in ("tiny", "tiny_vision") and run.model.path:
        errors.append(f"config.model.path={run.model.path!r} is not loaded: config.model.preset='tiny' builds the "
                      "built-in model; to load the folder instead add --config.model.preset='', to train the built-in "
                      "model add --config.model.path=''")
    errors += _algo_problems(run)
    try:
        filter_cfg = FilterConfig.from_mapping(dict(raw.get("filter", {})))
    except ValueError as e:
        errors.append(f"config.filter: {e}")
    else:
        errors += _filter_metric_errors(filter_cfg.metric, run.env.group_size)
    errors += _batch_problems(run, mode)
    errors += _sampling_errors(run.rollout, run.val)
    errors += [f"config.{p}" for p in run.rollout.problems()]
    for m in ("actor", "critic"):
        o = getattr(run.optim, m)
        if o.warmup_steps and o.warmup_steps_ratio:  # veRL lets the steps win silently: say it
            errors.append(f"config.optim.{m}.warmup_steps={o.warmup_steps} and warmup_steps_ratio="
                          f"{o.warmup_steps_ratio} are both set; set one of them (the other to 0)")
    return errors


def _api_problems(model, mode: str) -> list[str]:
    """model.api_base (an endpoint evaluated in place of a local model) only evaluates, and names its model."""
    if not model.api_base:
        return []
    if mode != "eval":
        return [f"config.model.api_base={model.api_base!r} evaluates an endpoint and trains nothing: run it with "
                "--mode=eval, or drop --config.model.api_base to train the local model"]
    if not model.api_model:
        return ["config.model.api_base is set but config.model.api_model is empty: name the model the endpoint "
                "serves (--config.model.api_model=NAME)"]
    return []


def validation_envs(val_name: str, train_name: str) -> list[str]:
    """The env names a validation plays: `val.name` "" is the training env; several are comma-separated
    ("Bandit,BanditTest", RAGEN's es_manager.val tags), each played with `val.groups` groups."""
    names = [name.strip() for name in (val_name or train_name).split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"val.name={val_name!r}: give one env name, or several distinct ones separated by commas "
                         "(e.g. 'Bandit,BanditTest').")
    return names


def _env_problems(run, mode: str) -> list[str]:
    errors = []
    env_names = [("env", run.env.name)]
    if run.val.name:
        try:
            env_names += [("val", name) for name in validation_envs(run.val.name, run.env.name)]
        except ValueError as e:
            errors.append(f"config.{e}")
    for where, name in env_names:
        if name:
            try:
                spec = get_spec(name)
            except KeyError as e:
                errors.append(f"config.{where}.name: {e.args[0]}")
                continue
            if where == "env":
                errors += _warmstart_errors(run.warmstart, spec, mode)
    return errors


def _batch_problems(run, mode: str) -> list[str]:
    """Mini- and micro-batches that do not tile a step's rows, and validation chunks that split a group."""
    errors = []
    t, env = run.trainer, run.env
    if t.micro_batch_size > 0 and t.mini_batch_size % t.micro_batch_size:
        errors.append(f"config.trainer.mini_batch_size ({t.mini_batch_size}) must be a multiple of "
                      f"config.trainer.micro_batch_size ({t.micro_batch_size})")
    episodes, mini = env.batch_size, t.mini_batch_size
    if mode != "eval" and episodes > 0 and mini > 0:
        if run.rollout.context_mode == "full" and (mini > episodes or episodes % mini):
            errors.append(f"config.trainer.mini_batch_size={mini} must divide the {episodes} episodes (rows) of a "
                          f"step (env.groups x env.group_size = {env.groups} x {env.group_size})")
        elif mini > episodes * env.max_turn:  # one row per turn: at most episodes x max_turn rows
            errors.append(f"config.trainer.mini_batch_size={mini} exceeds the at most {episodes * env.max_turn} "
                          f"rows of a step ({episodes} episodes x env.max_turn {env.max_turn})")
    v = run.val
    if v.group_size > 0 and v.batch_size % v.group_size:
        errors.append(f"config.val.batch_size ({v.batch_size}) must be a multiple of config.val.group_size "
                      f"({v.group_size}): validation plays whole groups")
    return errors


def _algo_problems(run) -> list[str]:
    algo, errors = run.algo, []
    try:
        ADVANTAGE_ESTIMATORS.get(algo.custom_adv_estimator or algo.adv_estimator)
        policy_loss = POLICY_LOSSES.get(algo.custom_policy_loss or algo.policy_loss)
    except (KeyError, ImportError, AttributeError, ValueError) as e:
        errors.append(f"config.algo: {_message(e)}")
    else:
        errors += _algo_kwargs_errors(run) or _algo_contract_errors(run)
        agg_problem = required_agg_mode_problem(policy_loss, algo.loss_agg_mode,
                                                algo.custom_policy_loss or algo.policy_loss)
        errors += [f"config.algo: {agg_problem}"] if agg_problem else []
    if not algo.clip_cov_lb < algo.clip_cov_ub:
        errors.append(f"config.algo.clip_cov_lb ({algo.clip_cov_lb}) must be below config.algo.clip_cov_ub "
                      f"({algo.clip_cov_ub}): they bound the covariance band clip_cov picks tokens from")
    for key, registry in REGISTRY_KEYS.items():
        try:
            getattr(algos_registry, registry).get(getattr(algo, key))
        except (KeyError, ImportError, AttributeError, ValueError, TypeError) as e:
            errors.append(f"config.algo.{key}: {_message(e)}")
    if not algo.custom_adv_estimator and needs_critic(dataclasses_dict(algo)) and not algo.use_critic:
        errors.append(f"config.algo.adv_estimator={algo.adv_estimator!r} needs config.algo.use_critic=True "
                      "(it reads the critic's values)")
    return errors


def dataclasses_dict(obj: Any) -> dict:
    import dataclasses

    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _filter_metric_errors(metric: str, group_size: int) -> list[str]:
    """A user's filter metric (registered or by import path) run once on made-up groups, so a score that breaks
    its contract (one finite score per group) stops the run before any model is built, not at the first step."""
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


def _lora_errors(lora) -> list[str]:
    """LoRA settings that would fail with a traceback once the model is built, or train nothing at all."""
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
    own top_p and top_k). A temperature of 0 samples greedily, as vLLM and transformers read it."""
    errors = []
    for name, section in (("rollout", rollout), ("val", val)):
        if not section.temperature >= 0:
            errors.append(f"config.{name}.temperature must be >= 0 (got {section.temperature}): 1.0 samples from "
                          "the model as it is, 0 takes the most likely token (greedy)")
        if not 0 < section.top_p <= 1:
            errors.append(f"config.{name}.top_p must be in (0, 1] (got {section.top_p}); 1.0 turns nucleus "
                          "filtering off")
        if section.top_k < -1:
            errors.append(f"config.{name}.top_k must be >= 0 or -1 (0 and -1, veRL's vLLM default, = off) "
                          f"(got {section.top_k})")
    return errors


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
    if warmstart.source == "oracle" and _scripted(spec):
        if warmstart.reasoning != "fixed":
            errors.append(f"config.warmstart.reasoning={warmstart.reasoning!r} needs an env state to describe; the "
                          f"scripted demos of host env {spec.name!r} think warmstart.reasoning_text: set "
                          "config.warmstart.reasoning='fixed'")
        return errors
    jsonl = "config.warmstart.source to a JSONL file of demonstrations (its format: docs/running.md, Demonstrations)"
    fix = f"set {jsonl}" if mode == "sft" else f"set config.warmstart.enabled=False, or {jsonl}"
    scripted = ("" if warmstart.source == "oracle" else
                "; or warmstart.source='oracle' if the env class defines scripted_action() (HostEnv.scripted_action)")
    return errors + [f"config.warmstart.source={warmstart.source!r} needs "
                     f"{'a JAX env batch' if warmstart.source == 'random' else 'an oracle'}, but "
                     f"config.env.name={spec.name!r} is a host env without scripted_action(): {fix}{scripted}"]


def _scripted(spec) -> bool:
    """Whether the host env class `spec` builds overrides HostEnv.scripted_action (a policy for demonstrations;
    ragen_jax.warmstart.scripted.has_scripted_policy, not imported here: the warm start imports the config)."""
    from envs.protocols import HostEnv

    try:
        factory = spec.resolve_factory()
    except (ImportError, AttributeError):
        return False
    return isinstance(factory, type) and issubclass(factory, HostEnv) and (
        getattr(factory, "scripted_action", None) is not HostEnv.scripted_action)


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


def _algo_kwargs_errors(run) -> list[str]:
    """config.algo.kwargs that is not a JSON object, names a keyword the update already passes, or one that no
    function of the run takes (a misspelled keyword would otherwise be dropped without a word)."""
    algo = run.algo
    try:
        kwargs = parse_algo_kwargs(algo.kwargs)
    except ValueError as e:
        return [str(e)]
    named = [("advantage estimator", ADVANTAGE_ESTIMATORS, algo.custom_adv_estimator or
              resolve_adv_estimator(dataclasses_dict(algo))),
             ("policy loss", POLICY_LOSSES, algo.custom_policy_loss or algo.policy_loss)]
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


def _algo_contract_errors(run) -> list[str]:
    """A user's advantage estimator or policy loss (an import path, or a name it registered) whose signature or
    output breaks its contract; only built-ins selected: nothing to check (their contracts are tested)."""
    algo = run.algo
    adv = ADVANTAGE_ESTIMATORS.get(algo.custom_adv_estimator or resolve_adv_estimator(dataclasses_dict(algo)))
    loss = POLICY_LOSSES.get(algo.custom_policy_loss or algo.policy_loss)
    if all((getattr(fn, "__module__", "") or "").startswith("ragen_jax.") for fn in (adv, loss)):
        return []
    from ragen_jax.algos.settings import algo_contract_problems

    return [f"config.algo: {p}" for p in algo_contract_problems(AlgoSettings.of(run))]


def truncated_sampling_warning(run) -> str | None:
    """Why a sampler-mismatch correction (or the TIS cap) misreads a run whose rollouts sample with top-p/top-k,
    else None. The sampler's log-probs are of the truncated distribution (vLLM's processed_logprobs, as veRL asks
    for), the recomputed ones of the whole one, so rho = pi_old / pi_sampler is the kept mass (< 1) on every token
    even with no policy drift: icepop / seq_geo_mask drop tokens and TIS down-weights them for the truncation."""
    a, r = run.algo, run.rollout
    correcting = [f"algo.rollout_correction={a.rollout_correction!r}"] if a.rollout_correction != "none" else []
    correcting += [f"algo.tis_cap={a.tis_cap}"] if a.tis_cap else []
    truncating = ([f"rollout.top_p={r.top_p}"] if r.top_p < 1.0 else []) + (
        [f"rollout.top_k={r.top_k}"] if r.top_k > 0 else [])
    if not (correcting and truncating):
        return None
    return (f"{' and '.join(correcting)} with {' and '.join(truncating)}: the sampler's log-probs are of the "
            "truncated distribution and the update's of the whole one, so the correction sees the kept mass as a "
            "mismatch on every token and drops or down-weights them for it. Sample training rollouts with "
            "rollout.top_p=1.0 and rollout.top_k=-1, or turn the correction off.")
