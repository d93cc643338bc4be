"""stop_reason against a plain-Python reference on random generated prefixes, and config validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_jax.sampling import SamplingConfig, bucket_length
from ragen_jax.sampling.stopping import stop_reason


def reference(row: list[int], step: int, eos: tuple, seqs: tuple, gates: tuple = ()) -> int:
    if row[step] in eos:
        return 1
    gen = row[: step + 1]

    def gated(s):  # a gate ends before the stop sequence's window begins
        before = gen[: len(gen) - len(s)]
        return not gates or any(tuple(before[j:j + len(g)]) == g for g in gates for j in range(len(before)))
    return 2 if any(len(gen) >= len(s) and tuple(gen[-len(s):]) == s and gated(s) for s in seqs) else 0


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.lists(st.integers(1, 4), min_size=8, max_size=8), min_size=3, max_size=3),
    step=st.integers(0, 7),
    eos=st.lists(st.integers(1, 4), max_size=1).map(tuple),
    seqs=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), max_size=3).map(tuple),
)
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_stop_reason_matches_reference(data, step, eos, seqs):
    config = SamplingConfig(max_new_tokens=8, eos_ids=eos, stop_sequences=seqs)
    generated = np.asarray(data, np.int32)
    generated[:, step + 1 :] = 0  # columns after `step` are still padding while decoding
    fn = jax.jit(stop_reason, static_argnums=3)
    got = np.asarray(fn(jnp.asarray(generated), jnp.int32(step), jnp.asarray(generated[:, step]), config))
    want = [reference(list(r), step, eos, seqs) for r in generated]
    np.testing.assert_array_equal(got, want)


@settings(max_examples=80, deadline=None)
@given(
    data=st.lists(st.lists(st.integers(1, 3), min_size=10, max_size=10), min_size=4, max_size=4),
    step=st.integers(0, 9),
    seqs=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), min_size=1, max_size=2).map(tuple),
    gates=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), min_size=1, max_size=2).map(tuple),
)
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_gated_stop_sequences_match_reference(data, step, seqs, gates):
    """With stop_after, a stop sequence counts only after a gate sequence ended before it."""
    config = SamplingConfig(max_new_tokens=10, stop_sequences=seqs, stop_after=gates)
    generated = np.asarray(data, np.int32)
    generated[:, step + 1:] = 0
    fn = jax.jit(stop_reason, static_argnums=3)
    got = np.asarray(fn(jnp.asarray(generated), jnp.int32(step), jnp.asarray(generated[:, step]), config))
    np.testing.assert_array_equal(got, [reference(list(r), step, (), seqs, gates) for r in generated])


def test_config_is_hashable_and_normalises_lists():
    a = SamplingConfig(max_new_tokens=4, eos_ids=[3], stop_sequences=[[1, 2]])
    assert a == SamplingConfig(max_new_tokens=4, eos_ids=(3,), stop_sequences=((1, 2),))
    assert hash(a) == hash(SamplingConfig(max_new_tokens=4, eos_ids=(3,), stop_sequences=((1, 2),)))
    with pytest.raises(ValueError, match="empty"):
        SamplingConfig(max_new_tokens=4, stop_sequences=((),))
    with pytest.raises(ValueError, match="empty"):
        SamplingConfig(max_new_tokens=4, stop_sequences=((1,),), stop_after=((),))
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(max_new_tokens=4, top_p=0.0)


def test_bucket_length():
    assert [bucket_length(n) for n in (0, 1, 16, 17, 100, 128, 129)] == [16, 16, 16, 32, 128, 128, 256]
    assert [bucket_length(n) for n in (1000, 1024, 1025, 1536, 1537, 3072, 3600)] == [1024, 1024, 1536, 1536, 2048,
                                                                                      3072, 3584 + 512]
    assert bucket_length(300, minimum=256) == 512 and bucket_length(2100, minimum=256) == 2560
