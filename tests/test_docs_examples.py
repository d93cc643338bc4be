"""The code in docs/custom_envs.md and docs/custom_losses.md runs as written, so the docs cannot rot.

A fenced block right after `<!-- doc-test: NAME -->` is a file the reader saves as NAME, or, for
a NAME starting with "run", a command they run from the folder holding those files.
"""

import importlib
import json
import os
import re
import shlex
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.monitoring import is_valid_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BLOCK = re.compile(r"<!-- doc-test: (\S+) -->\n```\w*\n(.*?)```", re.DOTALL)
# One step of the tiny model on a few episodes: the doc's command, made cheap.
BUDGET = ["--config.trainer.total_steps=1", "--config.val.every=0", "--config.warmstart.enabled=False",
          "--config.env.groups=2", "--config.env.group_size=2", "--config.trainer.mini_batch_size=4",
          "--config.trainer.micro_batch_size=4", "--config.rollout.response_length=16",
          "--config.diagnostics.every=0", "--config.trainer.export_hf=False", "--config.model.tiny.num_layers=1",
          "--config.model.tiny.hidden_size=64", "--config.model.tiny.intermediate_size=128"]
# The same with a one-step warm start instead of none, for a command whose own flags must turn the warm start off.
WARMSTART_BUDGET = [a for a in BUDGET if a != "--config.warmstart.enabled=False"] + [
    "--config.warmstart.steps=1", "--config.warmstart.num_demos=2", "--config.val.groups=2",
    "--config.val.batch_size=2"]


def doc_blocks(doc: str) -> dict[str, str]:
    """{NAME: block text} of the marked blocks of docs/<doc>."""
    with open(os.path.join(ROOT, "docs", doc)) as f:
        blocks = dict(_BLOCK.findall(f.read()))
    assert blocks, f"docs/{doc} has no <!-- doc-test: NAME --> blocks"
    return blocks


def save_files(doc: str, folder, command: str = "run") -> list[str]:
    """Write the doc's file blocks into `folder` -> its `command` block as an argv list (run.py from ROOT)."""
    blocks = doc_blocks(doc)
    for name, text in blocks.items():
        if not name.startswith("run"):
            (folder / name).write_text(text)
    argv = shlex.split(blocks[command].replace("\\\n", " "))
    assert argv[:2] == ["python", "run.py"], argv
    return [sys.executable, os.path.join(ROOT, "run.py"),
            *[a.replace("configs/", os.path.join(ROOT, "configs") + "/", 1) if a.startswith("--config=configs/")
              or a.startswith("configs/") else a for a in argv[2:]]]


@pytest.fixture()
def doc_module(tmp_path, monkeypatch):
    """Import a module the doc defines, from the folder its files were saved in (and forget it after)."""
    imported = []

    def load(doc: str, name: str):
        save_files(doc, tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        imported.append(name)
        return importlib.import_module(name)

    yield load
    for name in imported:
        sys.modules.pop(name, None)


def test_custom_env_doc_example_plays_and_its_config_validates(doc_module, tmp_path):
    from envs.batch import make_env_batch
    from envs.registry import get_spec
    from ragen_jax.config import validate_config

    env = doc_module("custom_envs.md", "my_envs").GuessNumber()
    assert env.reset(3) == ("Make a guess.", {})  # secret 4
    _, reward, terminated, truncated, info = env.step("four")  # the tiny model answers anything
    assert (reward, terminated, truncated, info["action_is_valid"]) == (0.0, False, False, False)
    assert env.step("²")[4]["action_is_valid"] is False  # a digit int() cannot read is an invalid answer, no crash
    env.reset(3)
    assert env.step("2")[0] == "Wrong, go higher." and env.step(" 9 ")[0] == "Wrong, go lower."
    assert env.step("4")[1:4] == (1.0, True, False)
    env.reset(3)
    assert [env.step("x")[3] for _ in range(5)] == [False] * 4 + [True]  # five tries, then truncated
    assert get_spec("my_envs:GuessNumber").kind == "host"
    batch = make_env_batch("my_envs:GuessNumber", 2)
    try:
        batch.reset([3, 3])
        out = batch.step([["?"], ["4"]], np.array([True, True]))
        assert out.errors == ["", ""] and out.success.tolist() == [False, True]
    finally:
        batch.close()
    spec = importlib.util.spec_from_file_location("guess_config", tmp_path / "guess_config.py")
    config_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config_module)
    cfg = config_module.get_config("tiny")
    assert cfg.env.name == "my_envs:GuessNumber" and cfg.model.preset == "tiny"
    validate_config(cfg)


def test_custom_losses_doc_example_registers_and_computes(doc_module):
    from configs.sokoban import get_config
    from ragen_jax import algos
    from ragen_jax.config import validate_config

    doc_module("custom_losses.md", "my_algos")
    adv_fn = algos.ADVANTAGE_ESTIMATORS.get("my_algos:median_baseline")
    assert algos.ADVANTAGE_ESTIMATORS.get("median_baseline") is adv_fn
    rewards = jnp.array([[0.0, 1.0], [0.0, 3.0], [0.0, 0.0]])
    mask = jnp.ones((3, 2))
    inputs = algos.AdvantageInputs(token_level_rewards=rewards, response_mask=mask)
    adv, returns = adv_fn(inputs)
    np.testing.assert_allclose(adv, [[0, 0], [2, 2], [-1, -1]])
    loss, metrics = algos.POLICY_LOSSES.get("clipped_pg")(jnp.zeros((3, 2)), jnp.zeros((3, 2)), adv, mask)
    np.testing.assert_allclose(loss, -adv)
    assert metrics == {}
    cfg = get_config("tiny")
    cfg.algo.custom_adv_estimator, cfg.algo.custom_policy_loss = "my_algos:median_baseline", "my_algos:clipped_pg"
    validate_config(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("doc, command, tag, budget", [
    ("custom_envs.md", "run", "GuessNumber", BUDGET), ("custom_losses.md", "run", "SimpleSokoban", BUDGET),
    ("custom_envs.md", "run_override", "GuessNumber", WARMSTART_BUDGET)])
def test_the_docs_run_command_trains_one_step(doc, command, tag, budget, tmp_path):
    """The doc's own command (plus a one-step budget) from the folder holding its files; every metric it
    logs keeps its name in TensorBoard (no renaming message); a custom env's instruction reaches the prompt."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = save_files(doc, tmp_path, command)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # run.py itself puts the current folder on the import path
    proc = subprocess.run([*argv, *budget, "--config.trainer.dump_rollouts_every=1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "is illegal" not in out and "not a valid TensorBoard tag" not in out
    workdir = argv[argv.index("--workdir") + 1] if "--workdir" in argv else next(
        a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
    acc = EventAccumulator(str(tmp_path / workdir / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert f"train/{tag}/success" in tags and f"train/{tag}/pass_at_2" in tags
    assert [t for t in tags if not is_valid_tag(t)] == []
    if tag == "GuessNumber":
        with open(tmp_path / workdir / "rollouts" / "train_step1.jsonl") as f:
            system = json.loads(f.readline())["messages"][0]["content"]
        assert "Guess the secret number" in system, system


def test_custom_filter_metric_doc_example_scores_groups_and_validates(doc_module):
    from configs.sokoban import get_config
    from ragen_jax.config import validate_config
    from ragen_jax.filtering import FILTER_METRICS, FilterConfig, filter_rollouts

    module = doc_module("custom_losses.md", "my_filters")
    try:
        rewards = np.array([0.0, 1.0, 3.0, 5.0, 5.0, 5.0, -2.0, 9.0])
        valid = np.array([1, 1, 1, 1, 1, 1, 1, 0], bool)  # the last group's 9.0 failed: it does not count
        res = filter_rollouts(rewards, 2, FilterConfig(metric="my_filters:reward_range", strategy="top_k",
                                                       value=0.5), valid=valid)
        np.testing.assert_allclose(res.scores, [1.0, 2.0, 0.0, 0.0])
        assert res.kept_groups.tolist() == [0, 1]
        assert FILTER_METRICS.get("reward_range") is module.reward_range
        cfg = get_config("tiny")
        cfg.filter.metric = "my_filters:reward_range"
        validate_config(cfg)
    finally:
        FILTER_METRICS.unregister("reward_range")


def run_snippet(name: str) -> dict:
    """Run docs/api.md's block `name` as a script does (from the repository root, which is on the import path)."""
    namespace = {"__name__": name.removesuffix(".py")}
    exec(compile(doc_blocks("api.md")[name], f"docs/api.md:{name}", "exec"), namespace)
    return namespace


def test_api_doc_config_snippet_validates_and_refuses_a_misspelt_key(capsys):
    from ragen_jax.config import RunConfig

    namespace = run_snippet("api_config.py")
    assert isinstance(namespace["run"], RunConfig) and namespace["run"].env.batch_size == 128
    out = capsys.readouterr().out
    assert "config.trainer.totl_steps is not a config key" in out and "total_steps" in out


def test_api_doc_algos_snippet_computes_grpo_advantages():
    namespace = run_snippet("api_algos.py")
    np.testing.assert_allclose(namespace["advantages"][:, -1], [0.7071, -0.7071, 0.7071, -0.7071], atol=1e-3)
    assert float(namespace["loss"].sum()) == pytest.approx(0.0, abs=1e-6)  # ratio 1: -A summed over each group is 0


def test_api_doc_envs_snippet_plays_a_host_env():
    namespace = run_snippet("api_envs.py")
    assert namespace["terminated"] is True and namespace["text"].startswith("Target:")
    assert type(namespace["batch"]).__name__ == "JaxEnvBatch"


@pytest.mark.slow
def test_api_doc_stages_snippet_runs_one_step_by_hand(tmp_path):
    code = doc_blocks("api.md")["api_stages.py"].replace('"runs/stages_example"', repr(str(tmp_path / "run")))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-"], input=code, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    episodes, kept, loss = proc.stdout.split()[-3:]
    assert int(episodes) == 8 and float(kept) == 1.0 and float(loss) == float(loss)
