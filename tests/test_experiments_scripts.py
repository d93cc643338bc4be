"""Every script in experiments/ answers `--help` when run by path from any folder (no PYTHONPATH), and every
command experiments/bench/gpu_session.sh runs parses its flags on CPU, so a lent GPU's minutes are not lost to a typo."""

import argparse
import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(os.path.relpath(path, os.path.join(ROOT, "experiments"))
                 for path in glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True)
                 if "__main__" in open(path).read())


def _module(script: str) -> str:
    """experiments/bench/x.py's module name, experiments.bench.x."""
    return "experiments." + script[:-3].replace(os.sep, ".")


def _clean_env() -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "JAX_PLATFORMS": "cpu"}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_answers_help_from_another_folder(script, tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", script), "--help"], cwd=tmp_path,
                         env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout, out.stdout


def session_commands(text: str) -> list[list[str]]:
    """The `$PY ...` commands of a shell script (continuation lines joined, ${VAR:-default} -> default, up to the
    first redirection or pipe) as argument lists without `$PY`."""
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text.replace("\\\n", " "))
    commands = []
    for line in text.splitlines():
        if "$PY " not in line or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line[line.index("$PY ") + 4:], comments=True)
        cut = next((i for i, w in enumerate(words) if w in ("|", "&&") or w.startswith(("2>", ">"))), len(words))
        commands.append(words[:cut])
    return commands


class _Parsed(Exception):
    pass


def _parses(script: str, argv: list[str], monkeypatch) -> None:
    """Runs `script`'s main(argv) up to its argument parsing (a flag it lacks exits 2 there), then stops."""
    spec = importlib.util.spec_from_file_location(f"_session_{os.path.basename(script)[:-3]}",
                                                  os.path.join(ROOT, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(_Parsed):
        module.main(argv)


def test_session_commands_are_read_from_the_script():
    text = 'X=1\n$PY -m pip install -q a.whl \\\n  && export A\ntimeout ${T:-5} $PY run.py --a ${B:-7} \\\n' \
           '  --c=1 2>&1 | tee "$OUT/x"\n# $PY ignored.py\n'
    assert session_commands(text) == [["-m", "pip", "install", "-q", "a.whl"], ["run.py", "--a", "7", "--c=1"]]


@pytest.mark.slow
def test_every_gpu_session_command_parses_its_flags(monkeypatch, tmp_path):
    with open(os.path.join(ROOT, "experiments", "bench", "gpu_session.sh")) as f:
        commands = session_commands(f.read())
    checked = []
    for command in commands:
        if command[:2] == ["-m", "pip"]:
            continue  # installs wheels only where .whl/ holds some
        if command[0] == "-c":  # the version line: imports that must exist there too
            out = subprocess.run([sys.executable, *command], cwd=ROOT, env=_clean_env(), capture_output=True,
                                 text=True, timeout=300)
        elif command[0] == "run.py":  # resolves and validates the config, then exits without training
            out = subprocess.run([sys.executable, *command, "--print_config"], cwd=ROOT,
                                 env={**_clean_env(), "PYTHONPATH": ROOT}, capture_output=True, text=True,
                                 timeout=300)
        else:
            assert command[0].startswith("experiments/") and command[0].endswith(".py"), command
            _parses(command[0], command[1:], monkeypatch)
            checked.append(command[0])
            continue
        assert out.returncode == 0, (command, out.stderr[-2000:])
        checked.append(command[0])
    assert checked == ["-c", "experiments/bench/bench_gpu.py", "experiments/bench/gpu_aot.py",
                       "experiments/bench/bench_kv_window.py", "run.py"], checked


def _run(script: str, *args: str) -> str:
    """`script`'s stdout at a tiny size (it must exit 0); timings vary, so callers check the structure only."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", script), *args], cwd=ROOT,
                         env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _main(script: str, argv: list[str], capsys) -> str:
    """`script`'s stdout from its main(argv) run in this process (no fresh JAX import); timings vary, so callers
    check the structure only."""
    module = importlib.import_module(_module(script))
    capsys.readouterr()
    module.main(argv)
    return capsys.readouterr().out


class _UnreadArgv(list):
    """sys.argv for an in-process main(argv): argparse may take the program name (argv[0]) but not the arguments,
    so a main that ignores its argv fails at once instead of running the benchmark."""

    def __getitem__(self, index):
        if isinstance(index, slice):
            raise AssertionError("main parsed sys.argv instead of its argv")
        return super().__getitem__(index)


@pytest.mark.parametrize("script", ["bench/bench_decode_layout.py", "bench/bench_diagnostics.py",
                                    "bench/bench_draw.py", "bench/bench_generate.py", "bench/bench_lanes.py",
                                    "bench/bench_rollout.py", "bench/bench_serve.py", "bench/bench_train.py",
                                    "studies/filter_ablation.py", "bench/profile_steps.py"])
def test_main_reads_the_arguments_it_is_given(script, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", _UnreadArgv([script]))
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(_module(script)).main(["--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


LOAD = r"at the start: 1-minute load average \d"
NUMBER = r"\d+\.\d+"


@pytest.mark.slow
def test_bench_generate_at_its_tiny_case_matches_transformers_and_prints_the_ratio():
    out = _run("bench/bench_generate.py", "--cases", "tiny", "--repeats", "1")
    assert re.search(LOAD, out), out
    assert "[tiny] batch 64" in out and "greedy tokens identical: 100.0%" in out, out
    assert "other processes used" in out and "of the measured GEMM bound" in out, out
    assert re.fullmatch(rf"ratios ours/transformers: tiny={NUMBER}x", out.strip().splitlines()[-1]), out


@pytest.mark.slow
def test_bench_train_at_its_tiny_size_agrees_with_torch_and_prints_the_ratio():
    out = _run("bench/bench_train.py", "--sizes", "tiny", "--warmup", "1", "--steps", "1")
    assert re.search(LOAD, out), out
    first = re.search(r"first update +ours loss (\S+) grad_norm (\S+) \| torch loss (\S+) grad_norm (\S+)", out)
    assert first and first[1] == first[3] and first[2] == first[4], out
    assert re.search(r"ours +\d+\.\d+ s/update \(median of 1", out) and "other processes used" in out, out
    assert re.fullmatch(rf"ratio ours/torch tokens/s: tiny {NUMBER}", out.strip().splitlines()[-1]), out


@pytest.mark.slow
def test_bench_rollout_at_its_tiny_workload_keeps_the_trajectories_and_prints_the_ratio():
    out = _run("bench/bench_rollout.py", "--workloads", "tiny", "--repeats", "1", "--slots", "0")
    assert re.search(LOAD, out), out
    rows = re.findall(r"same trajectories as lockstep: (\w+)", out)
    assert rows == ["True", "True"] and "WARNING: tiny" not in out, out
    assert re.search(r"best continuous: continuous\[slots=128,lanes=\d\]", out), out
    assert re.fullmatch(rf"RATIO continuous/lockstep wall: tiny={NUMBER}x", out.strip().splitlines()[-1]), out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bench_lanes_at_one_small_case_decodes_the_same_tokens_and_prints_the_ratio(capsys):
    out = _main("bench/bench_lanes.py", ["--cases", "tiny:8", "--repeats", "1"], capsys)
    assert re.search(LOAD, out), out
    assert re.search(r"\[tiny:8\] .*medians of 1: .*greedy tokens identical: 100\.0%; other processes used", out), out
    assert re.fullmatch(rf"RATIO lanes/one program: tiny:8={NUMBER}x", out.strip().splitlines()[-1]), out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bench_diagnostics_at_eight_pairs_prints_its_token_shares(capsys):
    out = _main("bench/bench_diagnostics.py", ["--models", "tiny", "--pairs", "8", "--batch-size", "8", "--repeats", "1"],
                capsys)
    assert re.search(LOAD, out), out
    assert re.search(r"\[tiny\] .*8 pairs per sampling; first call \(compiling\) .*medians of 1: first-turn", out), out
    assert re.search(r"\[tiny\] tokens through the model: diagnostics [\d,]+ per call;.*other processes used", out), out
    assert "[tiny] at RAGEN's 64 pairs:" in out, out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bench_draw_with_one_repeat_prints_ratios_and_exact_distances(capsys):
    out = _main("bench/bench_draw.py", ["--repeats", "1"], capsys)
    assert re.search(LOAD, out), out
    cases = re.findall(rf"^(\d+) x ([\d,]+): .*ours / single draw {NUMBER}x, ours / categorical {NUMBER}x  "
                       r"\(other processes used", out, flags=re.M)
    assert cases == [("64", "1,119"), ("8", "151,936")], out
    assert len(re.findall(r"exact TV from softmax on row 0: ours \S+, single draw \S+", out)) == 2, out
