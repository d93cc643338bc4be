"""run.py's command line: bad config input fails fast, in one readable message, before any model work."""

import json
import os
import shlex
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 180


def run_cli(*args: str, workdir, mode: str = "eval") -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "run.py", f"--mode={mode}", f"--workdir={workdir}", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def assert_fails_cleanly(proc: subprocess.CompletedProcess, workdir, *needles: str) -> str:
    """Non-zero exit, no traceback, every needle in the message, nothing built or written."""
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"
    assert "compiling" not in out and not os.path.exists(workdir), out
    return out


def assert_one_fatal_line(proc: subprocess.CompletedProcess, workdir, *needles: str) -> str:
    """As assert_fails_cleanly, and stderr has exactly one line starting with FATAL, which holds the needles."""
    assert_fails_cleanly(proc, workdir)
    fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL")]
    assert len(fatal) == 1, proc.stderr
    for needle in needles:
        assert needle in fatal[0], f"{needle!r} not in {fatal[0]!r}"
    return fatal[0]


def test_missing_config_file_is_one_fatal_line(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/no_such_config.py:tiny", workdir=wd)
    assert_one_fatal_line(proc, wd, "configs/no_such_config.py", "does not exist", "configs/sokoban.py")
    proc = run_cli("--config=configs/no_such_config.py", "--config.trainer.total_steps=3", workdir=wd)
    assert_one_fatal_line(proc, wd, "configs/no_such_config.py", "does not exist")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_full_size_config_without_the_model_is_one_fatal_line(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sokoban.py", workdir=wd, mode="train")
    line = assert_one_fatal_line(proc, wd, "Qwen/Qwen2.5-3B-Instruct", "hf download Qwen/Qwen2.5-3B-Instruct",
                                 "--config.model.path", ":tiny")
    assert "huggingface-cli" not in line  # the hub's current command is `hf`


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_lean_without_a_server_stops_before_any_rollout(tmp_path):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/lean.py:tiny", f"--config.env.kwargs.server_url={url}", workdir=wd, mode="train")
    assert_one_fatal_line(proc, wd, url, "docs/lean.md", "--config.env.kwargs.server_url")


@pytest.mark.parametrize("args, needles", [
    (["--config=configs/searchqa.py:tiny,dense"], ["SearchQA", "model_dir", "--config.env.kwargs.model_dir"]),
    (["--config=configs/countdown.py:tiny", "--config.env.kwargs.data_path={empty}"],
     ["Countdown", "No usable Countdown tasks", "{empty}"]),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_env_its_kwargs_cannot_build_is_one_fatal_line(tmp_path, args, needles):
    """An env's setup problem (a data file without usable rows, dense retrieval without its encoder folder) is one
    FATAL line naming the env and the fix; before, it was a ValueError traceback from inside the trainer."""
    empty = tmp_path / "tasks.jsonl"
    empty.write_text("")
    wd = tmp_path / "run"
    proc = run_cli(*[a.format(empty=empty) for a in args], workdir=wd, mode="train")
    assert_one_fatal_line(proc, wd, *[n.format(empty=empty) for n in needles], "raised at ")  # where, for a bug


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_unknown_key_names_the_flag(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/countdown.py:tiny", "--config.trainer.no_such_key=1", workdir=wd)
    assert_fails_cleanly(proc, wd, "unknown config key 'no_such_key'", "--config.trainer.no_such_key")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_misspelled_key_suggests_the_right_one(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/frozenlake.py:tiny", "--config.env.groupz=3", workdir=wd)
    assert_fails_cleanly(proc, wd, "unknown config key 'groupz'", "--config.env.groupz", '"groups"')


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_unknown_section(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/bandit.py:tiny", "--config.no_section.x=1", workdir=wd)
    assert_fails_cleanly(proc, wd, "unknown config key 'no_section'", "--config.no_section.x")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_wrong_type(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/countdown.py:tiny", "--config.env.groups=abc", workdir=wd)
    assert_fails_cleanly(proc, wd, "--config.env.groups=abc", "invalid literal for int()")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bad_values_are_all_reported_at_once(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sudoku.py:tiny", "--config.rollout.context_mode=bogus",
                   "--config.env.name=NoSuchEnv", "--config.rollout.response_length=4096", workdir=wd)
    assert_fails_cleanly(proc, wd, "config.rollout.context_mode='bogus'", "'single_turn'",
                         "Unknown environment 'NoSuchEnv'", "config.rollout.response_length (4096) must be < rollout.max_model_len (2048)")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_oracle_warm_start_on_a_host_env_is_one_fatal_line(tmp_path):
    """sokoban.py:tiny warm-starts on oracle play; on a host env that fails before any model work, with the fix."""
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sokoban.py:tiny", "--config.env.name=envs.serve.toy:CounterEnv",
                   workdir=wd, mode="train")
    assert_one_fatal_line(proc, wd, "config.env.name='envs.serve.toy:CounterEnv' is a host env",
                          "config.warmstart.enabled=False")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_fresh_run_into_an_earlier_runs_checkpoints_is_one_fatal_line(tmp_path):
    """Without resume, a run (or a warm start) in a workdir holding checkpoints would overwrite or mix with them."""
    wd = tmp_path / "run"
    os.makedirs(wd / "checkpoints" / "3")
    for mode in ("train", "sft"):
        proc = run_cli("--config=configs/bandit.py:tiny", workdir=wd, mode=mode)
        fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL")]
        assert proc.returncode != 0 and len(fatal) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "checkpoints [3]" in fatal[0] and "--config.trainer.resume=True" in fatal[0], fatal[0]
        assert sorted(os.listdir(wd)) == ["checkpoints"]  # nothing built or written


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_unknown_variant_lists_the_known_ones(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sudoku.py:tiny,nosuch", workdir=wd)
    assert_fails_cleanly(proc, wd, "Unknown config variant 'nosuch'", "'finishable'", "'medium'")
    proc = run_cli("--config=configs/sokoban.py:tiyn", workdir=wd)
    assert_fails_cleanly(proc, wd, "Unknown config variant 'tiyn'. Did you mean 'tiny'?")


@pytest.mark.slow
def test_eval_prints_metrics_and_writes_jsonl(tmp_path):
    """The documented command on a tiny Countdown run: metrics as JSON on stdout, one JSONL line per episode; its
    compiled programs land in the compilation cache it is given."""
    wd, cache = tmp_path / "run", tmp_path / "xla"
    proc = run_cli("--config=configs/countdown.py:tiny", "--config.val.groups=3", "--config.val.batch_size=3",
                   "--config.env.groups=1", "--config.env.group_size=2", "--config.rollout.response_length=16",
                   "--config.rollout.max_model_len=512", f"--compile_cache={cache}", "--checkpoint=init", workdir=wd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"XLA compilation cache: {cache}" in proc.stderr and os.listdir(cache)
    metrics = json.loads(proc.stdout[proc.stdout.index("{"):])
    for name in ("success", "num_actions", "pass_at_1", "action_is_valid", "action_is_effective"):
        assert f"val/Countdown/{name}" in metrics
    assert "val/response_length" in metrics and metrics["eval/num_episodes"] == 3
    assert "Evaluated the freshly initialised model" in proc.stdout  # an empty workdir: no checkpoint
    with open(wd / "eval" / "init" / "rollouts.jsonl") as f:
        records = [json.loads(line) for line in f]
    assert [r["custom_id"] for r in records] == ["traj_0", "traj_1", "traj_2"]
    assert [r["metadata"]["seed"] for r in records] == [123, 124, 125]


@pytest.mark.parametrize("path", ["/nonexistent", "./models/qwen", "~/models/qwen", "a/b/c"])
def test_a_missing_model_folder_is_named_as_a_folder_not_a_hub_id(path):
    from ragen_jax.models.sources import resolve_model_path

    with pytest.raises(FileNotFoundError, match="does not exist") as e:
        resolve_model_path(path)
    assert "hf download" not in str(e.value) and "--config.model.path" in str(e.value)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_eval_of_another_models_checkpoint_is_one_fatal_line(tmp_path):
    """A workdir whose checkpoint another model wrote: the differing tensors and the fix, not Orbax's traceback."""
    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer

    wd = tmp_path / "run"
    Checkpointer(str(wd / "checkpoints")).save(0, {"actor": {"w": jnp.ones(3)}}, {"step": 0, "counters": {}})
    proc = run_cli("--config=configs/bandit.py:tiny", "--compile_cache=", workdir=wd)
    fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL")]
    assert proc.returncode != 0 and len(fatal) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Checkpoint 0 in" in fatal[0] and "does not fit" in fatal[0] and "another --workdir" in fatal[0], fatal[0]


@pytest.mark.parametrize("body, needles", [
    ("def get_config(arg=None)\n    return None\n", ["has a syntax error at line 1", "expected ':'", "fix the file"]),
    ("def get_config(arg=None):\n    raise KeyError('boom')\n",
     ["could not be loaded: KeyError: 'boom'", "line 2 of that file", "fix the file"]),
    ("import no_such_module_here\n", ["could not be loaded: ModuleNotFoundError", "no_such_module_here", "line 1"]),
    # ValueError / TypeError reach run.py as absl's flag error, with ml_collections' traceback inside it
    ("def get_config(arg=None):\n    raise ValueError('bad batch')\n",
     ["could not be loaded: ValueError: bad batch", "line 2 of that file", "fix the file"]),
    ("def get_config(arg=None):\n    return 1 + 'a'\n",
     ["could not be loaded: TypeError: unsupported operand", "line 2 of that file", "fix the file"]),
])
def test_a_config_file_that_fails_to_load_is_one_fatal_line_naming_it(tmp_path, body, needles):
    """The config file's own error (not an override's unknown key): its line, without absl's traceback."""
    path = tmp_path / "my_config.py"
    path.write_text(body)
    wd = tmp_path / "run"
    for extra in ((), ("--config.trainer.total_steps=3",)):
        proc = run_cli(f"--config={path}:tiny", *extra, workdir=wd, mode="train")
        fatal = assert_one_fatal_line(proc, wd, f"config file '{path}'", *needles)
        assert "unknown config key" not in fatal


@pytest.mark.parametrize("damage, needle", [
    ("no_chat_template", "has no chat template"),
    ("bad_json", "valid JSON"),  # the tokenizer, loaded first, reads config.json too
    ("missing_key", "lacks the required key 'hidden_size'"),
    ("bad_heads", "must be a multiple of num_kv_heads"),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_model_folder_that_cannot_serve_is_one_fatal_line(tmp_path, damage, needle):
    """A model folder's problems (read before any weight loads) are one FATAL line, never a traceback; a
    tokenizer without a chat template (a base model's) is one at load time, not at the first rollout."""
    from ragen_jax.models import make_tiny_model, save_pretrained

    folder = tmp_path / "model"
    save_pretrained(make_tiny_model(seed=0)[0], folder, make_tiny_model(seed=0)[1])
    config = json.loads((folder / "config.json").read_text())
    if damage == "no_chat_template":
        (folder / "chat_template.jinja").unlink()
    elif damage == "bad_json":
        (folder / "config.json").write_text('{"model_type": "qwen2", ')
    elif damage == "missing_key":
        del config["hidden_size"]
        (folder / "config.json").write_text(json.dumps(config))
    else:
        config["num_attention_heads"] = 3
        (folder / "config.json").write_text(json.dumps(config))
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/bandit.py:tiny", "--config.model.preset=", f"--config.model.path={folder}",
                   "--config.warmstart.enabled=False", "--compile_cache=", workdir=wd, mode="train")
    assert_one_fatal_line(proc, wd, needle)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_workdir_that_cannot_be_created_is_one_fatal_line_before_the_model_loads(tmp_path):
    (tmp_path / "a_file").write_text("")
    wd = tmp_path / "a_file" / "run"
    for mode in ("train", "eval"):
        proc = run_cli("--config=configs/bandit.py:tiny", workdir=wd, mode=mode)
        fatal = assert_one_fatal_line(proc, wd, f"--workdir={wd} cannot be created", "is a file, not a folder",
                                      "Pass another --workdir")
        assert "model" not in proc.stderr.replace(fatal, ""), proc.stderr  # nothing was built first


CTRL_C_WHILE_BUILDING = """
import os, runpy, signal, sys, time
import ragen_jax.trainer.trainer as loop

def interrupted_init(self, *args, **kwargs):  # Ctrl-C arrives while the model loads
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)

loop.Trainer.__init__ = interrupted_init
sys.argv = ["run.py", *sys.argv[1:]]
runpy.run_path("run.py", run_name="__main__")
"""


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("checkpoints", [[], [3]])
def test_ctrl_c_while_the_model_loads_is_one_line_saying_what_is_on_disk(tmp_path, checkpoints):
    """Before the RL steps there is nothing to save: no KeyboardInterrupt traceback, one line naming the latest
    checkpoint (a resumed run) or that there is none, and the shell's code for Ctrl-C (130)."""
    wd = tmp_path / "run"
    for step in checkpoints:
        os.makedirs(wd / "checkpoints" / str(step))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_BUILDING, "--config=configs/bandit.py:tiny",
                           f"--workdir={wd}", f"--config.trainer.resume={bool(checkpoints)}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    if checkpoints:
        assert last.startswith("Interrupted (Ctrl-C). Checkpoints on disk:") and "checkpoints/3" in last, last
        assert "--config.trainer.resume=True" in last
    else:
        assert "before any checkpoint was written" in last and "nothing to resume" in last, last


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_config_file_imports_the_modules_beside_it_from_the_folder_run_py_runs_in(tmp_path):
    """docs/custom_envs.md: run.py puts the current folder on the import path, so a config file there may import
    the module that registers its env (envs.register) and then name the env by its registered name."""
    (tmp_path / "my_reg_envs.py").write_text(
        "from envs import register\nfrom envs.serve.toy import CounterEnv\n"
        "register('MyCounter', CounterEnv, kind='host')\n")
    (tmp_path / "my_reg_config.py").write_text(
        "import my_reg_envs  # noqa: F401  registers MyCounter\n"
        "from configs.base import apply_tiny, apply_variants, get_base_config\n\n\n"
        "def get_config(arg=None):\n    c = get_base_config()\n    c.env.name = 'MyCounter'\n"
        "    return apply_variants(c, arg, {'tiny': apply_tiny})\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "run.py"), "--config=my_reg_config.py:tiny",
                           "--print_config"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"name": "MyCounter"' in proc.stdout, proc.stdout


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_remote_env_without_its_server_is_one_fatal_line_before_any_model_work(tmp_path):
    """docs/remote_envs.md: a RemoteEnv whose server is not up stops the run at once with the URL and how to start
    the server, as Lean does, not a traceback."""
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    config = tmp_path / "remote_config.py"
    config.write_text("from configs.base import apply_tiny, apply_variants, get_base_config\n\n\n"
                      "def get_config(arg=None):\n    c = get_base_config()\n"
                      "    c.env.name = 'envs.serve.client:RemoteEnv'\n"
                      f"    c.env.kwargs = dict(url={url!r}, retries=0)\n"
                      "    return apply_variants(c, arg, {'tiny': apply_tiny})\n")
    wd = tmp_path / "run"
    proc = run_cli(f"--config={config}:tiny", workdir=wd, mode="train")
    fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(fatal) == 1, proc.stderr
    for needle in (f"{url}/spec", "is the server running", "python -m envs.serve --env", "docs/remote_envs.md"):
        assert needle in fatal[0], fatal[0]
    assert "compiling" not in proc.stderr


@pytest.mark.slow
def test_mode_sft_records_its_config_and_the_rl_command_it_prints_runs(tmp_path):
    """`--mode=sft` writes config.json and the TensorBoard hparams as a training run does (it wrote neither), and
    prints the command that trains RL from its export, which runs (about 1 min)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    small = ["--config.warmstart.steps=2", "--config.warmstart.num_demos=8", "--config.val.groups=4",
             "--config.val.batch_size=4", "--config.env.groups=2", "--config.trainer.mini_batch_size=16",
             "--config.trainer.micro_batch_size=16", "--config.diagnostics.every=0", "--config.trainer.export_hf=False"]
    wd = tmp_path / "sft"
    proc = run_cli("--config=configs/sokoban.py:tiny", *small, workdir=wd, mode="sft")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(wd / "config.json") as f:
        assert json.load(f)["warmstart"]["steps"] == 2
    acc = plugin_event_accumulator.EventAccumulator(str(wd / "tb"))
    acc.Reload()
    assert "hparams" in acc.ActivePlugins() and "config/text_summary" in acc.Tags()["tensors"]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RL from it"))
    command = shlex.split(line[line.index("python run.py "):])[2:]  # a shell command line
    assert f"--config.model.path={wd}/hf_export" in command and f"--workdir={wd}_rl" in command
    rl = subprocess.run([sys.executable, "run.py", *command, *small, "--config.trainer.total_steps=1"], cwd=ROOT,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert rl.returncode == 0, rl.stdout + rl.stderr
    with open(f"{wd}_rl/summary.json") as f:
        assert json.load(f)["steps_run"] == 1


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_unknown_lora_target_is_one_fatal_line_before_the_model_loads(tmp_path):
    """It was apply_lora's ValueError, with a traceback, after the model was built."""
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sokoban.py:tiny", "--config.model.lora.rank=4",
                   "--config.model.lora.target_modules=q_proj,zz", workdir=wd, mode="train")
    assert_one_fatal_line(proc, wd, "config.model.lora.target_modules='q_proj,zz' names ['zz']", "gate_proj")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_unknown_variant_is_one_fatal_line(tmp_path):
    """It was four lines (absl's "Error whilst parsing config file", a blank, the error, absl's help hint), so a
    sweep's failed point showed only the help hint as its reason."""
    wd = tmp_path / "run"
    for extra in ((), ("--config.trainer.total_steps=3",)):
        proc = run_cli("--config=configs/sokoban.py:tiyn", *extra, workdir=wd, mode="train")
        fatal = assert_one_fatal_line(proc, wd, "--config=configs/sokoban.py:tiyn: Unknown config variant 'tiyn'. "
                                      "Did you mean 'tiny'?", "'tiny_reasoning'")
        assert proc.stderr.strip() == fatal, proc.stderr


@pytest.mark.parametrize("args, needles", [
    (("--config=configs/sokoban.py:tiny", "--config.trainer.total_steps=abc"),
     ["--config.trainer.total_steps=abc", "invalid literal for int()", "--helpshort"]),
    (("--config=configs/sokoban.py:tiny", "--workdr=x"), ["Unknown command line flag 'workdr'", "workdir"]),
    (("--config=configs/sokoban.py:tiny", "--config.trainer.totl_steps=1"),
     ["unknown config key 'totl_steps'", '"total_steps"']),
    ((), ["no --config given", "--config=configs/sokoban.py:tiny", "sokoban.py"]),
    (("--config=configs/base.py",), ["'configs/base.py' defines no get_config(arg)", "frozenlake.py"]),
    (("--config=configs/base.py", "--config.trainer.total_steps=3"), ["'configs/base.py' defines no get_config"]),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_bad_command_line_is_one_line_and_nothing_else(tmp_path, args, needles):
    """Flag errors were a FATAL line and absl's help hint on a second one (the last line a sweep reports); no
    --config said "flag --config=None"; configs/base.py (no get_config) read as an unknown key 'config_config'."""
    wd = tmp_path / "run"
    proc = run_cli(*args, workdir=wd, mode="train")
    fatal = assert_one_fatal_line(proc, wd, *needles)
    assert proc.stderr.strip() == fatal, proc.stderr
    assert "config_config" not in fatal, fatal
    if "Config files in" in fatal:  # the runnable ones: base.py holds the defaults and has no get_config
        assert "base.py" not in fatal.split("Config files in")[1], fatal


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("warmstart", [True, False])
def test_lengths_too_small_for_any_first_turn_are_one_fatal_line(tmp_path, warmstart):
    """max_model_len too small for every episode's first prompt (in warm-start demos or the first rollout): one
    FATAL line with the sizes and the fix. Before, a ContextOverflowError traceback."""
    proc = run_cli("--config=configs/bandit.py:tiny", "--compile_cache=", "--config.rollout.max_model_len=64",
                   f"--config.warmstart.enabled={warmstart}", "--config.trainer.total_steps=1",
                   workdir=tmp_path / "run", mode="train")
    fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(fatal) == 1, proc.stderr
    assert "> max_model_len 64" in fatal[0] and "Raise rollout.max_model_len" in fatal[0], fatal[0]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("section", ["env.kwargs", "val.env_kwargs"])
def test_a_new_env_kwarg_on_the_command_line_says_where_to_set_it(tmp_path, section):
    """env.kwargs is the env's constructor arguments: a key the config file does not set cannot be added by a flag.
    The error says so and where to set it, instead of pointing at configs/base.py, which has no such key."""
    proc = run_cli("--config=configs/bandit.py:tiny", f"--config.{section}.data_path=x", workdir=tmp_path / "run",
                   mode="train")
    out = assert_fails_cleanly(proc, tmp_path / "run",
                               f"unknown config key 'data_path' in --config.{section}.data_path",
                               f"config.{section} holds the env's constructor arguments",
                               f"c.{section}.data_path = ...")
    assert "configs/base.py" not in out, out
