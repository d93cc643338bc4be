"""Every command README.md and docs/*.md show a reader still works as written: each `python run.py ...` parses and
validates (config file and variant, every --config.* override's key and value, run.py's flags), each
`python experiments/X.py ...` or `python -m ragen_jax...` exists and its argparse takes the flags, and each
`make TARGET` names a target of the Makefile. Nothing trains (tests/doc_commands_worker.py only parses)."""

import json
import os
import re
import subprocess
import sys

import pytest

import doc_commands_testlib as L

COMMANDS = L.doc_commands()
PYTHON = [c for c in COMMANDS if c.argv[0] in ("python", "python3")]
MAKE = [c for c in COMMANDS if c.argv[0] == "make"]
OVERRIDES = L.doc_overrides()
QUICKSTART = "configs/sokoban.py:tiny"
# Commands the checks must refuse: without these failing, a passing run would prove nothing.
BROKEN = [
    ("python", "run.py", "--config", "configs/sokoban.py:tiny", "--config.trainer.total_stepz=50"),
    ("python", "run.py", "--config", "configs/sokoban.py:tiny", "--config.filter.include_zero=maybe"),
    ("python", "run.py", "--config", "configs/sokoban.py:tinyy"),
    ("python", "run.py", "--config", "configs/sokoban.py:tiny", "--config.rollout.context_mode=bogus"),
    ("python", "run.py", "--config", "configs/sokoban.py:tiny", "--work_dir", "runs/x"),
    ("python", "experiments/plot.py", "runs/quickstart", "--outt", "curves.png"),
    ("python", "experiments/no_such_script.py"),
    ("python", "-m", "ragen_jax.diagnostic", "RUN"),
    ("python", "experiments/sweep.py", "--config", "configs/sokoban.py:tiny", "--grid", "filter.valeu=1.0,0.9"),
    ("python", "experiments/studies/filter_ablation.py", "--", "--config.trainer.total_stepz=3"),
]


def reader_folder(doc: str, tmp_path_factory) -> str:
    """Where a reader of `doc` runs its commands: the repository, or, for a doc whose reader saves files
    (docs/custom_envs.md's guess_config.py, ...), a folder holding those files beside the repository's."""
    files = L.doc_files(doc)
    if not files:
        return L.ROOT
    folder = tmp_path_factory.mktemp(os.path.basename(doc).replace(".", "_"))
    for name, text in files.items():
        (folder / name).write_text(text)
    for name in os.listdir(L.ROOT):
        if not name.startswith(".") and name not in files:
            (folder / name).symlink_to(os.path.join(L.ROOT, name))
    return str(folder)


@pytest.fixture(scope="module")
def errors(tmp_path_factory) -> dict[tuple[str, ...], str]:
    """{(doc, *argv): "" or the error} for every python command of the docs and every BROKEN one, and
    {("override", doc, word): ...} for each override the docs show alone (run.py's parsing on the quickstart's
    config: the key exists and the value has its type)."""
    folders = {doc: reader_folder(doc, tmp_path_factory) for doc in {c.doc for c in PYTHON}}
    cases = {(c.doc, *c.argv): {"argv": list(c.argv[1:]), "cwd": folders[c.doc]} for c in PYTHON}
    cases.update({("BROKEN", *argv): {"argv": list(argv[1:]), "cwd": L.ROOT} for argv in BROKEN})
    cases.update({("override", doc, word): {"argv": ["run.py", "--config", QUICKSTART, word], "cwd": L.ROOT,
                                            "validate": False} for doc, word in OVERRIDES})
    out = tmp_path_factory.mktemp("doc_commands") / "errors.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, os.path.join(L.ROOT, "tests", "doc_commands_worker.py"), str(out)],
                          input=json.dumps(list(cases.values())), env=env, cwd=L.ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(zip(cases, json.loads(out.read_text())))


def test_the_docs_commands_are_found():
    """The extraction sees fenced, indented and inline commands, joined across `\\` and wrapped lines."""
    found = {(c.doc, c.argv[1]) for c in COMMANDS}
    assert {("README.md", "run.py"), ("docs/running.md", "experiments/sweep.py"), ("README.md", "quickstart"),
            ("README.md", "test"), ("docs/diagnostics.md", "experiments/studies/mi_table.py"),
            ("docs/performance.md", "experiments/bench/bench_train.py"), ("docs/custom_envs.md", "run.py")} <= found
    bandit = next(c for c in PYTHON if "configs/bandit.py:tiny" in c.argv)  # six lines joined
    assert bandit.argv[-2:] == ("--workdir", "runs/diag") and "--config.warmstart.reasoning_text=pick the arm that " \
        "pays more" in bandit.argv


@pytest.mark.parametrize("doc", L.doc_paths())
def test_no_command_of_this_repository_is_left_unread(doc):
    """Each `python run.py`, `python experiments/...` and `python -m ragen_jax...` a doc shows is one it checks: a
    command the extraction cannot read (two commands side by side, an unbalanced quote) fails here, not silently."""
    ours = re.compile(r"\bpython3?\s+(?:run\.py|experiments/\w+\.py|-m\s+(?:ragen_jax|envs)\b)")
    with open(os.path.join(L.ROOT, doc)) as f:
        text = f.read()
    shown = [m.group(0) for m in ours.finditer(L.shell_text(text))]
    read = [" ".join(argv[:3]) for argv in L.commands_in_markdown(text) if ours.match(" ".join(argv))]
    assert len(read) == len(shown), f"{doc} shows {shown}, the check reads {read}"


@pytest.mark.parametrize("markdown, argv", [
    ("```bash\nA=1 python run.py --config c.py \\\n  --x=1  # note\n```\n", ["python", "run.py", "--config", "c.py",
                                                                          "--x=1"]),
    ("text `python x.py\n--y 2` more", ["python", "x.py", "--y", "2"]),
    ("\n    python -m m a [--step 3]\n        [--out f.json]\n", ["python", "-m", "m", "a", "--step", "3", "--out",
                                                                  "f.json"]),
    ("`cd d && python run.py --seed=$N --step=N DIR ...`", ["python", "run.py", "--seed=0", "--step=0", "0"]),
    ("```python\npython = 1\n```\n`make test`", ["make", "test"]),
])
def test_a_command_is_read_as_a_reader_pastes_it(markdown, argv):
    assert L.commands_in_markdown(markdown) == [argv]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("argv", BROKEN, ids=lambda a: " ".join(a[1:]))
def test_the_check_refuses_a_broken_command(errors, argv):
    assert errors[("BROKEN", *argv)] != ""


@pytest.mark.parametrize("command", PYTHON, ids=str)
def test_every_python_command_in_the_docs_parses_and_validates(errors, command):
    error = errors[(command.doc, *command.argv)]
    assert error == "", f"{command}\n  fails: {error}"


@pytest.mark.parametrize("doc, word", OVERRIDES, ids=lambda x: x)
def test_every_override_the_docs_show_alone_names_a_key_and_a_value_of_its_type(errors, doc, word):
    error = errors[("override", doc, word)]
    assert error == "", f"{doc}: {word}\n  fails on {QUICKSTART}: {error}"


def _makefile() -> tuple[set[str], set[str]]:
    """The Makefile's (targets, variables)."""
    with open(os.path.join(L.ROOT, "Makefile")) as f:
        text = f.read()
    targets = {t for line in re.findall(r"^([\w. -]+):(?!=)", text, re.MULTILINE) for t in line.split()} - {".PHONY"}
    variables = set(re.findall(r"^(\w+)\s*[?:+]?=", text, re.MULTILINE))
    return targets, variables


@pytest.mark.parametrize("command", MAKE, ids=str)
def test_every_make_command_in_the_docs_names_a_target(command):
    targets, variables = _makefile()
    for word in command.argv[1:]:
        if "=" in word:
            name, value = word.split("=", 1)
            assert name in variables, f"{command}: the Makefile has no variable {name} ({sorted(variables)})"
            if name == "REQUIREMENTS":
                assert os.path.isfile(os.path.join(L.ROOT, value)), f"{command}: no file {value}"
        else:
            assert word in targets, f"{command}: the Makefile has no target {word!r} ({sorted(targets)})"
