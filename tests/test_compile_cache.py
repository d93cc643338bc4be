"""The persistent compilation cache run.py turns on: where it lives, how to turn it off, and that a second process
with the same program reads it instead of compiling."""

import os
import subprocess
import sys
import textwrap

import pytest

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


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_second_process_reads_the_programs_the_first_one_compiled(tmp_path):
    folder = tmp_path / "xla"
    first = run_program(folder)
    entries = sorted(os.listdir(folder))
    assert f"cache: {folder}" in first and entries, first
    second = run_program(folder)
    assert "Persistent compilation cache hit" in second, second
    assert sorted(os.listdir(folder)) == entries  # nothing compiled again, nothing new written
    assert first.split("result:")[1] == second.split("result:")[1]


@pytest.fixture
def session_cache_restored():
    """enable() changes process-wide JAX settings: the test session's own cache (conftest) is put back after."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    saved = {n: getattr(jax.config, n) for n in names}
    yield jax
    for n, v in saved.items():
        jax.config.update(n, v)
    jax_cache.reset_cache()


def test_default_folder(monkeypatch, tmp_path):
    for var in (compile_cache.ENV_VAR, compile_cache.JAX_DIR_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == os.path.join(str(tmp_path), "ragen_jax", "xla")
    monkeypatch.setenv(compile_cache.JAX_DIR_VAR, str(tmp_path / "jax_own"))  # JAX's own setting is kept
    assert compile_cache.default_dir() == str(tmp_path / "jax_own")
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "ours"))  # ours wins over JAX's
    assert compile_cache.default_dir() == str(tmp_path / "ours")
    monkeypatch.setenv(compile_cache.ENV_VAR, "")
    assert compile_cache.default_dir() == ""


def test_an_empty_folder_turns_the_cache_off(session_cache_restored):
    jax = session_cache_restored
    assert jax.config.jax_compilation_cache_dir  # the session's cache is on
    assert compile_cache.enable("") is None
    assert jax.config.jax_compilation_cache_dir is None


def test_the_threshold_is_ours_unless_jax_s_own_setting_is_given(session_cache_restored, monkeypatch, tmp_path):
    jax = session_cache_restored
    monkeypatch.delenv(compile_cache.JAX_MIN_SECONDS_VAR, raising=False)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 7.0)
    assert compile_cache.enable(str(tmp_path / "a")) == str(tmp_path / "a")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == compile_cache.MIN_COMPILE_SECONDS
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 7.0)  # as the env var would have set it
    monkeypatch.setenv(compile_cache.JAX_MIN_SECONDS_VAR, "7")
    assert compile_cache.enable(str(tmp_path / "b")) == str(tmp_path / "b")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 7.0
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "b")


def test_enabling_again_moves_the_cache(tmp_path):
    """JAX opens its cache at the first program it stores: a second enable() must make it open the new one."""
    program = textwrap.dedent("""
        import sys
        import jax, jax.numpy as jnp
        from ragen_jax import compile_cache
        compile_cache.enable(sys.argv[1], min_compile_seconds=0.0)
        jax.jit(lambda x: jnp.sin(x) * 2.0)(jnp.ones(3)).block_until_ready()
        compile_cache.enable(sys.argv[2], min_compile_seconds=0.0)
        jax.jit(lambda x: jnp.cos(x) - 1.0)(jnp.ones(5)).block_until_ready()
    """)
    first, second = tmp_path / "first", tmp_path / "second"
    proc = subprocess.run([sys.executable, "-c", program, str(first), str(second)], cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(first) and os.listdir(second), (os.listdir(first), os.listdir(second))


def test_an_unwritable_folder_turns_the_cache_off_with_a_warning(session_cache_restored, tmp_path, caplog):
    jax = session_cache_restored
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert compile_cache.enable(str(blocker / "xla")) is None
    assert jax.config.jax_compilation_cache_dir is None
    assert "cannot write to" in caplog.text and "--compile_cache" in caplog.text


def test_a_folder_that_exists_but_cannot_be_written_turns_the_cache_off(session_cache_restored, tmp_path, caplog,
                                                                         monkeypatch):
    jax = session_cache_restored
    folder = tmp_path / "read_only"
    folder.mkdir()
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
    assert jax.config.jax_compilation_cache_dir is None
    assert "cannot write to" in caplog.text and str(folder) in caplog.text
    assert os.listdir(folder) == []
