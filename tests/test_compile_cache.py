"""The persistent compilation cache run.py turns on: where it lives, how to turn it off, and that a second process
with the same program reads it instead of compiling."""

import os
import subprocess
import sys
import textwrap

from ragen_jax import compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""
    import logging, sys
    import jax, jax.numpy as jnp
    from ragen_jax import compile_cache
    logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")
    print("cache:", compile_cache.enable(sys.argv[1], min_compile_seconds=0.0))
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0) * 3.0)
    print("result:", float(f(jnp.arange(12.0).reshape(3, 4)).sum()))
""")


def run_program(folder) -> str:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(folder)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_second_process_reads_the_programs_the_first_one_compiled(tmp_path):
    folder = tmp_path / "xla"
    first = run_program(folder)
    entries = sorted(os.listdir(folder))
    assert f"cache: {folder}" in first and entries, first
    second = run_program(folder)
    assert "Persistent compilation cache hit" in second, second
    assert sorted(os.listdir(folder)) == entries  # nothing compiled again, nothing new written
    assert first.split("result:")[1] == second.split("result:")[1]


def test_default_folder_and_turning_it_off(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == os.path.join(str(tmp_path), "ragen_jax", "xla")
    monkeypatch.setenv(compile_cache.ENV_VAR, "")
    assert compile_cache.default_dir() == ""
    import jax

    before = jax.config.jax_compilation_cache_dir  # the test session's own cache (conftest)
    assert compile_cache.enable("") == (before or None)
    assert jax.config.jax_compilation_cache_dir == before


def test_an_unwritable_folder_turns_the_cache_off_with_a_warning(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    import jax

    before = jax.config.jax_compilation_cache_dir
    assert compile_cache.enable(str(blocker / "xla")) is None
    assert jax.config.jax_compilation_cache_dir == before
    assert "cannot write to" in caplog.text and "--compile_cache" in caplog.text


def test_a_folder_that_exists_but_cannot_be_written_turns_the_cache_off(tmp_path, caplog, monkeypatch):
    folder = tmp_path / "read_only"
    folder.mkdir()
    import jax

    before = jax.config.jax_compilation_cache_dir
    if os.geteuid() == 0:  # root writes through any mode bits: a read-only mount behaves as this refusal does
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Read-only file system")
        monkeypatch.setattr(compile_cache.tempfile, "mkstemp", refuse)
    else:
        folder.chmod(0o500)
    try:
        assert compile_cache.enable(str(folder)) is None
    finally:
        folder.chmod(0o700)
    assert jax.config.jax_compilation_cache_dir == before
    assert "cannot write to" in caplog.text and str(folder) in caplog.text
    assert os.listdir(folder) == []
