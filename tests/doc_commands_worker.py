"""Checks the docs' python commands without running them: `python tests/doc_commands_worker.py OUT < cases.json`.

Started by tests/test_doc_commands.py in a subprocess (absl's flags, the env and algorithm registries and the
scripts' module-level set-up are process-wide). stdin: a JSON list of {"argv": [...], "cwd": DIR, "validate": true
(false: run.py's parsing only)}; OUT: one JSON list, per case "" (it parses and validates) or the error a reader
would meet. Nothing trains, loads a model or benchmarks:
- `python run.py ...`: run.py's own flag parsing (config file and variant, every --config.* override's key and
  value, its other flags), then validate_config for the --mode given.
- `python SCRIPT.py ...` / `python -m MODULE ...` (this repository's): the script's argparse parses the
  arguments, and the script stops there; the run.py overrides a script passes on (`-- --config.x=1`, sweep's
  `--grid KEY=V1,V2`) are checked as run.py's own, against the script's --config.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER_PROJECTS = ("pytest", "pip", "venv")  # `python -m` modules that are not this repository's


class _Parsed(Exception):
    """Raised where a script's argparse returns: its arguments parsed (`namespace`), its work not started."""

    def __init__(self, namespace: argparse.Namespace):
        super().__init__()
        self.namespace = namespace


def check_run_py(argv: list[str], validate: bool = True) -> str:
    """run.py's parsing (and, if `validate`, validate_config) for `argv` (after `run.py`) -> "" or the FATAL
    message."""
    from absl import flags

    import run
    from ragen_jax.config import validate_config

    for name in [n for n in flags.FLAGS if n.startswith("config.")]:  # the last command's override flags
        delattr(flags.FLAGS, name)
    flags.FLAGS.unparse_flags()
    sys.argv = ["run.py", *argv]  # ml_collections reads the overrides from sys.argv
    try:
        run.parse_flags(sys.argv)
        if validate:
            validate_config(run._CONFIG.value, mode=run._MODE.value)
        if run._CHECKPOINT.value and run._MODE.value != "eval":
            return "--checkpoint is for --mode=eval"
    except SystemExit as e:
        return str(e.code)
    except ValueError as e:
        return str(e)
    return ""


def parse_script(source: str, argv: list[str], run_script) -> tuple[str, argparse.Namespace | None]:
    """Run a script (`run_script()`, its file `source`) up to its argparse call with sys.argv[1:] = `argv`
    -> ("", its parsed arguments), or (argparse's error, None)."""
    with open(source) as f:
        if "argparse" not in f.read():  # it would do its work at once: check only that it takes no arguments
            return (f"{source} takes no arguments (it has no argparse), but the doc passes {argv}" if argv else "",
                    None)
    parse_known_args, own_parse_args = argparse.ArgumentParser.parse_known_args, argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        namespace, extra = parse_known_args(self, args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        raise _Parsed(namespace)

    def known_args(self, args=None, namespace=None):
        raise _Parsed(parse_known_args(self, args, namespace)[0])

    err = io.StringIO()
    sys.argv = [source, *argv]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            argparse.ArgumentParser.parse_args = parse_args
            argparse.ArgumentParser.parse_known_args = known_args
            run_script()
    except _Parsed as parsed:
        return "", parsed.namespace
    except SystemExit as e:
        lines = err.getvalue().strip().splitlines()
        return (lines[-1] if lines else f"exit {e.code}"), None
    except Exception as e:  # noqa: BLE001 - an import or set-up error of the script: the reader meets it too
        return f"{type(e).__name__}: {e}", None
    finally:
        argparse.ArgumentParser.parse_known_args, argparse.ArgumentParser.parse_args = parse_known_args, own_parse_args
    return f"{source} returned without parsing its arguments with argparse", None


def check_passed_on(namespace: argparse.Namespace, argv: list[str]) -> str:
    """The run.py overrides a script that starts run.py (experiments/sweep.py, filter_ablation.py, ...) passes on:
    its `--config.*` words and each value of its `--grid KEY=V1,V2`, checked against its --config -> "" or the
    error."""
    config = getattr(namespace, "config", None)
    if not isinstance(config, str):
        return ""
    overrides = [a for a in argv if a.startswith("--config.")]
    runs = [overrides]
    if getattr(namespace, "grid", None):
        from experiments.sweep import parse_grid

        runs = [[f"--config.{key}={value}", *overrides] for key, values in parse_grid(namespace.grid)
                for value in values]
    for run_argv in runs:
        if error := check_run_py(["--config", config, *run_argv]):
            return f"the run.py command it starts: {error}"
    return ""


def check(argv: list[str], validate: bool = True) -> str:
    """One `python ...` command's argv (after `python`) -> "" or the error (`validate`: run.py's validate_config
    too, else its parsing only)."""
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        if module.split(".")[0] in OTHER_PROJECTS:
            return ""
        spec = importlib.util.find_spec(module)
        if spec is None or not (spec.origin or "").startswith(ROOT):
            return f"no module {module!r} in {ROOT}"
        if spec.submodule_search_locations:  # a package runs its __main__
            main = importlib.util.find_spec(f"{module}.__main__")
            if main is None:
                return f"package {module!r} has no __main__.py, so `python -m {module}` cannot run it"
            source = main.origin
        else:
            source = spec.origin
        return parse_script(source, rest, lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))[0]
    script, rest = argv[0], argv[1:]
    if not os.path.isfile(script):
        return f"no file {script!r} (looked from {os.getcwd()})"
    if os.path.basename(script) == "run.py":
        return check_run_py(rest, validate)
    error, namespace = parse_script(script, rest, lambda: runpy.run_path(script, run_name="__main__"))
    return error or (check_passed_on(namespace, rest) if namespace else "")


def main() -> None:
    out = os.path.abspath(sys.argv[1])
    cases = json.load(sys.stdin)
    sys.path[:0] = [ROOT]
    results = []
    for case in cases:
        os.chdir(case["cwd"])
        results.append(check(case["argv"], validate=case.get("validate", True)))
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
