"""What the console shows: the start-up banner, the end-of-run summary, and `--print_config`."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import jax

from ragen_jax.config.checks import REGISTRY_KEYS
from ragen_jax.config.files import resolved_config

logger = logging.getLogger(__name__)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(r[0]) for r in rows)
    rule = "=" * (width + 14)
    return "\n".join([rule] + [f"{name:<{width}}  {value:>10}" for name, value in rows] + [rule])


def custom_functions(run) -> dict[str, str]:
    """{config key: "module:name (file)"} for every user function a RunConfig names by import path."""
    named = {"algo.custom_policy_loss": run.algo.custom_policy_loss,
             "algo.custom_adv_estimator": run.algo.custom_adv_estimator}
    named.update({f"algo.{key}": getattr(run.algo, key) for key in REGISTRY_KEYS
                  if ":" in str(getattr(run.algo, key))})
    for key, name in (("env.name", run.env.name), ("val.name", run.val.name)):
        if name and ":" in name:
            named[key] = name
    found = {}
    for key, path in named.items():
        if not path:
            continue
        module_name, _, attr = path.partition(":")
        try:
            module = target = importlib.import_module(module_name)
            for part in attr.split("."):  # the registries take dotted attributes
                target = getattr(target, part)
        except (ImportError, AttributeError):
            where = "not importable"
        else:  # a functools.partial, an AggMode or an EnvSpec has no source file of its own: its module's
            where = _source_file(target) or _source_file(module) or module_name
        found[key] = f"{path} ({where})"
    return found


def _source_file(obj) -> str | None:
    import inspect

    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        return None


def banner(trainer, config_file: str | None, eval_target=None) -> str:
    """The start-up lines: devices, model, then what the run does (training: env, episodes per step,
    algorithm; `eval_target` given: what is evaluated on how many episodes, where its outputs go), the files."""
    cfg = trainer.run
    devices = jax.devices()
    lines = [
        f"devices     {len(devices)} x {devices[0].device_kind} ({devices[0].platform}), "
        f"{jax.process_count()} process(es), mesh {dict(trainer.mesh.shape)}",
        _model_line(trainer),
        *(_eval_lines(trainer, eval_target) if eval_target is not None else _train_lines(trainer)),
        f"workdir     {trainer.workdir}",
        f"config      {config_file or '(given in code)'}",
    ]
    lines += [f"custom      {key} = {where}" for key, where in custom_functions(cfg).items()]
    return "\n".join(lines)


def _model_line(trainer) -> str:
    from ragen_jax.trainer.batch_stats import param_count

    cfg, actor = trainer.run, trainer.models.actor
    model = f"tiny preset (seed {cfg.model.seed})" if cfg.model.preset == "tiny" else cfg.model.path
    params = param_count(actor.full())
    trainable = param_count(actor.trainable)
    return (f"model       {model}: {params / 1e6:.2f}M parameters ({trainable / 1e6:.2f}M trained), "
            f"{actor.module().config.param_dtype}")


def _validation_text(trainer) -> str:
    v = trainer.run.val
    sampling = "greedy" if v.greedy else f"temperature {v.temperature:g}"
    sampling += f", top_p {v.top_p:g}" if v.top_p < 1 and not v.greedy else ""
    sampling += f", top_k {v.top_k}" if v.top_k > 0 and not v.greedy else ""
    each = " each" if len(trainer.val_names) > 1 else ""
    return f"{v.groups * v.group_size} episodes{each} of {' and '.join(trainer.val_names)} per validation ({sampling})"


def _train_validation_text(trainer) -> str:
    """What a training run validates: nothing when val.every is 0 and no warm start validates (the summary then
    shows no validation figure), else the validation's episodes."""
    cfg = trainer.run
    if not cfg.val.every and not cfg.warmstart.enabled:
        return "no validation (val.every=0)"
    return _validation_text(trainer)


def _train_lines(trainer) -> list[str]:
    cfg = trainer.run
    return [
        f"env         {cfg.env.name}: {cfg.env.groups} groups x {cfg.env.group_size} = {trainer.batch_size} "
        f"episodes per step, up to {cfg.env.max_turn} turn(s); {_train_validation_text(trainer)}",
        f"algorithm   {cfg.algo.preset}: {cfg.algo.custom_adv_estimator or cfg.algo.adv_estimator} advantages, "
        f"{cfg.algo.custom_policy_loss or cfg.algo.policy_loss} loss, "
        f"{cfg.algo.loss_agg_mode}; filter {cfg.filter.strategy} {cfg.filter.value:g}; "
        f"{cfg.trainer.total_steps} steps",
    ]


def _eval_lines(trainer, target) -> list[str]:
    return [
        f"evaluate    {target.describe()}",
        f"episodes    {_validation_text(trainer)}, up to {trainer.run.env.max_turn} turn(s)",
        f"outputs     {target.out_dir}",
    ]


def token_rates(trained_tokens: float, wall_s: float, rl_step_s: float) -> dict[str, float | None]:
    """Trained tokens per second over the run's wall time (warm start, validations, saves and compiles included)
    and over the RL steps' own time (the summed `timing_s/step`: rollout, scoring, update; a step's compiles
    included, validations and saves not). A rate over no time is None."""
    if min(trained_tokens, wall_s, rl_step_s) < 0:
        raise ValueError(f"token_rates: tokens and seconds must be >= 0, got {trained_tokens=}, {wall_s=}, "
                         f"{rl_step_s=}.")
    return {"trained_tokens_per_s_wall": trained_tokens / wall_s if wall_s > 0 else None,
            "trained_tokens_per_s_rl_steps": trained_tokens / rl_step_s if rl_step_s > 0 else None}


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def run_summary(trainer, wall: float, trained_tokens: float, stop_reason: str | None,
                rl_step_s: float) -> dict[str, Any]:
    """What a finished run writes to summary.json and prints, from a trainer's state and config: validation
    figures, timings, counters, outputs. `wall`: the run's seconds; `rl_step_s`: the RL steps' own seconds (see
    `token_rates`)."""
    state, run, val_names = trainer.state, trainer.run, trainer.val_names
    vals = [h["val_success"] for h in state.history]
    ws = state.warmstart
    return {
        "val_success_start": vals[0] if vals else None,
        "val_success_after_warmstart": ws.get("val_success_after_warmstart"),
        "warmstart_seconds": ws.get("sft/train_seconds"),
        "val_success_final": vals[-1] if vals else None,
        "val_success_best": max(vals) if vals else None,
        "val_history": state.history,
        "wall_time_s": wall,
        "rl_steps_time_s": rl_step_s,
        **token_rates(trained_tokens, wall, rl_step_s),
        "stop_reason": stop_reason,
        "steps_run": state.steps_run,
        "updates_applied": state.updates_applied,
        "updates_skipped": state.updates_skipped,
        "checkpoint_save_failures": state.checkpoint_save_failures,
        "mean_kept_ratio": state.mean_kept_ratio,
        "val_envs": list(val_names),
        "val_episodes": run.val.groups * run.val.group_size * len(val_names) if run.val.every else 0,
        "env_errors": [{"count": n, "error": text} for text, n in trainer.env_errors.most_common(3)],
        "workdir": trainer.workdir,
        "outputs": [],
    }


def nothing_trained(summary: dict) -> str | None:
    """Why a finished run trained nothing because every episode's env failed (one line naming the commonest
    error and what to do), else None: such a run is a failure, not a result."""
    if not summary.get("steps_run") or summary.get("updates_applied") or not summary.get("env_errors"):
        return None
    if not str(summary.get("stop_reason") or "").startswith("every episode's environment failed"):
        return None
    top = summary["env_errors"][0]
    return (f"Nothing was trained: every episode of the last steps failed in its env ({top['count']} x "
            f"{top['error'][:300]}). Fix what that error names (an env's observation too long for "
            "rollout.max_model_len, a crashing env, a dead env server), then run again.")


def print_summary(summary: dict, tb_dir: str) -> None:
    rows = [
        ("validation success at start", _pct(summary.get("val_success_start"))),
    ]
    if summary.get("val_success_after_warmstart") is not None:
        rows.append(("validation success after warm-start", _pct(summary["val_success_after_warmstart"])))
    rows += [
        ("validation success after RL", _pct(summary.get("val_success_final"))),
        ("best validation success", _pct(summary.get("val_success_best"))),
        ("episodes per validation", f"{summary.get('val_episodes', 0)}"),
        *([("validation success is on", f"{envs[0]} (also {', '.join(envs[1:])}: TensorBoard val/*)")]
          if len(envs := summary.get("val_envs") or []) > 1 else []),
        ("RL steps", f"{summary.get('steps_run', 0)}"),
        ("updates applied / skipped", f"{summary.get('updates_applied', 0)} / {summary.get('updates_skipped', 0)}"),
        ("mean filter kept ratio", _pct(summary.get("mean_kept_ratio"))),
        ("wall time", f"{summary['wall_time_s']:.0f} s"),
        ("RL steps' own time", f"{summary['rl_steps_time_s']:.0f} s"),
        ("trained tokens / s of wall time", _rate(summary["trained_tokens_per_s_wall"])),
        ("trained tokens / s of RL steps", _rate(summary["trained_tokens_per_s_rl_steps"])),
    ]
    if summary.get("stop_reason"):
        rows.append(("early stop", summary["stop_reason"]))
    print("\n" + _table(rows))
    if summary.get("steps_run", 0) and not summary.get("updates_applied", 0):
        print("WARNING no update was applied in this run (every step was filtered out or skipped): the "
              "'after RL' figure is the starting policy's.")
    for line in summary.get("outputs", []):
        print(line)
    print(f"TensorBoard: tensorboard --logdir {tb_dir}\n")


def config_report(run) -> str:
    """`--print_config` of a RunConfig: the resolved config, the custom functions in use and the memory plan per
    device."""
    from ragen_jax import sharding
    from ragen_jax.sharding.planning import plan_model_config, plan_report

    cfg = run
    parts = [resolved_config(run)]
    custom = custom_functions(run)
    if custom:
        parts.append("custom functions:\n" + "\n".join(f"  {k} = {v}" for k, v in custom.items()))
    try:
        model_config, source = plan_model_config(cfg.model)
        mesh = sharding.make_mesh(cfg.mesh)
        parts.append(plan_report(cfg, model_config, mesh.shape, source, sharding.device_memory_bytes()))
    except (OSError, ValueError) as e:
        parts.append(f"memory plan: not available ({e})")
    return "\n\n".join(parts)
