"""RAGEN-2's gradient split against its written-out definitions on a tiny bigram model: each part's norm is the
norm of the gradient of that loss term alone, the parts' gradients add up to the update's, buckets by hand."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.diagnostics.buckets import variance_buckets
from ragen_jax.trainer.gradient_split import component_gradients, gradient_split, loss_components, split_due
from ragen_jax.trainer.steps import make_step_fns
from test_algos_step_integration import BASE, TX, make_batch, split_actor

ALGO = dataclasses.replace(BASE, entropy_coeff=0.05, use_kl_loss=True, kl_loss_coef=0.2, kl_loss_type="kl")


def full_batch() -> dict[str, np.ndarray]:
    b = make_batch()
    b["ref_logprobs"] = (b["old_logprobs"] - 0.1 * b["loss_mask"]).astype(np.float32)
    b["row_valid"] = np.ones(8, np.float32)
    return b


def written_terms(params, frozen, graphdef, b, algo, micro):
    """The three loss terms written out over the rows of b: bigram log-probs and entropies, PPO with clip-higher
    and dual clip, k1 KL, token-mean over the trained tokens (micro=None); with `micro`, seq-mean-token-mean per
    micro-batch of that many rows, averaged over the micro-batches (veRL 0.4 / loss_scope="micro_batch")."""
    from flax import nnx

    model = nnx.merge(graphdef, params, frozen)
    tokens = b["tokens"]
    h, _ = model.hidden(tokens, None)
    logp_all = jax.nn.log_softmax(h[:, :-1] @ model.lm_head_matrix())
    lp = jnp.take_along_axis(logp_all, tokens[:, 1:, None], axis=-1)[..., 0]
    ent = -(jnp.exp(logp_all) * logp_all).sum(-1)
    lp, ent = (jnp.pad(x, ((0, 0), (1, 0))) for x in (lp, ent))
    m, a = b["loss_mask"], b["advantages"]
    ratio = jnp.exp(jnp.clip(lp - b["old_logprobs"], -20, 20))
    clipped = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - algo.clip_ratio_low, 1 + algo.clip_ratio_high))
    per_token = {"task": jnp.where(a < 0, jnp.minimum(clipped, -a * algo.clip_ratio_c), clipped),
                 "entropy": -algo.entropy_coeff * ent, "kl": algo.kl_loss_coef * (lp - b["ref_logprobs"])}
    if micro is None:
        return {c: (x * m).sum() / m.sum() for c, x in per_token.items()}
    row_means = {c: (x * m).sum(-1) / m.sum(-1) for c, x in per_token.items()}
    return {c: v.reshape(-1, micro).mean(-1).mean() for c, v in row_means.items()}


@functools.partial(jax.jit, static_argnames=("graphdef", "algo", "micro"))
def _written(trainable, frozen, b, graphdef, algo, micro):
    out = {}
    for c in loss_components(algo):
        grads = jax.grad(lambda p: written_terms(p, frozen, graphdef, b, algo, micro)[c])(trainable)
        out[c] = jnp.sqrt(sum(jnp.vdot(g, g) for g in jax.tree.leaves(grads)))
    out.update({f"loss/{c}": v for c, v in written_terms(trainable, frozen, graphdef, b, algo, micro).items()})
    return out


def written_norms(rows, algo=ALGO, micro=None):
    """Each term's gradient norm and value, written out, over `rows` of the batch."""
    graphdef, trainable, frozen = split_actor()
    b = {k: jnp.asarray(v[rows]) for k, v in full_batch().items()}
    return {k: float(v) for k, v in _written(trainable, frozen, b, graphdef, algo, micro).items()}


def split_of(algo, micro, rows=np.arange(8)):
    graphdef, trainable, frozen = split_actor()
    b = {k: jnp.asarray(v[rows]) for k, v in full_batch().items()}
    return {k: float(v) for k, v in component_gradients(graphdef, trainable, frozen, b, algo, micro).items()}


@pytest.mark.parametrize("algo,micro,written_micro", [
    (ALGO, 4, None),  # token-mean over the mini-batch, accumulated over 2 micro-batches
    (dataclasses.replace(ALGO, loss_agg_mode="seq-mean-token-mean", loss_scope="micro_batch"), 2, 2),  # veRL 0.4
])
def test_each_part_is_the_norm_of_the_gradient_of_its_term_alone(algo, micro, written_micro):
    split, by_hand = split_of(algo, micro), written_norms(np.arange(8), algo, written_micro)
    for c in ("task", "entropy", "kl"):
        np.testing.assert_allclose(split[c], by_hand[c], rtol=1e-4, atol=1e-6)
        assert by_hand[c] > 1e-4  # a real gradient
    names = {"task": "policy", "entropy": "entropy", "kl": "kl"}
    for c, name in names.items():
        np.testing.assert_allclose(split[f"loss/{name}"], by_hand[f"loss/{c}"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(split["loss/total"], sum(split[f"loss/{n}"] for n in names.values()), atol=1e-6)


def test_the_parts_add_up_to_the_updates_gradient_and_loss():
    split = split_of(ALGO, 4)
    graphdef, trainable, frozen = split_actor()
    fns = make_step_fns(graphdef, None, ALGO, TX, None, 4)
    _, _, update = fns["actor_update"](trainable, TX.init(trainable), frozen,
                                       {k: jnp.asarray(v) for k, v in full_batch().items()})
    np.testing.assert_allclose(split["total"], float(update["grad_norm"]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(split["loss/total"], float(update["loss"]), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(split["loss/policy"], float(update["pg_loss"]), rtol=1e-5, atol=1e-7)
    # the norms do not add; the squares add up with the cross terms
    n = {c: split[c] for c in ("task", "entropy", "kl")}
    cross = sum(n[a] * n[b] * split[f"cos/{a}_{b}"] for a, b in (("task", "entropy"), ("task", "kl"),
                                                                   ("entropy", "kl")))
    np.testing.assert_allclose(split["total"] ** 2, sum(v ** 2 for v in n.values()) + 2 * cross, rtol=1e-4, atol=1e-8)
    assert split["total"] < sum(n.values()) - 1e-6  # not parallel: the norms' sum overstates the total
    reg = np.sqrt(n["entropy"] ** 2 + n["kl"] ** 2 + 2 * n["entropy"] * n["kl"] * split["cos/entropy_kl"])
    np.testing.assert_allclose(split["regularizer"], reg, rtol=1e-4, atol=1e-8)


def test_schedule_is_ragens():
    assert [s for s in range(1, 120) if split_due(s, 50)] == [1, 51, 101]
    assert not any(split_due(s, 0) for s in range(1, 10))


def test_components_follow_the_settings():
    assert loss_components(ALGO) == ("task", "entropy", "kl")
    assert loss_components(dataclasses.replace(ALGO, entropy_coeff=0.0)) == ("task", "kl")
    assert loss_components(dataclasses.replace(ALGO, use_kl_loss=False)) == ("task", "entropy")


def test_quantile_buckets_by_hand():
    # 7 groups of 2 rows; group std 0.5, 0, 2, 0, 1, 3, 0.2 -> ascending (ties in group order): 1, 3, 6, 0, 4, 2, 5
    gids = np.repeat(np.arange(7), 2)
    std = np.repeat([0.5, 0.0, 2.0, 0.0, 1.0, 3.0, 0.2], 2)
    b = variance_buckets(gids, std, num_buckets=3)
    assert list(b) == ["all", "bucket_1", "bucket_2", "bucket_3"]
    assert [b[f"bucket_{i}"].group_ids.tolist() for i in (1, 2, 3)] == [[1, 3], [6, 0], [4, 2, 5]]  # 7 // 3, rest last
    assert b["bucket_1"].rows.tolist() == [2, 3, 6, 7] and b["bucket_3"].rows.tolist() == [4, 5, 8, 9, 10, 11]
    assert b["all"].rows.tolist() == list(range(14))
    assert b["bucket_3"].group_std.tolist() == [1.0, 2.0, 3.0]
    # fewer groups than buckets: one group each; rows not valid (padding, failed episodes) are left out
    two = variance_buckets(np.array([5, 5, 9, 9, 0]), np.array([1.0, 1.0, 0.0, 0.0, 7.0]),
                           valid=np.array([1, 1, 1, 1, 0], bool))
    assert {k: v.group_ids.tolist() for k, v in two.items()} == {"all": [5, 9], "bucket_1": [9], "bucket_2": [5]}


def test_fixed_rv_buckets_by_hand():
    b = variance_buckets(np.arange(5), np.array([0.5, 1.0, 5.5, 1.2, 4.99]), mode="fixed_rv")
    assert {k: v.group_ids.tolist() for k, v in b.items()} == {
        "all": [0, 1, 2, 3, 4], "bucket_1": [0], "bucket_2": [1, 3], "bucket_5": [4], "bucket_6": [2]}
    with pytest.raises(ValueError, match="bucket mode"):
        variance_buckets(np.arange(2), np.zeros(2), mode="decile")


def test_gradient_split_per_bucket_with_padding_and_ragens_names():
    # 4 groups of 2 rows, std 0.5, 0, 2, 1; rows 6-7 (group 3) do not train: 3 buckets of one group, [1], [0], [2]
    graphdef, trainable, frozen = split_actor()
    gids = np.repeat(np.arange(4), 2)
    std = np.repeat([0.5, 0.0, 2.0, 1.0], 2)
    valid = np.array([1, 1, 1, 1, 1, 1, 0, 0], np.float32)
    m = gradient_split(graphdef, trainable, frozen, full_batch(), ALGO, group_ids=gids, reward_std=std,
                       row_valid=valid, mini_batch_size=4, micro_batch_size=2, num_buckets=3)
    by_hand = {name: written_norms(rows) for name, rows in (("bucket_1", np.array([2, 3])),
                                                            ("bucket_2", np.array([0, 1])),
                                                            ("bucket_3", np.array([4, 5])))}
    for name, ref in by_hand.items():  # buckets of 2 rows, topped up to a mini-batch of 4 with inert rows
        for c in ("task", "entropy", "kl"):
            np.testing.assert_allclose(m[f"grad_norm/{name}/{c}"], ref[c], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(m[f"grad_norm/{name}/loss/policy"], ref["loss/task"], rtol=1e-5, atol=1e-7)
        assert m[f"grad_norm/{name}/sample_count"] == 2.0 and m[f"grad_norm/{name}/group_rv_count"] == 1.0
    # "all": its 6 valid rows as mini-batches [0..3] and [4, 5]; the mean of their norms (reduce_metrics)
    first, second = written_norms(np.arange(4)), written_norms(np.array([4, 5]))
    np.testing.assert_allclose(m["grad_norm/all/task"], (first["task"] + second["task"]) / 2, rtol=1e-4, atol=1e-6)
    assert m["actor/grad_norm/kl"] == m["grad_norm/all/kl"] and m["actor/loss/total"] == m["grad_norm/all/loss/total"]
    tokens = full_batch()["loss_mask"][:6].sum()
    np.testing.assert_allclose(m["grad_norm/all/per_token/task"], m["grad_norm/all/task"] / tokens, rtol=1e-6)
    np.testing.assert_allclose(m["grad_norm/all/per_sample/entropy"], m["grad_norm/all/entropy"] / 6, rtol=1e-6)
    assert m["grad_norm/bucket_3/sample_pct"] == pytest.approx(2 / 6)
    assert m["grad_norm/all/reward_std_mean"] == pytest.approx((0.5 + 0.0 + 2.0) / 3)
    assert (m["grad_norm/bucket_3/reward_std_min"], m["grad_norm/bucket_3/reward_std_max"]) == (2.0, 2.0)
    assert "actor/grad_norm/total" not in m and "grad_norm/all/total" in m  # ours, under the bucket prefix only
