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


_EXAMPLE = re.compile(r"<!-- readme-test: example -->\n```python\n(.*?)```", re.DOTALL)


def readme_example() -> str:
    found = _EXAMPLE.findall(readme())
    assert len(found) == 1, "README.md has no <!-- readme-test: example --> python block"
    return found[0]


def test_the_readme_test_command_is_what_make_test_runs():
    """CI runs `make test` (.ci/run); README shows the same pytest command for a reader's own environment."""
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "make test" in f.read()
    with open(os.path.join(ROOT, "Makefile")) as f:
        make = re.search(r"\$\(PY\) (-m pytest [^|]*?)\s*\|\|", f.read())
    assert make, "the Makefile's test target runs no `$(PY) -m pytest ...`"
    assert f"python {make.group(1)}" in readme().splitlines(), f"README's test command is not `python {make.group(1)}`"


def test_the_readme_example_configures_a_valid_run(monkeypatch):
    """The example up to building the Trainer, in process: its loss and env register, its config validates, and the
    misspelt key its comment promises to catch is caught (tests/test_readme.py's slow test runs it whole)."""
    from envs import registry
    from ragen_jax import algos
    from ragen_jax.config import ConfigError, validate_config

    code, _, rest = readme_example().partition("trainer = Trainer(")
    assert "train_step(0)" in rest
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the example's env leaves with the test
    namespace: dict = {"__name__": "readme_example"}  # as a script has one: its functions get a __module__
    try:
        exec(compile(code, "README.md", "exec"), namespace)
        cfg = namespace["cfg"]
        run = validate_config(cfg)
        assert run.env.name == "SayNumber" and run.algo.policy_loss == "plain_pg" and run.val.every == 0
        assert registry.get_spec("SayNumber").kind == "host"
        cfg.trainer.totl_steps = 3
        with pytest.raises(ConfigError, match="total_steps"):
            validate_config(cfg)
    finally:
        if "plain_pg" in algos.POLICY_LOSSES:
            algos.POLICY_LOSSES.unregister("plain_pg")


@pytest.mark.slow
def test_the_readme_example_trains_one_step(tmp_path):
    """The example as a reader runs it from the repository root (its workdir moved to a temporary folder)."""
    import subprocess
    import sys

    code = readme_example().replace('"runs/python_example"', repr(str(tmp_path / "run")))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-"], input=code, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    success, loss = (float(x) for x in proc.stdout.split()[-2:])
    assert 0.0 <= success <= 1.0 and loss == loss  # a number, not NaN
    assert (tmp_path / "run" / "tb").is_dir()
