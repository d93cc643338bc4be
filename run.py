"""ragen-jax entry point: train or evaluate an agent from a config file.

  python run.py --config configs/sokoban.py:tiny
  python run.py --config configs/sokoban.py --config.trainer.total_steps=50 --workdir runs/s50
  python run.py --config configs/sokoban.py:tiny --mode=eval --workdir runs/quickstart   # its latest checkpoint
  python run.py --config configs/sokoban.py:tiny --print_config
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import traceback

# transformers says "PyTorch was not found" on import; only its tokenizers are used here, so the advice is noise
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file[:variants].", lock_config=True)
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval", "sft"], "train (StarPO), eval (validation "
                          "rollouts + metrics + JSONL), or sft (warm-start on demonstrations only).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (TensorBoard, checkpoints, rollouts). "
                               "Default: config.workdir.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "--mode=eval: what to evaluate, an Orbax step folder "
                                  "(RUN/checkpoints/N), a Hugging Face folder, a run folder, or `init` (the "
                                  "untrained model). Default: the workdir's latest checkpoint.")
_PRINT_CONFIG = flags.DEFINE_bool("print_config", False, "Print the resolved config, the custom functions it "
                                  "names and the per-device memory plan, then exit.")
_COMPILE_CACHE = flags.DEFINE_string(
    "compile_cache", None, "Folder of the persistent XLA compilation cache: a later run with the same model and "
    "shapes (a rerun, a sweep's next point, --mode=eval) loads its compiled programs instead of compiling them. "
    "Default: $RAGEN_JAX_COMPILE_CACHE, else JAX's $JAX_COMPILATION_CACHE_DIR, else ~/.cache/ragen_jax/xla; "
    "--compile_cache='' turns it off.")
flags.mark_flag_as_required("config")


def main(argv):
    del argv
    console = logging.StreamHandler(sys.stderr)  # one handler (absl's own would print every line twice)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.root.handlers = [console]
    logging.root.setLevel(logging.INFO)
    for noisy in ("absl", "jax._src", "orbax", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from ragen_jax.errors import ConfigError, RagenError

    try:
        _main(_CONFIG.value, _MODE.value)
    except RagenError as e:  # bad input the user can fix: the message says what to do (a config's, per problem)
        sys.exit(f"FATAL {e if isinstance(e, ConfigError) else _one_line(str(e))}")


def _main(cfg, mode: str) -> None:
    from ragen_jax.config import validate_config

    run = validate_config(cfg, mode=mode)
    workdir = _WORKDIR.value or cfg.workdir
    if (error := _workdir_error(workdir)) and not _PRINT_CONFIG.value:
        sys.exit(f"FATAL {error}")  # before minutes of model loading
    target = None
    if mode == "eval" and run.model.api_base and not _PRINT_CONFIG.value:  # an endpoint: no local model is loaded
        from ragen_jax.trainer.api_eval import run_api_eval

        if _CHECKPOINT.value:
            sys.exit("FATAL --checkpoint names local weights; with --config.model.api_base the endpoint is evaluated: "
                     "drop one of them.")
        print(json.dumps(run_api_eval(_run_config(cfg, run, workdir, mode), workdir), indent=2))
        return
    if mode == "eval" and not _PRINT_CONFIG.value:
        from ragen_jax.trainer.evaluate import eval_target

        target = eval_target(workdir, _CHECKPOINT.value)
    run = _run_config(cfg, run, workdir, mode, target)
    if mode == "sft" or (mode == "train" and not run.trainer.resume):
        from ragen_jax.checkpoint import earlier_run_error

        error = earlier_run_error(os.path.join(os.path.abspath(workdir), "checkpoints"))
        if error and not _PRINT_CONFIG.value:
            sys.exit(f"FATAL {error}")
    from ragen_jax.sharding import maybe_initialize_distributed

    maybe_initialize_distributed(run)  # multi-host: join the other processes before any device is touched
    from tqdm.contrib.logging import logging_redirect_tqdm

    from ragen_jax.trainer import report
    from ragen_jax.trainer.trainer import Trainer

    if _PRINT_CONFIG.value:
        print(report.config_report(run))
        return
    from ragen_jax import compile_cache

    cache = compile_cache.enable(compile_cache.default_dir() if _COMPILE_CACHE.value is None else _COMPILE_CACHE.value)
    logging.info("XLA compilation cache: %s", f"{cache} (--compile_cache='' turns it off)" if cache else "off")
    log_dir = None
    if mode == "eval":
        if target.kind == "hf":  # the policy loads from the folder evaluated
            run = run.replace(**{"model.path": target.path, "model.preset": ""})
        log_dir = os.path.join(target.out_dir, "tb")
    elif _CHECKPOINT.value:
        sys.exit("FATAL --checkpoint is for --mode=eval; to continue a run use --config.trainer.resume=True "
                 "with its --workdir.")
    with logging_redirect_tqdm():  # log lines print above the progress bars instead of through them
        try:
            trainer = Trainer(run, workdir, log_dir=log_dir, mode=mode)
        except KeyboardInterrupt:  # while the model loads or compiles: nothing trained yet
            _exit_interrupted(os.path.join(os.path.abspath(workdir), "checkpoints"))
        if trainer.is_main:
            print(report.banner(trainer, _config_arg(sys.argv, variants=True), eval_target=target), file=sys.stderr,
                  flush=True)
        with trainer.activate_mesh():
            try:
                _run_mode(trainer, target, mode)
            except KeyboardInterrupt:  # outside the RL steps (which stop after the step and save it)
                _exit_interrupted(trainer.checkpointer.directory)
            finally:  # a remote env server's sessions end now, not after its TTL
                trainer.close()


def _run_config(cfg, run, workdir: str, mode: str, target=None):
    """The config a run uses: the command line's, except that eval and resume continue from the run's own
    config.json (eval: of the run whose checkpoint it scores), with only the command line's explicit --config.K=V
    overrides applied (shown as changes)."""
    from ragen_jax.config.files import run_config_with_overrides
    from ragen_jax.trainer.evaluate import run_folder_of

    with cfg.unlocked():
        cfg.workdir = workdir  # config.json, the hparams and --print_config record where this run writes
    run = run.replace(workdir=workdir)
    if mode != "eval" and not (mode == "train" and run.trainer.resume):
        return run
    folder = run_folder_of(target, os.path.abspath(workdir)) if target is not None else os.path.abspath(workdir)
    own, changes = run_config_with_overrides(folder, cfg, sys.argv, mode)
    if own is None:
        return run
    what = "evaluates" if mode == "eval" else "resumes"
    logging.info("This %s with the run's own config (%s/config.json), not the --config file's values%s", what,
                 folder, ": changed by the command line: " + "; ".join(changes) if changes else "")
    return own.replace(workdir=workdir)


def _run_mode(trainer, target, mode: str) -> None:
    if mode == "eval":
        from ragen_jax.trainer.evaluate import run_eval

        print(json.dumps(run_eval(trainer, target), indent=2))
        return
    if mode == "sft":
        from ragen_jax.trainer.run_loop import warm_start_only

        metrics, lines = warm_start_only(trainer, _config_arg(sys.argv, variants=True))
        print(json.dumps(metrics, indent=2))
        print("\n".join(lines))
        return
    summary = trainer.train()
    from ragen_jax.trainer import report
    from ragen_jax.trainer.report import print_summary

    print_summary(summary, trainer.log_dir)
    if failure := report.nothing_trained(summary):
        sys.exit(f"FATAL {failure}")
    if summary.get("stopped_by_signal"):  # a scheduler sees the run did not finish (128 + the signal's number)
        sys.exit(128 + signal.Signals[summary["stopped_by_signal"]].value)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with one readable error (no traceback) for unknown keys and bad config files."""
    # Before the config file runs: its imports (a module that calls envs.register) and the import paths it
    # names (my_pkg.envs:MyEnv) resolve from the folder run.py is started in.
    if os.getcwd() not in sys.path:
        sys.path.insert(1, os.getcwd())
    try:
        rest = flags.FLAGS(argv)
    except flags.Error as e:
        failure = _config_parse_failure(str(e), _config_arg(argv, variants=True))
        if failure:
            sys.exit(f"FATAL {failure}")
        if _config_arg(argv) == "?":  # absl's own words: "flag --config=None: Flag --config must have a value ..."
            sys.exit(f"FATAL no --config given: pass --config=path/to/config.py[:variants], e.g. "
                     f"--config=configs/sokoban.py:tiny ({_known_configs()}); --helpshort lists the other flags.")
        _fatal(_drop_traceback(str(e)))
    except OSError as e:  # an override applied to a config file that failed to load
        _config_not_loaded(_config_arg(argv), e)
    except Exception as e:  # noqa: BLE001 - the config file's own error (SyntaxError, NameError, ...), or an override's
        failure = _config_file_failure(e, _config_arg(argv))
        if failure:
            sys.exit(f"FATAL {failure}")
        if not isinstance(e, (KeyError, AttributeError)):
            raise
        if isinstance(e, AttributeError) and "'get_config'" in str(e):  # e.g. configs/base.py
            sys.exit(f"FATAL config file {_config_arg(argv)!r} defines no get_config(arg), so it is not a run config; "
                     f"pass one that does, e.g. --config=configs/sokoban.py:tiny. {_known_configs()}.")
        # an override of a key the config does not have
        while e.args and isinstance(e.args[0], BaseException):  # ml_collections wraps its KeyError
            e = e.args[0]
        text = str(e.args[0]) if e.args else str(e)
        found = re.search(r"'([^']+)'", text)
        key = found.group(1) if found else text.splitlines()[0] if text else "?"
        overrides = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
        culprit = next((o for o in overrides if key in o[len("--config."):].split(".")), None)
        hint = "".join(f" {line.strip()}" for line in text.splitlines()[1:])
        where = f" in {culprit}" if culprit else ""
        section = next((s for s in ("env.kwargs", "val.env_kwargs")
                        if culprit and culprit.startswith(f"--config.{s}.")), None)
        if section:  # free-form constructor arguments: the config file decides which exist
            _fatal(f"unknown config key {key!r}{where}: config.{section} holds the env's constructor arguments that "
                   f"the config file sets, and the command line can only change those. Set it in a config file "
                   f"(c.{section}.{key} = ...), or check its spelling.")
        _fatal(f"unknown config key {key!r}{where}.{hint} Config keys cannot be added from the command line; "
               "see the config file (and configs/base.py) for the known keys.")
    try:
        getattr(_CONFIG.value, "env", None)  # a config file that failed to load raises on first use
    except OSError as e:
        _config_not_loaded(_config_arg(argv), e)
    return rest


def _config_arg(argv: list[str], variants: bool = False) -> str:
    """The config file named by --config on the command line (its variants cut off unless `variants`)."""
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith(("--config=", "-config=")):
            value = arg.split("=", 1)[1]
        elif arg in ("--config", "-config") and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None:
            return value if variants else value.split(":", 1)[0]
    return "?"


def _config_not_loaded(path: str, error: OSError) -> None:
    """One FATAL line for the --config file `path` that is missing or failed to load (`error`: the failure)."""
    if os.path.isfile(path):
        cause = error.__cause__ or error  # ml_collections re-raises the load error on first use
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
        sys.exit(f"FATAL config file {path!r} could not be loaded: {lines[-1] if lines else type(cause).__name__}")
    sys.exit(f"FATAL config file {path!r} does not exist (looked from {os.getcwd()}); pass "
             f"--config=path/to/config.py[:variants], e.g. --config=configs/sokoban.py:tiny. {_known_configs()}.")


def _known_configs() -> str:
    configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
    known = []
    for name in sorted(os.listdir(configs)):
        if name.endswith(".py") and not name.startswith("_"):
            with open(os.path.join(configs, name)) as f:
                if "\ndef get_config(" in f.read():  # base.py holds the defaults the others start from
                    known.append(name)
    return f"Config files in {configs}: {', '.join(known)}"


def _config_file_failure(error: BaseException, path: str) -> str | None:
    """One line for an `error` raised by the config file `path` itself (its syntax, or its get_config), else None
    (e.g. an override's unknown key, which ml_collections raises without running the file)."""
    target = os.path.realpath(path)
    if isinstance(error, SyntaxError) and error.filename and os.path.realpath(error.filename) == target:
        code = (error.text or "").strip()
        return (f"config file {path!r} has a syntax error at line {error.lineno}: {error.msg}"
                f"{f' ({code})' if code else ''}; fix the file, or pass another --config.")
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
             if os.path.realpath(frame.filename) == target]
    if not lines:
        return None
    return (f"config file {path!r} could not be loaded: {type(error).__name__}: {error} (raised at line {lines[-1]} "
            "of that file); fix the file, or pass another --config.")


def _config_parse_failure(message: str, config: str) -> str | None:
    """One line for absl's "Error whilst parsing config file" `message` (a ValueError or TypeError that the config
    file `config` (path[:variants]) or an unknown variant raised; ml_collections embeds the traceback), else None."""
    if "Error whilst parsing config file" not in message:
        return None
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    error = lines[-1]
    frames = re.findall(r'File "([^"]+)", line (\d+)', message)
    path = config.split(":", 1)[0]
    if frames and os.path.realpath(frames[-1][0]) == os.path.realpath(path):
        return (f"config file {path!r} could not be loaded: {error} (raised at line {frames[-1][1]} of that file); "
                "fix the file, or pass another --config.")
    return f"--config={config}: {error.removeprefix('ValueError: ')}"


def _workdir_error(workdir: str) -> str | None:
    """Why this process cannot create or write `workdir`, judged on its nearest existing folder (nothing is
    created), else None."""
    existing = os.path.abspath(workdir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"--workdir={workdir} cannot be created: {existing} is a file, not a folder. Pass another --workdir."
    if not os.access(existing, os.W_OK | os.X_OK):
        return (f"--workdir={workdir} cannot be written: this user may not write in {existing} (or its file system "
                "is read-only). Pass another --workdir, or fix the folder's permissions.")
    return None


def _exit_interrupted(checkpoints: str) -> None:
    """End a run stopped by Ctrl-C outside the RL steps with one line (what is on disk, how to go on) and the
    shell's code for it, 128 + SIGINT."""
    from ragen_jax.checkpoint import finished_steps

    steps = finished_steps(checkpoints)
    if steps:
        print(f"Interrupted (Ctrl-C). Checkpoints on disk: {checkpoints}/{steps[-1]} (the latest); continue with "
              "--config.trainer.resume=True and the same --workdir.", file=sys.stderr)
    else:
        print(f"Interrupted (Ctrl-C) before any checkpoint was written ({checkpoints} holds none): nothing to "
              "resume.", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _drop_traceback(message: str) -> str:
    """A message with an embedded traceback (ml_collections adds one) cut to the exception line."""
    lines = message.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("Traceback (most recent")), None)
    if start is None:
        return message
    rest = [line.strip() for line in lines[start + 1:] if line.strip()]
    return "\n".join(lines[:start] + rest[-1:])


def _fatal(message: str) -> None:
    """Exit with one line (a sweep's log, or a scheduler's, shows the last line of a failed run)."""
    sys.exit(f"FATAL Flags parsing error: {_one_line(message)} (--helpshort or --helpfull lists the flags)")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
