"""Linear layers on flattened rows: the same values and gradients as nnx.Linear, and (the reason they exist) a
weight gradient that XLA:CPU computes without copying the incoming gradient into a transposed layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models.linear import Linear, out_first_matmul, rows_matmul
from ragen_jax.models.transformer import MLP
from ragen_jax.models.tiny import tiny_config


def _copies_in_entry(compiled_text: str) -> int:
    """Copy instructions (plain or fused) in the compiled program's entry computation."""
    entry = compiled_text[compiled_text.index("ENTRY"):]
    return sum(" copy(" in line or "copy_" in line.split("=")[0] for line in entry.splitlines())


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16), (2, 1, 4, 16)])
def test_linear_matches_nnx_linear_values_and_gradients(shape):
    ours = Linear(16, 12, use_bias=True, rngs=nnx.Rngs(0))
    ref = nnx.Linear(16, 12, use_bias=True, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.PRNGKey(1), shape)
    # the same product, but ours flattens the rows into one GEMM: allclose (see the rows_matmul test below)
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    assert ours(x).shape == (*shape[:-1], 12)

    def grads(layer):
        return nnx.grad(lambda m, x: jnp.sum(jnp.sin(m(x))), argnums=(0, 1))(layer, x)

    (g_ours, gx_ours), (g_ref, gx_ref) = grads(ours), grads(ref)
    np.testing.assert_allclose(g_ours.kernel[...], g_ref.kernel[...], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_ours.bias[...], g_ref.bias[...], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx_ours, gx_ref, rtol=1e-5, atol=1e-6)


def test_rows_matmul_both_weight_orientations_and_bad_shapes():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8))
    w = jax.random.normal(jax.random.PRNGKey(1), (8, 5))
    want = jnp.einsum("btd,dn->btn", x, w)
    # A [6, 8] GEMM against a batched dot: another kernel sums the 8 products in another order, so an output
    # near 0 may differ by a few float32 ulps of the |x w| terms (about 1e-6 on AVX2): atol, not rtol alone.
    np.testing.assert_allclose(rows_matmul(x, w), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rows_matmul(x, w.T, w_out_first=True), want, rtol=1e-5, atol=1e-5)
    assert rows_matmul(x, w, preferred_element_type=jnp.float32).dtype == jnp.float32
    with pytest.raises(ValueError, match="contracted axis"):
        rows_matmul(x, w.T)


def test_mlp_weight_gradient_has_no_transposed_copy():
    """With [B, T, D] dots XLA:CPU copied the gradient into [out, B*T] before each weight-gradient GEMM
    (six copies in this block); on flattened rows it makes none."""
    cfg = tiny_config(hidden_size=64, intermediate_size=160)
    mlp = MLP(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(mlp)
    x = jnp.ones((4, 128, 64))

    def loss(p, x):
        return jnp.sum(nnx.merge(graphdef, p)(x) ** 2)

    compiled = jax.jit(jax.grad(loss)).lower(params, x).compile().as_text()
    assert _copies_in_entry(compiled) == 0


def test_out_first_matmul_equals_the_plain_product_and_checks_shapes():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8))
    w = jax.random.normal(jax.random.PRNGKey(1), (8, 5))
    np.testing.assert_allclose(out_first_matmul(x, w.T), jnp.einsum("btd,dn->btn", x, w), rtol=1e-5, atol=1e-5)
    assert out_first_matmul(x.astype(jnp.bfloat16), w.T.astype(jnp.bfloat16),
                            preferred_element_type=jnp.float32).dtype == jnp.float32
    with pytest.raises(ValueError, match=r"laid out \[N, D\]"):
        out_first_matmul(x, w)


def test_out_first_matmul_keeps_the_weight_as_the_left_operand():
    """The reason it exists: the compiled dot must be weight [N, D] x activations^T [D, M], contracting the
    weight's rows; without the barrier XLA folds the transpose back into a dot contracting both operands' last
    axis, the form that streams the weight at about half the rate on a CPU."""
    x = jnp.ones((8, 64))
    w_t = jnp.ones((96, 64))
    text = jax.jit(out_first_matmul).lower(x, w_t).compile().as_text()
    dots = [line for line in text.splitlines() if " dot(" in line]
    assert dots and all("f32[96,8]" in line.split("=")[1] and "lhs_contracting_dims={1}" in line
                        and "rhs_contracting_dims={0}" in line for line in dots), dots
