"""Shared test setup: CPU-only JAX, deterministic and quiet, and one persistent compilation cache per session.

Test helpers are imported as top-level modules (`from algos_testlib import run`), never as `tests.<module>`: this
folder has no __init__.py, and veRL's wheel (requirements-test-nodeps.txt) installs a `tests` package of its own
into site-packages, which Python prefers to a folder without one.

Float comparisons hold on any x86 CPU: a value compared with another code path (numpy, another XLA program, shape
or fusion) may move by a few float32 ulps from one CPU to the next, since XLA's vectorized reductions and dot
kernels and numpy's SIMD exp/log follow the CPU (AVX2 or AVX-512). Such comparisons take an atol at the scale of
the terms summed (rtol=1e-5, atol=1e-6 for float32 values of order 1), never rtol alone. Exact comparisons stay
where both sides run the same program (resume, replay, engine equality) or the arithmetic is exact (small
integers, dyadic fractions, one IEEE operation)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAGEN_JAX_COMPILE_CACHE", "")  # run.py in a test subprocess writes no cache into ~/.cache
# LLVM at -O0: XLA's own HLO passes (fusion, layout) still run, and the suite's ~5,000 small programs compile in
# about half the time (the default run took 633 s instead of 750 s on 2 cores). Tests compare programs compiled
# alike; `XLA_FLAGS=--xla_backend_optimization_level=3 pytest ...` runs them at the level users get.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def shared_compilation_cache(tmp_path_factory):
    """Programs with the same HLO compile once per test session: many tests build their own Trainer, Sampler or
    engine around the same tiny model, and each would otherwise compile the same programs again. The cache
    starts empty each session (a fresh temporary folder), so no test depends on an earlier run."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    saved = {n: getattr(jax.config, n) for n in names}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    yield
    for n, v in saved.items():
        jax.config.update(n, v)
    compilation_cache.reset_cache()


# The longest tests (tens of seconds each) start first, so that with several workers (`-n 2 --dist worksteal`)
# the run does not end with one worker busy on a long test while the other idles.
LONG_FIRST = ("test_trainer_resume.py", "test_rollout_continuous.py", "test_trainer_faults.py",
              "test_trainer_filter.py", "test_rollout_engine.py", "test_warmstart.py", "test_sampling_generate.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: the order within each file is kept
