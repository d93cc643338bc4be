"""README.md, as a newcomer reads it: its eval command scores what its training commands trained, every
doc in docs/ is reachable from it, and every config the docs name loads and validates."""

import glob
import importlib
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def run_commands(text: str) -> list[str]:
    return [line.split("#")[0].strip() for line in text.splitlines() if line.strip().startswith("python run.py")]


def workdir(command: str) -> str | None:
    found = re.search(r"--workdir[= ](\S+)", command)
    return found.group(1) if found else None


def test_the_eval_command_names_a_workdir_a_training_command_writes():
    commands = run_commands(readme())
    trained = {workdir(c) for c in commands if "--mode=" not in c} - {None}
    evals = [c for c in commands if "--mode=eval" in c]
    assert evals and trained
    for command in evals:
        assert workdir(command) in trained, (
            f"{command!r} evaluates no workdir that a README training command writes ({sorted(trained)}): "
            "without --workdir it scores config.workdir, which the quickstart does not write")


def test_every_doc_is_linked_from_the_readme():
    text = readme()
    docs = sorted(f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    assert [d for d in docs if f"docs/{d}" not in text] == []


def _named_configs() -> list[str]:
    """Every `configs/NAME.py[:variants]` that README.md or a doc in docs/ names (base.py aside: not a run config)."""
    named = set()
    for path in [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md"))]:
        with open(path) as f:
            found = re.findall(r"configs/(\w+)\.py(?::([\w.,]+))?", f.read())
            named.update(f"{m[0]}:{m[1].strip(',.')}" for m in found)
    return sorted(n for n in named if not n.startswith("base:"))


def test_the_docs_name_the_configs_a_newcomer_runs():
    assert {"sokoban:", "sokoban:tiny", "sokoban:filter", "frozenlake:tiny", "bandit:tiny"} <= set(_named_configs())


@pytest.mark.parametrize("named", _named_configs())
def test_every_config_the_docs_name_loads_and_validates(named):
    from ragen_jax.config import validate_config

    module, variants = named.split(":")
    cfg = importlib.import_module(f"configs.{module}").get_config(variants or None)
    for mode in ("train", "eval"):
        validate_config(cfg, mode=mode)
