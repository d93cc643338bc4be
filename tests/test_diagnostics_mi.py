"""MI proxy: direct numpy loop equality, constructed policies, retrieval, sampling helpers."""

import math

import numpy as np
import pytest

from ragen_jax.diagnostics.mi import mi_estimates, prefix_metrics, retrieval_metrics
from ragen_jax.diagnostics.pair_draws import first_turn_pairs, trajectory_uniform_pairs


def loop_reference(L, col):
    """Plain-Python version of the estimator, row by row."""
    rows, cols = L.shape
    matched, marginal = [], []
    for i in range(rows):
        matched.append(L[i, col[i]])
        marginal.append(math.log(sum(math.exp(v) for v in L[i])) - math.log(cols))
    mi = sum(m - g for m, g in zip(matched, marginal)) / rows
    acc = sum(int(np.argmax(L[i]) == col[i]) for i in range(rows)) / rows
    return mi, -sum(matched) / rows, -sum(marginal) / rows, acc


def test_matches_direct_loop_on_small_case():
    rng = np.random.default_rng(3)
    L = rng.normal(-2.0, 1.0, size=(6, 4))
    col = np.array([0, 1, 2, 3, 1, 2])
    lengths = np.array([3, 5, 1, 2, 4, 6])
    m, ema = mi_estimates(L, col, lengths=lengths)
    mi, h_cond, h, acc = loop_reference(L, col)
    assert m["mi_estimate"] == pytest.approx(mi)
    assert m["conditional_entropy_est"] == pytest.approx(h_cond)
    assert m["reasoning_entropy_est"] == pytest.approx(h)
    assert m["reasoning_entropy_est"] == pytest.approx(m["conditional_entropy_est"] + m["mi_estimate"])
    assert m["retrieval_accuracy"] == pytest.approx(acc)
    assert m["retrieval_chance_level"] == pytest.approx(0.25)
    assert m["mi_upper_bound"] == pytest.approx(math.log(4))
    mi_seq, h_seq, _, _ = loop_reference(L * lengths[:, None], col)
    assert m["mi_seq_estimate"] == pytest.approx(mi_seq)
    assert m["conditional_entropy_seq_est"] == pytest.approx(h_seq)
    # z-score: per-row gap over the population std of the marginal, plus eps.
    matched = L[np.arange(6), col]
    marginal = np.log(np.exp(L).sum(1)) - math.log(4)
    assert m["mi_zscore"] == pytest.approx(((matched - marginal) / (marginal.std() + 1e-3)).mean())
    Ls = L * lengths[:, None]
    marginal_seq = np.log(np.exp(Ls).sum(1)) - math.log(4)
    assert ema == pytest.approx((marginal.std(), marginal_seq.std()))
    assert m["marginal_std_seq"] == pytest.approx(marginal_seq.std())


def test_ema_std_updates_across_calls():
    rng = np.random.default_rng(0)
    L1, L2 = rng.normal(size=(8, 4)), 3 * rng.normal(size=(8, 4))
    col = np.arange(8) % 4
    m1, ema = mi_estimates(L1, col, L_sum=L1)
    m2, ema2 = mi_estimates(L2, col, L_sum=L2, ema=ema, ema_decay=0.9)
    assert m1["marginal_std_ema"] == pytest.approx(m1["marginal_std"])
    assert m2["marginal_std_ema"] == pytest.approx(0.9 * m1["marginal_std"] + 0.1 * m2["marginal_std"])
    assert ema2[0] == pytest.approx(m2["marginal_std_ema"])


def test_input_agnostic_policy_has_no_mi_and_chance_retrieval():
    # Same reasoning distribution under every prompt: L[i, j] does not depend on j.
    rng = np.random.default_rng(1)
    n = 32
    row_logp = rng.uniform(-3.0, -2.0, size=n)  # high conditional entropy (2-3 nats / token)
    L = np.repeat(row_logp[:, None], n, axis=1)
    m, _ = mi_estimates(L, np.arange(n), lengths=np.full(n, 10))
    assert abs(m["mi_estimate"]) < 1e-9
    assert m["conditional_entropy_est"] > 2.0
    assert m["retrieval_accuracy"] == pytest.approx(m["retrieval_chance_level"], abs=1.5 / n)
    assert m["retrieval_accuracy_at_8"] == pytest.approx(8 / n, abs=1.5 / n)
    # Small prompt-independent noise keeps retrieval near chance (averaged over many rows).
    L_noisy = np.repeat(rng.uniform(-3, -2, size=512)[:, None], n, axis=1) + rng.normal(0, 0.01, (512, n))
    m, _ = mi_estimates(L_noisy, np.arange(512) % n, lengths=np.ones(512))
    assert abs(m["retrieval_accuracy"] - 1 / n) < 0.04
    assert m["mi_estimate"] < 0.01


def test_input_copying_policy_reaches_log_n_and_perfect_retrieval():
    # Reasoning copies its prompt: likely under its own prompt, very unlikely under any other.
    n = 16
    L = np.full((n, n), -40.0)
    np.fill_diagonal(L, -0.5)
    m, _ = mi_estimates(L, np.arange(n), lengths=np.full(n, 4))
    assert m["mi_estimate"] == pytest.approx(math.log(n), abs=1e-6)
    assert m["mi_estimate"] <= m["mi_upper_bound"] + 1e-12
    assert m["retrieval_accuracy"] == 1.0 and m["retrieval_above_chance"] == pytest.approx(1 - 1 / n)
    assert m["conditional_entropy_est"] == pytest.approx(0.5)


def test_duplicate_prompts_are_one_answer_for_retrieval():
    # Columns 0 and 1 hold the same prompt; row 0 (own column 1) ranks column 0 first.
    L = np.array([[0.0, -1.0, -5.0], [-5.0, -5.0, 0.0]])
    col = np.array([1, 2])
    merged = retrieval_metrics(L, col, col_keys=[(7, 8), (7, 8), (9,)])
    plain = retrieval_metrics(L, col)
    assert merged["retrieval_accuracy"] == 1.0 and plain["retrieval_accuracy"] == 0.5
    assert merged["retrieval_chance_level"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert merged["retrieval_chance_level_at_2"] == 1.0  # capped
    assert plain["retrieval_accuracy_at_2"] == 1.0 and plain["retrieval_chance_level_at_2"] == pytest.approx(2 / 3)


def test_degenerate_and_bad_inputs():
    assert mi_estimates(np.zeros((3, 1)), np.zeros(3, int), lengths=np.ones(3)) == ({}, None)
    with pytest.raises(ValueError, match="L_sum"):
        mi_estimates(np.zeros((2, 2)), np.array([0, 1]))
    with pytest.raises(ValueError, match="col_of_row"):
        mi_estimates(np.zeros((2, 2)), np.array([0, 2]), lengths=np.ones(2))
    assert prefix_metrics({"mi_estimate": 1.0}, "collapse_first_turn_sample") == {
        "collapse_first_turn_sample/mi_estimate": 1.0
    }


def test_first_turn_pairs_merges_groups_and_skips_empty():
    prompts = [[1, 2], [1, 2], [3], [3], [4, 4], [4, 4]]
    reasonings = [[5], [], [6, 7], [8], [9], [10]]
    groups = [0, 0, 1, 1, 2, 2]
    s = first_turn_pairs(prompts, reasonings, groups, np.random.default_rng(0), num_samples=64)
    assert s.prompts == [[1, 2], [3], [4, 4]]
    assert s.reasonings == [[5], [6, 7], [8], [9], [10]]
    assert s.col_of_row.tolist() == [0, 1, 1, 2, 2]
    assert s.lengths.tolist() == [1, 2, 1, 1, 1]
    small = first_turn_pairs(prompts, reasonings, groups, np.random.default_rng(0), num_samples=2)
    assert len(small.reasonings) == 2 and len(small.prompts) == len(set(small.col_of_row.tolist()))


def test_first_turn_columns_are_the_distinct_prompts():
    """Bandit's episodes of a group draw their own arms (seed + instance): each prompt is its own column;
    groups that show one prompt share a column. Columns follow the lowest group id showing them."""
    s = first_turn_pairs([[2], [1], [3], [1]], [[5], [6], [7], [8]], [1, 0, 0, 2], np.random.default_rng(0))
    assert s.prompts == [[1], [3], [2]]
    assert s.col_of_row.tolist() == [2, 0, 1, 0]


def test_trajectory_uniform_pairs():
    turn_prompts = [[[1], [1, 2], [1, 2, 3]], [[7]], [[9], [9, 9]]]
    turn_reasonings = [[[5], [], [6]], [[8]], [[], []]]
    rng = np.random.default_rng(0)
    s = trajectory_uniform_pairs(turn_prompts, turn_reasonings, rng, num_samples=64)
    assert len(s.reasonings) <= 3  # three turns carry reasoning
    assert s.col_of_row.tolist() == list(range(len(s.reasonings)))
    for x, z in zip(s.prompts, s.reasonings):
        assert (x, z) in [([1], [5]), ([1, 2, 3], [6]), ([7], [8])]
    # Trajectory-uniform: trajectory 1 (one turn) is drawn as often as trajectory 0 (two turns).
    picks = []
    for seed in range(300):
        s = trajectory_uniform_pairs(turn_prompts, turn_reasonings, np.random.default_rng(seed), 1)
        picks += [tuple(x) for x in s.prompts]
    share_traj1 = picks.count((7,)) / len(picks)
    assert 0.4 < share_traj1 < 0.6


def test_whitespace_only_reasoning_is_empty_as_ragen_strips_it():
    """RAGEN strips the text between <think> and </think> before tokenizing it: whitespace-only thinking is no
    reasoning (skipped by both samplings, not counted in collapse/valid_thinking_rate), and whitespace at either
    end is not part of Z. Token ids: 1 = " ", 2 = "\\n", 5 = "go", 6 = " left", 9 = "</think>"."""
    from types import SimpleNamespace

    from ragen_jax.diagnostics.collapse import CollapseConfig, collapse_metrics
    from ragen_jax.diagnostics.pairs import rollout_pairs

    text = {1: " ", 2: "\n", 5: "go", 6: " left", 9: "</think>"}
    decode = lambda ids: "".join(text[i] for i in ids)  # noqa: E731
    turn = lambda ctx, resp: SimpleNamespace(context_tokens=ctx, response_tokens=resp)  # noqa: E731
    episodes = [
        SimpleNamespace(group_id=0, history=[turn([10], [2, 5, 6, 1, 9]), turn([10, 11], [2, 9])]),
        SimpleNamespace(group_id=1, history=[turn([20], [1, 2, 9]), turn([20, 21], [5, 9])]),
    ]
    pairs = rollout_pairs(episodes, [9], decode)
    assert pairs.first_turn_reasonings == [[5, 6], []]
    assert pairs.turn_reasonings == [[[5, 6], []], [[], [5]]]
    config = CollapseConfig(num_samples=None)
    never = lambda prompts, reasonings: (np.zeros((len(reasonings), len(prompts))),) * 2  # noqa: E731
    metrics, _ = collapse_metrics(pairs, never, config, np.random.default_rng(0))
    assert metrics["collapse/valid_thinking_rate"] == 0.5  # 2 of 4 turns think something
    assert metrics["collapse/first_turn_num_valid"] == 1.0


def test_a_failed_episode_is_left_out_of_the_pairs_and_counted():
    """An episode whose env failed (crashed, timed out) never trains, so its reasoning must not enter the MI rows,
    columns or the valid-thinking counts; collapse/num_failed_excluded says how many were left out.
    Token ids: 5 = "go", 6 = " left", 7 = " right", 9 = "</think>"."""
    from types import SimpleNamespace

    from ragen_jax.diagnostics.collapse import CollapseConfig, collapse_metrics
    from ragen_jax.diagnostics.pairs import rollout_pairs

    text = {5: "go", 6: " left", 7: " right", 9: "</think>"}
    decode = lambda ids: "".join(text[i] for i in ids)  # noqa: E731
    turn = lambda ctx, resp: SimpleNamespace(context_tokens=ctx, response_tokens=resp)  # noqa: E731
    episodes = [
        SimpleNamespace(group_id=0, error="", history=[turn([10], [5, 6, 9])]),
        SimpleNamespace(group_id=1, error="TimeoutError: env step took 30 s", history=[turn([20], [5, 7, 9])]),
        SimpleNamespace(group_id=2, error="", history=[turn([30], [6, 9])]),
    ]
    pairs = rollout_pairs(episodes, [9], decode)
    assert pairs.first_turn_reasonings == [[5, 6], [6]] and pairs.group_ids == [0, 2]
    assert pairs.first_turn_prompts == [[10], [30]] and pairs.turn_prompts == [[[10]], [[30]]]
    assert pairs.num_failed == 1
    seen = []

    def score(prompts, reasonings):
        seen.append((prompts, reasonings))
        return (np.zeros((len(reasonings), len(prompts))),) * 2

    metrics, _ = collapse_metrics(pairs, score, CollapseConfig(num_samples=None), np.random.default_rng(0))
    assert metrics["collapse/num_failed_excluded"] == 1.0
    assert metrics["collapse/first_turn_num_total"] == 2.0
    assert metrics["collapse_first_turn_sample/num_samples"] == 2.0
    assert all([5, 7] not in z and [20] not in x for x, z in seen) and len(seen) == 2


def test_reasoning_ends_where_the_text_closes_the_tag_even_when_bpe_merged_its_first_piece():
    """Byte-level BPE merges the start of "</think>" with what precedes it: cl100k-style vocabularies (Qwen2.5's
    among them) have " </" and ".</" tokens, so a response "... up </think>" holds none of the tokens of a
    standalone "</think>" and the token match found no reasoning at all (every MI step silently skipped). Ids: 1 =
    "I", 2 = " move", 3 = " up", 4 = " </", 5 = "think", 6 = ">", 7 = "</", 8 = ".</", 9 = " <", 10 = "answer"."""
    from ragen_jax.diagnostics.pairs import reasoning_tokens

    text = {1: "I", 2: " move", 3: " up", 4: " </", 5: "think", 6: ">", 7: "</", 8: ".</", 9: " <", 10: "answer"}
    decode = lambda ids: "".join(text[i] for i in ids)  # noqa: E731
    close = [7, 5, 6]
    assert reasoning_tokens([1, 2, 3, 7, 5, 6, 9, 10, 6], close, decode) == [1, 2, 3]  # as standalone
    assert reasoning_tokens([1, 2, 3, 4, 5, 6, 9, 10, 6], close, decode) == [1, 2, 3]  # " </" merged
    assert reasoning_tokens([1, 2, 3, 8, 5, 6], close, decode) == [1, 2, 3]  # ".</": the period goes with the tag
    assert reasoning_tokens([4, 5, 6, 1], close, decode) == []  # closed at once
    assert reasoning_tokens([1, 2, 3, 9, 10, 6], close, decode) == []  # never closed
    # the first close counts, even when a later one is tokenized as the standalone tag
    assert reasoning_tokens([1, 4, 5, 6, 2, 7, 5, 6], close, decode) == [1]
    assert reasoning_tokens(np.array([1, 2, 7, 5, 6]), close) == [1, 2]  # no decode: the tag's tokens
