"""Shared pieces of the algos tests: the `run` fixture calls a function eagerly or under jax.jit."""

import functools

import jax
import pytest


@pytest.fixture(params=["eager", "jit"])
def run(request):
    """run(fn, *arrays, **static): fn(*arrays, **static), once as is and once jitted (static keywords bound)."""
    def call(fn, *args, **static):
        if request.param == "jit":
            return jax.jit(functools.partial(fn, **static))(*args)
        return fn(*args, **static)

    return call
