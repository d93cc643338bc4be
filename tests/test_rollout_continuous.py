"""The continuous rollout engine plays the same trajectories as the lockstep reference, whatever the slot
count, chunk size or finishing order, prefills a group's shared prompt once, and wastes fewer decode steps."""

import dataclasses

import jax
import numpy as np
import pytest

from envs.batch import make_env_batch
from ragen_jax.models.tiny import make_tiny_model
from ragen_jax.rollout import RolloutConfig, LockstepEngine, group_seeds
from ragen_jax.rollout.continuous import ContinuousEngine

GROUPS, GROUP_SIZE = 2, 4
N = GROUPS * GROUP_SIZE


@pytest.fixture(scope="module")
def tiny():
    model, tok = make_tiny_model(seed=3, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                 intermediate_size=128)
    from flax import nnx

    graphdef, params = nnx.split(model)
    return graphdef, params, tok


@pytest.fixture(scope="module")
def lockstep_runs():
    """The lockstep engine's play of the test batch, by greedy flag: the reference of several tests here (under
    `ragged_turns`), played once per module."""
    return {}


def reference_run(lockstep_runs, tiny, greedy=False):
    graphdef, params, tok = tiny
    if greedy not in lockstep_runs:
        engine = LockstepEngine(graphdef, tok, _config(temperature=1.0), N, lanes=1)
        lockstep_runs[greedy] = play(engine, tok, params, greedy=greedy)
    return lockstep_runs[greedy]


@pytest.fixture
def ragged_turns(monkeypatch):
    """Sampled turns of uneven length (a random tiny model rarely writes </answer>): one token in ~12 ends a turn."""
    original = RolloutConfig.sampling

    def sampling(self, tokenizer, *args, **kw):
        cfg = original(self, tokenizer, *args, **kw)
        return dataclasses.replace(cfg, eos_ids=cfg.eos_ids + tuple(range(40, 130)))

    monkeypatch.setattr(RolloutConfig, "sampling", sampling)


def _config(**kw):
    return RolloutConfig(max_turn=3, response_length=20, max_model_len=512, prompt_style="compact",
                         context_mode="full", **kw)


def play(engine, tok, params, key=7, **kw):
    env = make_env_batch("SimpleSokoban", N, use_cache=False, bank_size=1)
    seeds, gids = group_seeds(500, GROUPS, GROUP_SIZE)
    return engine.run(params, env, seeds, gids, jax.random.key(key), tag="s", **kw)


def assert_same_trajectories(a, b):
    assert len(a.episodes) == len(b.episodes)
    for x, y in zip(a.episodes, b.episodes):
        assert [r.response_tokens for r in x.history] == [r.response_tokens for r in y.history]
        assert [r.state for r in x.history] == [r.state for r in y.history]
        assert (x.total_reward, x.num_turns, x.success) == (y.total_reward, y.num_turns, y.success)
    for name in ("tokens", "loss_mask", "token_rewards", "attention_mask"):
        np.testing.assert_array_equal(getattr(a.batch, name), getattr(b.batch, name))
    for name in ("sample_logprobs", "raw_logprobs"):
        np.testing.assert_allclose(getattr(a.batch, name), getattr(b.batch, name), atol=2e-5)


SCHEDULES = ((N, 3, True), (N, 3, False), (3, 1, False))  # (slots, chunk, share_prompts)


@pytest.mark.parametrize("greedy, schedules", [
    (False, SCHEDULES),
    pytest.param(True, SCHEDULES + ((4, 2, True),), marks=pytest.mark.slow)], ids=["sampled", "greedy"])
def test_same_trajectories_as_lockstep_whatever_the_schedule(tiny, ragged_turns, lockstep_runs, greedy, schedules):
    """One slot per episode with and without a group's shared prefill, and fewer slots than episodes (a queue of
    episodes through 3 slots, one decode step a chunk): all play the lockstep engine's trajectories; sharing
    prefills a group's prompt once; sampled turns of uneven length waste fewer decode steps per token than
    lockstep."""
    graphdef, params, tok = tiny
    cfg = _config(temperature=1.0)
    reference = reference_run(lockstep_runs, tiny, greedy)
    lengths = [len(r.response_tokens) for ep in reference.episodes for r in ep.history]
    assert greedy or len(set(lengths)) >= 3  # sampled turns really end at different times (a random model's
    # greedy text repeats one token to the cap: that case checks the chunking and the queue of episodes)
    runs = {}
    for slots, chunk, share in schedules:
        runs[slots, chunk, share] = got = play(
            ContinuousEngine(graphdef, tok, cfg, N, slots=slots, chunk=chunk, share_prompts=share), tok, params,
            greedy=greedy)
        assert_same_trajectories(reference, got)
    shared, alone = runs[N, 3, True].extras["stats"], runs[N, 3, False].extras["stats"]
    assert alone["prefills"] - shared["prefills"] == N - GROUPS  # the first turn: one prefill per group
    assert shared["prefill_tokens"] < alone["prefill_tokens"]
    for slots, chunk, share in schedules:
        if slots < N:
            queued = runs[slots, chunk, share].extras["decode_steps_per_token"]
            assert queued >= 1.0
            if not greedy:
                assert queued < reference.extras["decode_steps_per_token"]


def test_host_helpers_compile_a_few_shapes():
    """The per-turn helpers take row sets of every size from 1 to the slot count; padded to powers of two they
    compile a few programs (one per size compiled ~40 programs, ~1.5 s, per quickstart RL step)."""
    from ragen_jax.rollout.continuous import _rows_of, finished_rows
    from ragen_jax.sampling.turn import _episode_turn_keys, episode_turn_keys, idle_state

    key = jax.random.key(5)
    state = idle_state(12, 4, 0, 2)
    state = state.replace(tokens=state.tokens + np.arange(12, dtype=np.int32)[:, None],
                          lengths=np.arange(12, dtype=np.int32))
    keys_before, rows_before = _episode_turn_keys._cache_size(), _rows_of._cache_size()
    for n in range(1, 10):
        episodes, turns = np.arange(n) * 3 + 1, np.arange(n) % 4
        want = [jax.random.key_data(jax.random.fold_in(jax.random.fold_in(key, e), t)) for e, t in zip(episodes, turns)]
        np.testing.assert_array_equal(episode_turn_keys(key, episodes, turns), np.stack(want))
        slots = np.arange(n)[::-1] + 2
        tokens, _, _, lengths, _ = finished_rows(state, slots)
        np.testing.assert_array_equal(tokens, np.asarray(state.tokens)[slots])
        np.testing.assert_array_equal(lengths, slots)
    assert _episode_turn_keys._cache_size() - keys_before <= 5  # sizes 1, 2, 4, 8, 16
    assert _rows_of._cache_size() - rows_before <= 5


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_decode_lanes_play_the_same_trajectories(tiny, ragged_turns, lockstep_runs):
    """The continuous engine with its sampler in four lanes of two slots (each group's episodes spread over two
    lanes, so a group's shared prompt is prefilled once in each) plays the lockstep engine's trajectories."""
    graphdef, params, tok = tiny
    cfg = _config(temperature=1.0)
    reference = reference_run(lockstep_runs, tiny)
    continuous = ContinuousEngine(graphdef, tok, cfg, N, slots=N, chunk=3, lanes=4)
    assert continuous.sampler.lanes == 4
    got = play(continuous, tok, params)
    assert_same_trajectories(got, reference)
    stats = got.extras["stats"]
    # first turns: one prefill per (group, lane), 2 x GROUPS; every later turn of an episode: its own prefill
    assert stats["prefills"] == 2 * GROUPS + stats["first_tokens"] - N


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_run_samples_with_the_top_p_and_top_k_it_is_given(tiny, ragged_turns, lockstep_runs):
    """A validation's own top_p / top_k (engine.run's) replace the config's in both engines: engines configured to
    keep only the top token play, given top_p=1 and top_k=0, the trajectories of a whole-vocabulary config."""
    graphdef, params, tok = tiny
    reference = reference_run(lockstep_runs, tiny)
    narrow = _config(temperature=1.0, top_p=0.5, top_k=1)
    lockstep = LockstepEngine(graphdef, tok, narrow, N, lanes=1)
    for engine in (lockstep, ContinuousEngine(graphdef, tok, narrow, N, slots=N, chunk=3)):
        assert_same_trajectories(play(engine, tok, params, top_p=1.0, top_k=0), reference)
    tokens = [[r.response_tokens for r in ep.history] for ep in reference.episodes]
    assert [[r.response_tokens for r in ep.history] for ep in play(lockstep, tok, params).episodes] != tokens


@pytest.mark.parametrize("batch, response_length, devices, platform, slots", [
    (128, 400, 1, "cpu", 32),    # RAGEN-shaped: long, spread responses queue through 32 slots
    (128, 24, 1, "cpu", 128),    # the tiny quickstart: short responses keep one slot per episode
    (128, 200, 1, "cpu", 41),    # in between: batch x 64 / response_length
    (16, 400, 1, "cpu", 16),     # never more slots than episodes
    (128, 400, 4, "cpu", 128),   # 32 per device
    (128, 100, 3, "cpu", 96),    # 32 per device over 82
    (512, 100, 3, "cpu", 330),   # 328 rounded up to a multiple of the devices
    (128, 400, 1, "gpu", 128),   # an accelerator reads the weights once per step: one per episode
])
def test_default_slots_follow_the_workload(batch, response_length, devices, platform, slots):
    from ragen_jax.rollout.continuous import default_slots
    assert default_slots(batch, response_length, devices, platform) == slots


def test_engine_takes_the_default_slots_for_zero(tiny):
    graphdef, _, tokenizer = tiny
    config = RolloutConfig(max_turn=2, response_length=256, max_model_len=512)
    assert ContinuousEngine(graphdef, tokenizer, config, 64, slots=0).slots == 32
    assert ContinuousEngine(graphdef, tokenizer, config, 64, slots=8).slots == 8
    assert ContinuousEngine(graphdef, tokenizer, config, 4, slots=0).slots == 4
