"""Sampler.generate on tiny random models: greedy/argmax agreement, log-probs vs a fresh forward, stops,
ragged prompts, inactive rows, multi-turn continuation, overflow errors and a bounded number of programs."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models import CausalLM, ModelConfig
from ragen_jax.models import transformer as transformer_module
from ragen_jax.sampling import sampler as sampler_module
from ragen_jax.sampling import Sampler, SamplingConfig, score_tokens

from sampling_testlib import CFG, PAD, prompts as _prompts, sharp_model


@pytest.fixture(scope="module")
def model():
    return sharp_model()


def _concat(parts):
    """Right-padded [B, T] tokens and mask from per-row lists of 1-D token arrays."""
    rows = [np.concatenate(p).astype(np.int32) for p in parts]
    width = max(len(r) for r in rows)
    toks = np.full((len(rows), width), PAD, np.int32)
    mask = np.zeros((len(rows), width), bool)
    for b, r in enumerate(rows):
        toks[b, : len(r)], mask[b, : len(r)] = r, True
    return toks, mask


def _generated(out, b):
    return np.asarray(out.tokens[b, : int(out.lengths[b])])


def _full_logits(model, toks, mask):
    graphdef, params = model
    lm = nnx.merge(graphdef, params)
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32)
    logits, _ = lm(jnp.asarray(toks), jnp.asarray(positions), attention_mask=jnp.asarray(mask))
    return np.asarray(logits)


def test_greedy_equals_argmax_of_full_forward_with_ragged_prompts(model):
    graphdef, params = model
    prompts, lens = _prompts(np.random.RandomState(0), [5, 17, 9, 1])
    sampler = Sampler(graphdef, cache_size=64, pad_id=PAD, batch_size=4)
    out = sampler.generate(params, prompts, lens, jax.random.key(0), SamplingConfig(max_new_tokens=10, greedy=True))
    np.testing.assert_array_equal(np.asarray(out.lengths), 10)
    np.testing.assert_array_equal(np.asarray(out.finish_reason), 0)
    np.testing.assert_array_equal(np.asarray(out.cache_lens), lens + 9)
    toks, mask = _concat([[prompts[b, : lens[b]], _generated(out, b)] for b in range(4)])
    logits = _full_logits(model, toks, mask)
    for b in range(4):
        pred = logits[b, lens[b] - 1 : lens[b] + 9].argmax(-1)
        np.testing.assert_array_equal(pred, np.asarray(out.tokens[b]))
    ref = np.asarray(score_tokens(graphdef, params, toks, mask))
    for b in range(4):
        np.testing.assert_allclose(np.asarray(out.raw_logprobs[b]), ref[b, lens[b] : lens[b] + 10], atol=1e-5)
        np.testing.assert_allclose(np.asarray(out.logprobs[b]), ref[b, lens[b] : lens[b] + 10], atol=1e-5)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_sampled_logprobs_match_fresh_forward_with_temperature_and_top_k(model):
    graphdef, params = model
    prompts, lens = _prompts(np.random.RandomState(1), [7, 3, 12])
    sampler = Sampler(graphdef, cache_size=48, pad_id=PAD, batch_size=3)
    config = SamplingConfig(max_new_tokens=12, temperature=0.7, top_k=5)
    out = sampler.generate(params, prompts, lens, jax.random.key(3), config)
    toks, mask = _concat([[prompts[b, : lens[b]], _generated(out, b)] for b in range(3)])
    logits = _full_logits(model, toks, mask)
    raw_ref = np.asarray(score_tokens(graphdef, params, toks, mask))
    for b in range(3):
        n = int(out.lengths[b])
        step_logits = logits[b, lens[b] - 1 : lens[b] - 1 + n] / 0.7
        kth = np.sort(step_logits, -1)[:, -5][:, None]
        kept = np.where(step_logits >= kth, step_logits, -np.inf)
        lse = np.log(np.sum(np.exp(kept - kept.max(-1, keepdims=True)), -1)) + kept.max(-1)
        sampled = _generated(out, b)
        ref = kept[np.arange(n), sampled] - lse
        assert np.all(np.isfinite(ref)), "sampled a token outside the top-k"
        np.testing.assert_allclose(np.asarray(out.logprobs[b, :n]), ref, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out.raw_logprobs[b, :n]), raw_ref[b, lens[b] : lens[b] + n], atol=1e-5)
        assert np.all(np.asarray(out.logprobs[b, n:]) == 0)
    out_t = Sampler(graphdef, cache_size=48, pad_id=PAD, batch_size=3).generate(
        params, prompts, lens, jax.random.key(4), SamplingConfig(max_new_tokens=12, temperature=0.7))
    toks_t, mask_t = _concat([[prompts[b, : lens[b]], _generated(out_t, b)] for b in range(3)])
    temp_ref = np.asarray(score_tokens(graphdef, params, toks_t, mask_t, temperature=0.7))
    for b in range(3):
        np.testing.assert_allclose(np.asarray(out_t.logprobs[b]), temp_ref[b, lens[b] : lens[b] + 12], atol=1e-5)


def _first_stop(gen, eos, seqs, n):
    """Expected (length, reason) of a row whose unstopped greedy output is gen."""
    for i in range(n):
        if gen[i] in eos:
            return i + 1, 1
        if any(i + 1 >= len(s) and tuple(gen[i + 1 - len(s) : i + 1]) == s for s in seqs):
            return i + 1, 2
    return n, 0


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_eos_and_stop_sequences_end_rows_at_the_right_place(model):
    graphdef, params = model
    prompts, lens = _prompts(np.random.RandomState(2), [6, 6, 6, 6])
    sampler = Sampler(graphdef, cache_size=64, pad_id=PAD, batch_size=4)
    free = sampler.generate(params, prompts, lens, jax.random.key(0), SamplingConfig(max_new_tokens=16, greedy=True))
    gen = np.asarray(free.tokens)
    eos = (int(gen[0, 3]),)
    seqs = (tuple(int(t) for t in gen[1, 5:8]), (int(prompts[2, 5]), int(gen[2, 0])))  # 2nd spans the prompt
    config = SamplingConfig(max_new_tokens=16, greedy=True, eos_ids=eos, stop_sequences=seqs)
    out = sampler.generate(params, prompts, lens, jax.random.key(0), config)
    for b in range(4):
        length, reason = _first_stop(list(gen[b]), eos, seqs, 16)
        assert int(out.lengths[b]) == length and int(out.finish_reason[b]) == reason, (b, gen[b])
        np.testing.assert_array_equal(np.asarray(out.tokens[b, :length]), gen[b, :length])
        assert np.all(np.asarray(out.tokens[b, length:]) == PAD)
        assert np.all(np.asarray(out.raw_logprobs[b, length:]) == 0)
        assert int(out.cache_lens[b]) == lens[b] + length - 1
    assert int(out.finish_reason[0]) == 1 and int(out.finish_reason[1]) in (1, 2)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_continuation_matches_generation_from_scratch(model):
    graphdef, params = model
    rng = np.random.RandomState(3)
    prompts, lens = _prompts(rng, [4, 11, 7])
    greedy = SamplingConfig(max_new_tokens=6, greedy=True)
    sampler = Sampler(graphdef, cache_size=96, pad_id=PAD, batch_size=3)
    history = [[prompts[b, : lens[b]]] for b in range(3)]
    out = sampler.generate(params, prompts, lens, jax.random.key(0), greedy)
    for turn, msg_lens in enumerate([[3, 9, 1], [5, 2, 13]]):
        for b in range(3):
            history[b].append(_generated(out, b))
        msgs, _ = _prompts(rng, msg_lens)
        # New tokens of this turn: the last sampled token (not yet in the cache) + the environment message.
        new = [[_generated(out, b)[-1:], msgs[b, : msg_lens[b]]] for b in range(3)]
        new_toks, new_mask = _concat(new)
        out = sampler.generate(params, new_toks, new_mask.sum(1), jax.random.key(turn), greedy,
                               cache=out.cache, cache_lens=out.cache_lens)
        for b in range(3):
            history[b].append(msgs[b, : msg_lens[b]])
        full_toks, full_mask = _concat(history)
        scratch = Sampler(graphdef, cache_size=96, pad_id=PAD, batch_size=3).generate(
            params, full_toks, full_mask.sum(1), jax.random.key(9), greedy)
        np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(scratch.tokens))
        np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(scratch.logprobs), atol=1e-5)
        np.testing.assert_allclose(np.asarray(out.raw_logprobs), np.asarray(scratch.raw_logprobs), atol=1e-5)
        np.testing.assert_array_equal(np.asarray(out.cache_lens), np.asarray(scratch.cache_lens))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_rewound_cache_ignores_the_stale_slots_past_cache_lens(model):
    """A call with cache_lens below what the cache holds (the engine rewinds when a turn drops out of the
    context) writes over the stale slots; whatever stays past the row's new end must never be attended.
    Row 0 rewinds into its prompt and feeds fewer tokens than it had, row 1 starts over from slot 0, row 2
    continues as usual: each equals generating from scratch over the tokens it now holds."""
    graphdef, params = model
    rng = np.random.RandomState(12)
    greedy = SamplingConfig(max_new_tokens=10, greedy=True)
    sampler = Sampler(graphdef, cache_size=128, pad_id=PAD, batch_size=3)
    prompts, lens = _prompts(rng, [30, 25, 12])
    first = sampler.generate(params, prompts, lens, jax.random.key(0), greedy)
    msgs, msg_lens = _prompts(rng, [4, 3, 6])
    keep = np.array([5, 0, int(first.cache_lens[2])])
    held = [[prompts[0, :5], msgs[0, :4]],
            [msgs[1, :3]],
            [prompts[2, :12], _generated(first, 2), msgs[2, :6]]]
    new = [[msgs[0, :4]], [msgs[1, :3]], [_generated(first, 2)[-1:], msgs[2, :6]]]
    new_toks, new_mask = _concat(new)
    assert (np.asarray(first.cache_lens)[:2] > keep[:2] + new_mask.sum(1)[:2]).all()  # stale slots remain
    out = sampler.generate(params, new_toks, new_mask.sum(1), jax.random.key(1), greedy,
                           cache=first.cache, cache_lens=keep)
    full_toks, full_mask = _concat(held)
    scratch = Sampler(graphdef, cache_size=128, pad_id=PAD, batch_size=3).generate(
        params, full_toks, full_mask.sum(1), jax.random.key(9), greedy)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(scratch.tokens))
    np.testing.assert_allclose(np.asarray(out.raw_logprobs), np.asarray(scratch.raw_logprobs), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out.cache_lens), np.asarray(scratch.cache_lens))


# The dense-window decode (GPUs, meshes) runs with -m slow; the default run's model-step test in
# test_models_decode_attention.py compares it with the ragged step on every push.
@pytest.mark.parametrize("ragged", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["ragged-decode", "dense-decode"])
def test_attention_window_over_the_cache_changes_nothing(model, monkeypatch, ragged):
    """Reading only the first window_length(...) slots (256, then 512 as the rows grow) of a 1024-slot cache
    gives what attending over every slot gives, turn after turn; decode steps either read each row's own length
    of the whole cache (ragged, the CPU's default) or the dense window (as on a GPU or under a mesh)."""
    if not ragged:
        for module in (sampler_module, transformer_module):
            monkeypatch.setattr(module, "uses_ragged_decode", lambda devices=1: False)
    graphdef, params = model
    rng = np.random.RandomState(11)
    config = SamplingConfig(max_new_tokens=40, temperature=0.8)
    windowed = Sampler(graphdef, cache_size=1024, pad_id=PAD, batch_size=3)
    full = Sampler(graphdef, cache_size=1024, pad_id=PAD, batch_size=3, kv_window=False)
    new_toks, new_lens = _prompts(rng, [200, 30, 120])
    runs = {"windowed": (windowed, None), "full": (full, None)}
    for turn in range(2):
        outs = {}
        for name, (sampler, prev) in runs.items():
            kwargs = {} if prev is None else dict(cache=prev.cache, cache_lens=prev.cache_lens)
            outs[name] = sampler.generate(params, new_toks, new_lens, jax.random.key(turn), config, **kwargs)
        w, f = outs["windowed"], outs["full"]
        np.testing.assert_array_equal(np.asarray(w.tokens), np.asarray(f.tokens))
        np.testing.assert_allclose(np.asarray(w.logprobs), np.asarray(f.logprobs), atol=1e-5)
        np.testing.assert_array_equal(np.asarray(w.cache_lens), np.asarray(f.cache_lens))
        for b, n in enumerate(np.asarray(w.cache_lens)):
            np.testing.assert_allclose(np.asarray(w.cache.k)[:, b, ..., :n], np.asarray(f.cache.k)[:, b, ..., :n],
                                       atol=1e-5)
        runs = {name: (runs[name][0], outs[name]) for name in runs}
        msgs, msg_lens = _prompts(rng, [150, 10, 60])
        new_toks, new_lens = _concat([[_generated(w, b)[-1:], msgs[b, : msg_lens[b]]] for b in range(3)])
        new_lens = new_lens.sum(1)
    begin = sorted({key[-1] for key in windowed._programs if key[0] == "begin"})
    decode = sorted({key[-1] for key in windowed._programs if key[0] == "decode"})
    assert begin == [256, 512], begin  # the second turn's prefill ends past slot 256
    assert decode == ([1024] if ragged else [256, 512]), decode  # ragged: one program over the whole cache
    assert {key[-1] for key in full._programs} == {1024}
    assert windowed.window_length(1) == 256 and windowed.window_length(700) == 1024


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_inactive_rows_are_untouched_even_when_their_cache_is_full(model):
    graphdef, params = model
    prompts, lens = _prompts(np.random.RandomState(4), [20, 5, 9])
    sampler = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=3)
    greedy = SamplingConfig(max_new_tokens=4, greedy=True)
    first = sampler.generate(params, prompts, lens, jax.random.key(0), greedy)
    k_before, v_before = np.asarray(first.cache.k), np.asarray(first.cache.v)
    lens_before = np.asarray(first.cache_lens)
    # Row 0 holds 23 of 32 slots; a prefill bucket of 16 from slot 23 would run past the end of the cache.
    new_toks, new_lens = _prompts(np.random.RandomState(5), [1, 12, 1])
    active = np.array([False, True, False])
    out = sampler.generate(params, new_toks, new_lens, jax.random.key(1), greedy,
                           cache=first.cache, cache_lens=first.cache_lens, active=active)
    np.testing.assert_array_equal(np.asarray(out.lengths), [0, 4, 0])
    np.testing.assert_array_equal(np.asarray(out.finish_reason), [-1, 0, -1])
    np.testing.assert_array_equal(np.asarray(out.tokens)[[0, 2]], PAD)
    np.testing.assert_array_equal(np.asarray(out.logprobs)[[0, 2]], 0)
    np.testing.assert_array_equal(np.asarray(out.cache_lens), [lens_before[0], lens_before[1] + 12 + 3, lens_before[2]])
    for b in (0, 2):
        n = lens_before[b]
        np.testing.assert_array_equal(np.asarray(out.cache.k)[:, b, ..., :n], k_before[:, b, ..., :n])
        np.testing.assert_array_equal(np.asarray(out.cache.v)[:, b, :, :n], v_before[:, b, :, :n])


def test_overflow_and_bad_input_raise_clear_errors(model):
    graphdef, params = model
    sampler = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=2)
    prompts, lens = _prompts(np.random.RandomState(6), [4, 20])
    with pytest.raises(ValueError, match=r"Row 1 would overflow the KV cache by 4 tokens.*cache_size"):
        sampler.generate(params, prompts, lens, jax.random.key(0), SamplingConfig(max_new_tokens=16))
    with pytest.raises(ValueError, match="Row 0 is active but has new_lens 0"):
        sampler.generate(params, prompts, np.array([0, 3]), jax.random.key(0), SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="batch_size=2"):
        sampler.generate(params, prompts[:1], lens[:1], jax.random.key(0), SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(max_new_tokens=2, temperature=0.0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_compiled_programs_stay_bounded_across_lengths(model, caplog):
    graphdef, params = model
    sampler = Sampler(graphdef, cache_size=64, pad_id=PAD, batch_size=2)
    config = SamplingConfig(max_new_tokens=3, greedy=True)
    rng = np.random.RandomState(7)
    with caplog.at_level(logging.DEBUG, logger="ragen_jax.sampling.sampler"):
        for n in [3, 5, 16, 9, 17, 30, 2, 31]:
            prompts, lens = _prompts(rng, [n, max(1, n // 2)], width=40)
            sampler.generate(params, prompts, lens, jax.random.key(n), config)
    assert sampler.num_programs == 3  # prefill buckets 16 and 32, one decode loop
    assert all(fn._cache_size() == 1 for fn in sampler._programs.values())
    assert sum("compiling" in r.getMessage() for r in caplog.records) == 3


def test_score_tokens_is_padding_invariant(model):
    graphdef, params = model
    seq = np.random.RandomState(8).randint(1, CFG.vocab_size, 9).astype(np.int32)
    right = np.concatenate([seq, [PAD] * 3])[None]
    left = np.concatenate([[PAD] * 3, seq])[None]
    lp_r = np.asarray(score_tokens(graphdef, params, right, right != PAD))
    lp_l = np.asarray(score_tokens(graphdef, params, left, left != PAD))
    np.testing.assert_allclose(lp_r[0, :9], lp_l[0, 3:], atol=1e-5)
    assert lp_r[0, 0] == 0 and np.all(lp_r[0, 9:] == 0) and np.all(lp_l[0, :4] == 0)
    assert np.all(lp_r[0, 1:9] < 0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_repeated_call_compiles_nothing(model, caplog):
    """The second call with the same shapes reuses every program, the empty cache and idle state included (a
    fresh jit of the idle state used to compile on every call: ~0.1 s each)."""
    graphdef, params = model
    sampler = Sampler(graphdef, cache_size=48, pad_id=PAD, batch_size=3)
    config = SamplingConfig(max_new_tokens=4, greedy=True)
    prompts, lens = _prompts(np.random.RandomState(3), [5, 7, 2])
    sampler.generate(params, prompts, lens, jax.random.key(0), config)
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
        sampler.generate(params, prompts, lens, jax.random.key(1), config)
    compiled = [r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()]
    assert compiled == []


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_decode_weights_change_no_tokens_and_are_made_once_per_parameter_version(model):
    """Decoding on weights laid out [out, in] (the CPU default for large models) gives the tokens and log-probs of
    the model's own layout; the laid-out copy is reused while the parameters are the same arrays, remade for new
    ones, and dropped once the parameters it came from are freed."""
    import gc

    graphdef, params = model
    config = SamplingConfig(max_new_tokens=6, temperature=0.8, top_k=20)
    prompts, lens = _prompts(np.random.RandomState(4), [5, 9, 3])
    plain = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=3)
    laid = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=3, out_first_weights=True)
    assert not plain.out_first_weights and plain.decode_weights(params) is None  # off by default for a small model
    want = plain.generate(params, prompts, lens, jax.random.key(7), config)
    got = laid.generate(params, prompts, lens, jax.random.key(7), config)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)
    np.testing.assert_allclose(got.raw_logprobs, want.raw_logprobs, atol=1e-4)

    weights = laid.decode_weights(params)
    assert laid.decode_weights(params) is weights
    newer = jax.tree.map(lambda a: a * 1.0, params)
    remade = laid.decode_weights(newer)
    assert remade is not weights
    del weights, remade, newer
    gc.collect()
    assert laid._laid is None


def test_decode_weights_are_used_by_default_only_where_they_pay_off():
    from ragen_jax.models.transformer import decode_weights_pay_off

    qwen25_05b = ModelConfig("qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                             num_heads=14, num_kv_heads=2, head_dim=64, tie_word_embeddings=True, attention_bias=True)
    assert decode_weights_pay_off(qwen25_05b, "cpu")
    assert decode_weights_pay_off(qwen25_05b.replace(param_dtype="bfloat16", dtype="bfloat16"), "cpu")
    assert not decode_weights_pay_off(qwen25_05b, "gpu")
    assert not decode_weights_pay_off(CFG, "cpu")  # its weights stay in cache: transposing costs more than it saves
    assert Sampler(nnx.split(CausalLM(CFG, rngs=nnx.Rngs(0)))[0], cache_size=8, pad_id=PAD,
                   batch_size=1).out_first_weights is False


def test_begin_refuses_rows_the_cache_cannot_hold(model):
    """The continuous engine's entry: a turn past the cache's last slot, or a row outside the batch, was begun
    silently (its programs drop such writes), sampling from a cache missing the turn's own keys and values."""
    graphdef, params = model
    sampler = Sampler(graphdef, cache_size=32, pad_id=PAD, batch_size=2)
    config = SamplingConfig(max_new_tokens=8)
    prompts, lens = _prompts(np.random.RandomState(6), [4, 12])
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 2)))

    def begin(rows, cache_lens, new_lens=lens):
        cache, _ = sampler.init_cache()
        return sampler.begin(params, cache, sampler.idle_state(config), np.asarray(rows), prompts, new_lens,
                             np.asarray(cache_lens), keys, config)

    with pytest.raises(ValueError, match=r"Row 1 would overflow the KV cache by 4 tokens.*cache_size 32"):
        begin([0, 1], [0, 16])  # 16 cached + 12 new + 8 to sample > 32 slots
    with pytest.raises(ValueError, match=r"rows must be distinct rows of the batch, in \[0, 2\)"):
        begin([0, 2], [0, 0])
    with pytest.raises(ValueError, match="rows must be distinct"):
        begin([1, 1], [0, 0])
    with pytest.raises(ValueError, match="cache_lens must be >= 0"):
        begin([0, 1], [-1, 0])
    _, state = begin([0, 1], [0, 12])  # exactly full: 12 + 12 + 8 = 32
    assert np.asarray(state.lengths).tolist() == [1, 1]
