"""experiments/bench/profile_steps.py: the decode loop's own op counts are printed, whatever XLA names the loop body."""

import jax
import jax.numpy as jnp

from experiments.bench.profile_steps import hlo_histogram, print_profile, while_body


def _loop_hlo() -> str:
    def run(x, w):
        return jax.lax.fori_loop(0, 4, lambda i, h: jnp.tanh(h @ w), x)
    x, w = jnp.ones((4, 8)), jnp.ones((8, 8))
    return jax.jit(run).lower(x, w).compile().as_text()


def test_the_loop_body_is_found_through_the_while_instruction(capsys):
    hlo = _loop_hlo()
    body = while_body(hlo)
    assert body is not None and ("dot(" in body or "fusion(" in body), body
    assert hlo_histogram(body) and "while" not in hlo_histogram(body)
    print_profile("loop", hlo, {"dot.1": 1.0}, 1, 3)
    assert "while-loop body op counts:" in capsys.readouterr().out


def test_no_loop_no_body_line(capsys):
    hlo = jax.jit(lambda x: x @ x).lower(jnp.ones((4, 4))).compile().as_text()
    assert while_body(hlo) is None
    print_profile("no loop", hlo, {"dot.1": 1.0}, 1, 3)
    assert "while-loop body" not in capsys.readouterr().out
