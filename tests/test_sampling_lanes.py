"""A sampler in decode lanes (`sampling.lanes`): the same turns as one program over the whole batch (multi-turn
continuation, inactive rows, prefills shared across lanes, sampling), the default rule, bad caches, and errors
raised inside a lane."""

import jax
import numpy as np
import pytest

from ragen_jax.models import tiny_config
from ragen_jax.sampling import Sampler, SamplingConfig
from ragen_jax.sampling.lanes import LaneCaches, decode_lanes, lane_plan, run_lanes

from sampling_testlib import PAD, prompts as _prompts, sharp_model

B = 8


@pytest.fixture(scope="module")
def model():
    return sharp_model()


def _assert_same_turn(a, b):
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(np.asarray(a.lengths), np.asarray(b.lengths))
    np.testing.assert_array_equal(np.asarray(a.finish_reason), np.asarray(b.finish_reason))
    np.testing.assert_array_equal(np.asarray(a.cache_lens), np.asarray(b.cache_lens))
    np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=1e-5)
    np.testing.assert_allclose(np.asarray(a.raw_logprobs), np.asarray(b.raw_logprobs), atol=1e-5)


@pytest.mark.parametrize("greedy, lanes", [
    (False, (2,)), pytest.param(True, (2, 4), marks=pytest.mark.slow)], ids=["sampled", "greedy"])
def test_lanes_play_the_same_multi_turn_rows_as_one_program(model, greedy, lanes):
    """Three turns, the cache kept between them, rows 2 and 5 idle in the second turn: two (and four) lanes give
    the tokens, lengths and cache lengths of one program (log-probs to float rounding), and the same cache over
    each row's cache length (past it, finished rows' throwaway writes differ: a lane stops once its rows do)."""
    graphdef, params = model
    config = SamplingConfig(max_new_tokens=7, greedy=greedy, eos_ids=(5,))
    samplers = {n: Sampler(graphdef, cache_size=128, pad_id=PAD, batch_size=B, lanes=n) for n in (1,) + lanes}
    assert [s.lanes for s in samplers.values()] == [1, *lanes]
    rng = np.random.RandomState(0)
    prompts, lens = _prompts(rng, [5, 17, 9, 1, 12, 3, 8, 20])
    outs = {n: s.generate(params, prompts, lens, jax.random.key(0), config) for n, s in samplers.items()}
    assert all(isinstance(outs[n].cache, LaneCaches) and len(outs[n].cache.lanes) == n for n in lanes)
    for turn, active in enumerate([np.array([1, 1, 0, 1, 1, 0, 1, 1], bool), np.ones(B, bool)]):
        for n in lanes:
            _assert_same_turn(outs[n], outs[1])
        msgs, msg_lens = _prompts(rng, list(rng.randint(1, 9, B)))
        new = np.concatenate([np.asarray(outs[1].tokens)[np.arange(B), np.maximum(np.asarray(outs[1].lengths) - 1, 0)]
                              [:, None], msgs], axis=1)
        new_lens = msg_lens + 1
        outs = {n: s.generate(params, new, new_lens, jax.random.key(turn + 1), config, cache=outs[n].cache,
                              cache_lens=np.asarray(outs[n].cache_lens), active=active)
                for n, s in samplers.items()}
    held = np.asarray(outs[1].cache_lens)
    for n in lanes:
        _assert_same_turn(outs[n], outs[1])
        for b in range(B):
            for got, want in zip(outs[n].cache.k, outs[1].cache.k):
                np.testing.assert_allclose(np.asarray(got)[b, ..., :held[b]], np.asarray(want)[b, ..., :held[b]],
                                           atol=1e-5)
            for got, want in zip(outs[n].cache.v, outs[1].cache.v):
                np.testing.assert_allclose(np.asarray(got)[b, :, :held[b]], np.asarray(want)[b, :, :held[b]], atol=1e-5)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_begin_shares_prefills_within_a_lane_only(model):
    """Rows of one group (one prompt, prefilled once) spread over both lanes, begun out of order with other rows:
    each lane prefills the prompt once, and every row's turn equals one program's."""
    graphdef, params = model
    config = SamplingConfig(max_new_tokens=6, greedy=True)
    rng = np.random.RandomState(4)
    prompts, lens = _prompts(rng, [9, 9, 9, 9, 4, 11])
    prompts[1:4] = prompts[0]
    rows = np.array([6, 1, 3, 5, 2, 7])  # rows 6, 1, 3, 5 share row 6's prompt; lanes of 4: {1, 3, 2}, {6, 5, 7}
    source = np.array([0, 0, 0, 0, 4, 5])
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(3), len(rows))))
    results = {}
    for n in (1, 2):
        sampler = Sampler(graphdef, cache_size=64, pad_id=PAD, batch_size=B, lanes=n)
        cache, cache_lens = sampler.init_cache()
        state = sampler.idle_state(config)
        cache, state = sampler.begin(params, cache, state, rows, prompts, lens, cache_lens[rows], keys, config,
                                     source=source)
        cache, state = sampler.decode(params, cache, state, config, 6, end=int(lens.max()) + 6)
        # the rows prefilled: one per prompt, in each lane that holds it (rows 1 and 6 for the shared prompt)
        assert sampler.prefilled_rows(rows, source).tolist() == ([0, 4, 5] if n == 1 else [0, 1, 4, 5])
        results[n] = (np.asarray(state.tokens), np.asarray(state.lengths), np.asarray(state.logprobs))
    np.testing.assert_array_equal(results[2][0], results[1][0])
    np.testing.assert_array_equal(results[2][1], results[1][1])
    np.testing.assert_allclose(results[2][2], results[1][2], atol=1e-5)
    assert (results[1][1][rows] == 6).all() and (results[1][1][[0, 4]] == 0).all()  # idle rows untouched


def test_lane_plan_maps_sources_into_each_lane():
    rows = np.array([6, 1, 3, 5, 2, 7])
    plan = lane_plan(rows, np.array([0, 0, 0, 0, 4, 5]), lane_rows=4)
    assert [lane for lane, _, _ in plan] == [0, 1]
    (_, picks0, local0), (_, picks1, local1) = plan
    np.testing.assert_array_equal(picks0, [1, 2, 4])  # rows 1, 3, 2: rows 1 and 3 share one prefill
    np.testing.assert_array_equal(local0, [0, 0, 2])
    np.testing.assert_array_equal(picks1, [0, 3, 5])  # rows 6, 5, 7: 6 and 5 share row 6's
    np.testing.assert_array_equal(local1, [0, 0, 2])


def test_default_lanes_follow_the_rule():
    small, big = tiny_config(), tiny_config(hidden_size=512, intermediate_size=1408, num_layers=8, num_heads=8,
                                            head_dim=64, vocab_size=32000)
    assert decode_lanes(small, "cpu", 64, cores=2) == 2
    assert decode_lanes(small, "cpu", 64, cores=16) == 8  # 8-row lanes at most
    assert decode_lanes(small, "cpu", 24, cores=4) == 3  # a divisor of the batch
    assert decode_lanes(small, "cpu", 8, cores=2) == 1  # 4-row lanes gain nothing
    assert decode_lanes(small, "gpu", 64, cores=2) == 1
    assert decode_lanes(small, "cpu", 64, cores=2, multi_device=True) == 1
    assert decode_lanes(big, "cpu", 64, cores=2) == 1  # each lane would stream every weight


def test_a_cache_of_the_other_kind_is_refused(model):
    graphdef, params = model
    prompts, lens = _prompts(np.random.RandomState(1), [3] * B)
    laned = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=B, lanes=2)
    plain = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=B, lanes=1)
    config = SamplingConfig(max_new_tokens=2, greedy=True)
    for sampler, other in ((laned, plain), (plain, laned)):
        cache, cache_lens = other.init_cache()
        with pytest.raises(ValueError, match="create it with Sampler.init_cache"):
            sampler.generate(params, prompts, lens, jax.random.key(0), config, cache=cache, cache_lens=cache_lens)
    with pytest.raises(ValueError, match="divide batch_size"):
        Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=B, lanes=3)


def test_an_error_in_one_lane_reaches_the_caller_after_every_lane_ran():
    ran = []

    def ok(i):
        ran.append(i)
        return i

    def bad():
        raise RuntimeError("lane failed")

    with pytest.raises(RuntimeError, match="lane failed"):
        run_lanes([lambda: ok(0), bad, lambda: ok(2)])
    assert sorted(ran) == [0, 2]
    assert run_lanes([lambda: ok(5), lambda: ok(6)], first_alone=True) == [5, 6]


def test_lanes_run_side_by_side():
    """Two lanes that each wait for the other finish only if they run at the same time."""
    import threading

    barrier = threading.Barrier(2, timeout=10)
    assert run_lanes([lambda: barrier.wait() >= 0, lambda: barrier.wait() >= 0]) == [True, True]
