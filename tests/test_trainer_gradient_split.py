"""RAGEN-2's gradient split against its written-out definitions on a tiny bigram model: each part's norm is the
norm of the gradient of that loss term alone, the parts' gradients add up to the update's, buckets by hand."""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.diagnostics.buckets import episode_reward_std, variance_buckets
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
    """Each term's gradient norm and value, written out, over `rows` of the batch (token-mean: the other rows'
    tokens masked out, one program for any rows)."""
    graphdef, trainable, frozen = split_actor()
    b = full_batch()
    if micro is None:
        b["loss_mask"] = b["loss_mask"] * np.isin(np.arange(8), rows)[:, None]
    else:
        b = {k: v[rows] for k, v in b.items()}
    b = {k: jnp.asarray(v) for k, v in b.items()}
    return {k: float(v) for k, v in _written(trainable, frozen, b, graphdef, algo, micro).items()}


def split_of(algo, micro, rows=np.arange(8)):
    graphdef, trainable, frozen = split_actor()
    b = {k: jnp.asarray(v[rows]) for k, v in full_batch().items()}
    return {k: float(v) for k, v in component_gradients(graphdef, trainable, frozen, b, algo, micro).items()}


@pytest.mark.parametrize("algo,micro,written_micro", [
    (ALGO, 4, None),  # token-mean over the mini-batch, accumulated over 2 micro-batches
    pytest.param(dataclasses.replace(ALGO, loss_agg_mode="seq-mean-token-mean", loss_scope="micro_batch"), 2, 2,
                 marks=pytest.mark.slow),  # veRL 0.4's per-micro-batch loss (RAGEN's); its own compile: slow
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
    # 4 groups of 2 rows, std 0.5, 0, 2, 1; row 5 does not train. 3 buckets of 4 groups: [1], [0], then [3, 2], the
    # remainder last; its rows 4, 6, 7 in batch order make a mini-batch of 4 with one inert row
    graphdef, trainable, frozen = split_actor()
    gids = np.repeat(np.arange(4), 2)
    std = np.repeat([0.5, 0.0, 2.0, 1.0], 2)
    valid = np.array([1, 1, 1, 1, 1, 0, 1, 1], np.float32)
    m = gradient_split(graphdef, trainable, frozen, full_batch(), ALGO, group_ids=gids, reward_std=std,
                       row_valid=valid, mini_batch_size=4, micro_batch_size=2, num_buckets=3)
    by_hand = {name: written_norms(rows) for name, rows in (("bucket_1", np.array([2, 3])),
                                                            ("bucket_2", np.array([0, 1])),
                                                            ("bucket_3", np.array([4, 6, 7])))}
    for name, ref in by_hand.items():
        for c in ("task", "entropy", "kl"):
            np.testing.assert_allclose(m[f"grad_norm/{name}/{c}"], ref[c], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(m[f"grad_norm/{name}/loss/policy"], ref["loss/task"], rtol=1e-5, atol=1e-7)
    assert (m["grad_norm/bucket_3/sample_count"], m["grad_norm/bucket_3/group_rv_count"]) == (3.0, 2.0)
    # "all": its 7 rows as mini-batches [0..3] and [4, 6, 7]; the mean of their norms (RAGEN's reduce_metrics)
    first = written_norms(np.arange(4))
    np.testing.assert_allclose(m["grad_norm/all/task"], (first["task"] + by_hand["bucket_3"]["task"]) / 2, rtol=1e-4,
                               atol=1e-6)
    assert m["actor/grad_norm/kl"] == m["grad_norm/all/kl"] and m["actor/loss/total"] == m["grad_norm/all/loss/total"]
    tokens = full_batch()["loss_mask"][valid > 0].sum()
    np.testing.assert_allclose(m["grad_norm/all/per_token/task"], m["grad_norm/all/task"] / tokens, rtol=1e-6)
    np.testing.assert_allclose(m["grad_norm/all/per_sample/entropy"], m["grad_norm/all/entropy"] / 7, rtol=1e-6)
    assert m["grad_norm/bucket_3/sample_pct"] == pytest.approx(3 / 7)
    assert m["grad_norm/all/reward_std_mean"] == pytest.approx((0.5 + 0.0 + 2.0 + 1.0) / 4)
    assert (m["grad_norm/bucket_3/reward_std_min"], m["grad_norm/bucket_3/reward_std_max"]) == (1.0, 2.0)
    assert "actor/grad_norm/total" not in m and "grad_norm/all/total" in m  # ours, under the bucket prefix only


def test_episode_reward_std_is_the_unbiased_std_of_valid_members():
    rewards = np.array([0.0, 1.0, 1.0, 5.0, 2.0, 2.0, 9.0])
    gids = np.array([3, 3, 3, 7, 7, 1, 1])  # any ids, any order
    valid = np.array([1, 1, 1, 0, 1, 1, 1], bool)  # group 7 keeps one valid member: 0, as the filter's rule
    std = episode_reward_std(rewards, gids, valid)
    np.testing.assert_allclose(std, [np.sqrt(1 / 3)] * 3 + [0.0, 0.0] + [np.std([2.0, 9.0], ddof=1)] * 2)


def _fake_split(steps=(1, 51)):
    """Metrics of two analysis steps as gradient_split names them (3 buckets)."""
    out = {}
    for s in steps:
        m = {}
        for i, b in enumerate(["all", "bucket_1", "bucket_2", "bucket_3"]):
            m.update({f"grad_norm/{b}/{k}": v * (1 + i) / s for k, v in (("task", 2.0), ("entropy", 1e-3),
                                                                         ("kl", 0.2), ("total", 1.9),
                                                                         ("regularizer", 0.2))})
            m.update({f"grad_norm/{b}/reward_std_mean": 0.1 * i, f"grad_norm/{b}/sample_count": 8.0 / (1 + (i > 0)),
                      f"grad_norm/{b}/group_rv_count": 4.0, f"grad_norm/{b}/cos/task_entropy": 0.1,
                      f"grad_norm/{b}/cos/task_kl": -0.2, f"grad_norm/{b}/cos/entropy_kl": 0.05})
        out[s] = m
    return out


def test_gradient_figures_table_and_layout():
    from ragen_jax.diagnostics.__main__ import gradient_summary
    from ragen_jax.diagnostics.plots import (bucket_names, gradient_buckets_image, gradient_curves_figure,
                                             tensorboard_layout, zscore_figure)

    split = _fake_split()
    assert bucket_names(split[1]) == ["bucket_1", "bucket_2", "bucket_3"]
    img = gradient_buckets_image(split[1])
    assert img.dtype == np.uint8 and img.shape[2] == 3 and img.std() > 10
    scalars = {}
    for s, m in split.items():
        for k, v in m.items():
            scalars.setdefault(k, []).append((s, v))
    assert len(gradient_curves_figure(scalars).axes) == 3  # task, entropy, kl
    z = {f"p/{n}": [(1, 0.5), (5, 0.2)] for n in ("mi_zscore", "mi_zscore_ema", "retrieval_above_chance")}
    assert len(zscore_figure(z, "p").axes) == 2  # z-scores and, on the right, retrieval above chance
    with pytest.raises(ValueError, match="no MI diagnostics"):
        zscore_figure({}, "p")
    with pytest.raises(ValueError, match="gradient analysis"):
        gradient_buckets_image({})
    table = gradient_summary(split[1])
    header = table.splitlines()[1]
    assert header.index("cos task_entropy") < header.index("cos task_kl") < header.index("cos entropy_kl")
    row = next(line for line in table.splitlines() if line.startswith("bucket_3"))
    assert row.split()[1:4] == ["4", "4", "0.3000"] and "cos task_entropy" in table
    charts = tensorboard_layout()["gradient analysis"]
    (pattern,) = charts["kl grad norm by bucket"][1]
    assert re.match(pattern, "grad_norm/bucket_12/kl") and not re.match(pattern, "grad_norm/bucket_1/per_token/kl")
