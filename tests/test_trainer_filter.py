"""The SNR filter's effect on the update: dropped groups cost nothing and change nothing."""

import dataclasses

import jax
import numpy as np
import pytest

from ragen_jax.rollout import group_seeds
from ragen_jax.rollout.types import RolloutResult
from ragen_jax.trainer import Trainer
from test_trainer_e2e import bandit_config
from test_trainer_faults import FlakyPick, capture_update


# the picks the "model" makes per episode: group stds 0, 0.58, 0.5, 0, so top_k 0.5 keeps groups 1 and 2
PICKS = list("AAAA" "AABB" "ABBB" "BBBB")


def grpo_config(workdir, filter_value):
    FlakyPick.FAILING = set()
    c = bandit_config(workdir, preset="grpo", adv_estimator="grpo", use_critic=False,
                      loss_agg_mode="seq-mean-token-mean")
    c.env.name = "test_trainer_faults:FlakyPick"
    c.rollout.engine = "lockstep"  # the scripted picks are read in the order responses are decoded
    c.env.groups, c.env.group_size = 4, 4
    c.trainer.mini_batch_size, c.trainer.micro_batch_size = 4, 2
    c.trainer.save_every, c.val.every, c.diagnostics.every = 0, 0, 0
    c.rollout.temperature = 3.0
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_k", filter_value, True
    return c


def update_with(cfg, result):
    """Parameters after one train_step that plays `result` instead of a rollout."""
    trainer = Trainer(cfg)
    trainer.engine.run = lambda *a, **k: result
    metrics = trainer.train_step(0)
    return [np.asarray(x) for x in jax.tree.leaves(trainer.models.actor.trainable)], metrics


def only_groups(result: RolloutResult, groups: np.ndarray, group_size: int) -> RolloutResult:
    """The rollout restricted to whole groups `groups` (episodes renumbered, rows kept in order)."""
    keep = [i for i, ep in enumerate(result.episodes) if i // group_size in set(groups.tolist())]
    renumber = {old: new for new, old in enumerate(keep)}
    rows = np.nonzero(np.isin(result.batch.episode_ids, keep))[0]
    batch = result.batch.select(rows)
    batch.episode_ids = np.array([renumber[e] for e in batch.episode_ids], np.int32)
    return dataclasses.replace(result, episodes=[result.episodes[i] for i in keep], batch=batch)


def _scripted_rollout(tmp_path, monkeypatch):
    """A trainer and its rollout of 4 groups x 4 whose responses read as the picks in PICKS."""
    probe = Trainer(grpo_config(tmp_path / "probe", 0.5))
    picks = iter(PICKS)
    monkeypatch.setattr(probe.engine.tokenizer, "decode", lambda ids: f"</think><answer>{next(picks)}</answer>")
    result = probe.engine.run(probe.models.sampling_params(), probe.train_env, *group_seeds(10000, 4, 4),
                              jax.random.PRNGKey(3), tag="pick", row_multiple=4)
    monkeypatch.undo()
    return probe, result


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_dropped_groups_change_nothing_and_kept_rows_are_the_whole_update(tmp_path, monkeypatch):
    probe, result = _scripted_rollout(tmp_path, monkeypatch)
    assert [ep.total_reward for ep in result.episodes] == [1.0 if p == "A" else 0.0 for p in PICKS]
    kept, dropped = np.array([1, 2]), np.array([0, 3])

    filtered, metrics = update_with(grpo_config(tmp_path / "a", 0.5), result)
    assert metrics["rollout/filter_kept_count"] == 2 and metrics["train/num_samples"] == 8
    # veRL's data metrics describe the trained rows: the kept groups' scores, not the whole rollout's
    kept_scores = [ep.total_reward for i, ep in enumerate(result.episodes) if i // 4 in kept]
    assert metrics["critic/score/mean"] == pytest.approx(np.mean(kept_scores), rel=1e-6, abs=1e-6)
    assert (metrics["critic/score/max"], metrics["critic/score/min"]) == (max(kept_scores), min(kept_scores))
    assert metrics["critic/rewards/mean"] == metrics["critic/score/mean"]  # no KL penalty in the reward

    scrambled = dataclasses.replace(result, batch=dataclasses.replace(result.batch))
    rows = np.isin(result.batch.episode_ids // 4, dropped)
    rng = np.random.default_rng(0)
    for name in ("tokens", "sample_logprobs", "raw_logprobs"):
        arr = getattr(result.batch, name).copy()
        arr[rows] = rng.permutation(arr[rows].ravel()).reshape(arr[rows].shape)
        setattr(scrambled.batch, name, arr)
    changed, _ = update_with(grpo_config(tmp_path / "b", 0.5), scrambled)
    assert all(np.array_equal(a, b) for a, b in zip(filtered, changed))  # a dropped group changes nothing

    kept_only, metrics = update_with(grpo_config(tmp_path / "c", 1.0), only_groups(result, kept, 4))
    assert metrics["rollout/filter_kept_count"] == 2  # no filtering: both groups of the restricted rollout
    for a, b in zip(filtered, kept_only):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # the update is the kept rows' update
    before = [np.asarray(x) for x in jax.tree.leaves(probe.models.actor.trainable)]
    assert not all(np.array_equal(a, b) for a, b in zip(before, filtered))  # and a real one


def _per_episode(values, episode_ids, n, reduce):
    """RAGEN's turn-level aggregation by episode, as a loop: lengths summed, entropies averaged over rows."""
    out = np.zeros(n)
    for e in range(n):
        rows = [v for v, i in zip(values, episode_ids) if i == e]
        out[e] = (sum(rows) if reduce == "sum" else np.mean(rows)) if rows else 0.0
    return out


def _ragen_top_k(group_scores, value):
    """RAGEN's _select_top_groups for top_k, largest: k = max(1, min(int(value * G), G)) best groups."""
    k = max(min(int(value * len(group_scores)), len(group_scores)), 1)
    return np.sort(np.argsort(-np.asarray(group_scores), kind="stable")[:k])


def _cut_trained_tokens(result: RolloutResult) -> RolloutResult:
    """The rollout with each row's last `episode % 7` trained tokens taken out of its loss mask, so the groups'
    trained lengths differ whatever the sampler drew (at temperature 3 the responses may all reach the cap)."""
    mask = result.batch.loss_mask.copy()
    for row, episode in enumerate(result.batch.episode_ids):
        trained = np.nonzero(mask[row])[0]
        mask[row, trained[len(trained) - min(int(episode) % 7, len(trained) - 1):]] = 0
    return dataclasses.replace(result, batch=dataclasses.replace(result.batch, loss_mask=mask))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_length_and_entropy_filters_run_in_the_trainer_as_ragen_scores_them(tmp_path, monkeypatch):
    """RAGEN's trainer filters on `length` (LengthRolloutFilter: trained tokens per trajectory, group mean) and
    `entropy` / `entropy_variance` (EntropyRolloutFilter: each row's masked mean token entropy under the current
    policy, averaged per trajectory; group mean / unbiased std)."""
    from ragen_jax.trainer.steps import policy_logprobs

    probe, result = _scripted_rollout(tmp_path, monkeypatch)
    result = _cut_trained_tokens(result)
    b, n = result.batch, len(result.episodes)
    mask = b.loss_mask > 0
    length = _per_episode(mask.sum(axis=1), b.episode_ids, n, "sum").reshape(4, 4)
    _, ent = policy_logprobs(probe.models.actor.module(), b.tokens, b.attention_mask,
                             temperature=probe.run.rollout.temperature)
    row_ent = (np.asarray(ent) * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
    entropy = _per_episode(row_ent, b.episode_ids, n, "mean").reshape(4, 4)

    for metric, quantity, scores in [("length", "length", length.mean(axis=1)),
                                     ("entropy", "entropy", entropy.mean(axis=1)),
                                     ("entropy_std", "entropy", entropy.std(axis=1, ddof=1))]:
        cfg = grpo_config(tmp_path / metric, 0.5)
        cfg.filter.metric = metric
        trainer = Trainer(cfg)
        trainer.engine.run = lambda *a, **k: result
        metrics = trainer.train_step(0)
        assert np.ptp(scores) > 0  # the groups differ, so which two are kept is a real check
        kept = _ragen_top_k(scores, 0.5)
        assert metrics["rollout/filter_kept_count"] == 2
        assert metrics[f"rollout/in_group_{quantity}_mean"] == pytest.approx(
            (length if quantity == "length" else entropy).mean(), rel=1e-5)
        assert metrics[f"rollout/chosen_in_group_{quantity}_std"] == pytest.approx(
            (length if quantity == "length" else entropy).std(axis=1, ddof=1)[kept].mean(), rel=1e-4, abs=1e-6)
        assert metrics["train/num_samples"] == np.isin(b.episode_ids // 4, kept).sum()


def _update_inputs(cfg, result, monkeypatch):
    """(metrics, the update's device arrays, its valid rows) of one train_step that plays `result`."""
    trainer = Trainer(cfg)
    trainer.engine.run = lambda *a, **k: result
    seen = {}
    capture_update(monkeypatch, seen)
    metrics = trainer.train_step(0)
    return metrics, {k: np.asarray(v) for k, v in seen["dev"].items()}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_data_metrics_are_verls_over_the_trained_tokens(tmp_path, monkeypatch):
    """veRL's compute_data_metrics: critic/{advantages,returns,values}/{mean,max,min} over the trained tokens,
    critic/vf_explained_var; without a critic no critic/values/* (veRL logs none; 0 would read as a value)."""
    probe, result = _scripted_rollout(tmp_path, monkeypatch)
    for use_critic in (False, True):
        cfg = grpo_config(tmp_path / f"critic{use_critic}", 0.5)
        if use_critic:
            cfg.algo.adv_estimator, cfg.algo.use_critic = "gae", True
        metrics, dev = _update_inputs(cfg, result, monkeypatch)
        on = dev["loss_mask"] > 0
        names = ("advantages", "returns") + (("values",) if use_critic else ())
        for name in names:
            x = dev[name][on]
            assert np.ptp(x) > 0 or name == "values"  # a real check of max and min
            assert metrics[f"critic/{name}/mean"] == pytest.approx(x.mean(), rel=1e-5, abs=1e-6)
            assert (metrics[f"critic/{name}/max"], metrics[f"critic/{name}/min"]) == pytest.approx((x.max(), x.min()))
        if use_critic:
            diff, ret = dev["returns"][on] - dev["values"][on], dev["returns"][on]
            assert metrics["critic/vf_explained_var"] == pytest.approx(
                1.0 - diff.var(ddof=1) / (ret.var(ddof=1) + 1e-5), rel=1e-4, abs=1e-5)
        else:
            assert not [k for k in metrics if k.startswith("critic/values/") or k == "critic/vf_explained_var"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_actor_entropy_is_ragens_before_the_update_over_the_whole_batch(tmp_path, monkeypatch):
    """RAGEN logs `actor/entropy` from the old log-probs' scoring: agg_loss(entropys, response_mask,
    loss_agg_mode) over the whole batch before the update, not a mean of mini-batch values during it."""
    from ragen_jax.trainer.steps import scored_positions
    probe, result = _scripted_rollout(tmp_path, monkeypatch)
    cfg = grpo_config(tmp_path / "run", 0.5)
    cfg.algo.loss_agg_mode = "seq-mean-token-mean"
    trainer = Trainer(cfg)
    trainer.engine.run = lambda *a, **k: result
    seen = {}
    capture_update(monkeypatch, seen)
    metrics = trainer.train_step(0)
    dev = {k: np.asarray(v) for k, v in seen["dev"].items()}
    ent = np.asarray(trainer.fns["score_policy"](trainer.models.actor.trainable, trainer.models.actor.frozen, dev["tokens"],
                                                 dev["attention_mask"], scored_positions(dev["loss_mask"]))[1])
    mask = dev["loss_mask"]
    rows = mask.sum(axis=1) > 0
    expected = ((ent * mask).sum(axis=1)[rows] / mask.sum(axis=1)[rows]).mean()
    assert metrics["actor/entropy"] == pytest.approx(expected, rel=1e-5)
