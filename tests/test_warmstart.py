"""Warm-start: oracle demos in the rollout format, JSONL round trips, the SFT loss and a short run."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.batch import make_env_batch
from envs.sokoban.oracle import solve as sokoban_solve
from ragen_jax.models.tiny import load_tiny_tokenizer, make_tiny_model
from ragen_jax.rollout import RolloutConfig, parse_response
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.warmstart import (DemoRows, demo_rows, load_jsonl_demos, oracle_demo_episodes,
                                     play_oracle_episodes, rows_from_conversations, write_demo_jsonl)
from ragen_jax.rollout.dump import write_jsonl
from ragen_jax.warmstart import demo_cache, flow, sft
from ragen_jax.warmstart.demo_cache import DemoSource
from ragen_jax.trainer.steps import policy_logprobs
from test_trainer_faults import FragileCounter

MODES = ("single_turn", "limited_multi_turn", "full")


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def _cfg(mode="single_turn", **kw):
    return RolloutConfig(response_length=32, max_model_len=1024, context_mode=mode, context_window=2, **kw)


@pytest.fixture(scope="module")
def sokoban_eps(tok):
    return {mode: oracle_demo_episodes("SimpleSokoban", 12, tok, _cfg(mode), seed=777_000, batch_size=16)
            for mode in MODES}


def _parsed(tok, cfg, record, lookup):
    text = ContextBuilder(tok, enable_think=cfg.enable_think).generation_suffix + tok.decode(record.response_tokens)
    return parse_response(text, action_lookup=lookup, max_actions=cfg.max_actions_per_turn,
                          enable_think=cfg.enable_think)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_sokoban_demos_parse_back_to_shortest_solutions(tok, sokoban_eps):
    cfg = _cfg()
    env = make_env_batch("SimpleSokoban", 1)
    for ep in sokoban_eps["single_turn"]:
        assert ep.success and not ep.penalty
        actions = []
        for record in ep.history:
            parsed = _parsed(tok, cfg, record, env.action_lookup)
            assert parsed.format_ok and parsed.turn_is_valid
            assert 1 <= len(parsed.actions) <= cfg.max_actions_per_turn
            assert tok.decode(record.response_tokens).startswith("</think><answer>")
            actions.extend(parsed.actions)
        env.reset([ep.seed])
        state = jax.tree.map(lambda x: np.asarray(x[0]), jax.device_get(env.state))
        assert len(actions) == len(sokoban_solve(state.fixed, state.room))
        env.reset([ep.seed])
        result = None
        for a in actions:
            result = env.step([[a]], np.ones(1, bool))
        assert bool(result.success[0])


def test_demo_responses_end_with_the_templates_end_of_turn():
    """Without stop_at_answer a demo teaches the token that ends the turn. It was the tokenizer's first eos, which
    for a base Qwen2.5 is <|endoftext|>, where the chat template (and the context built after the turn) closes an
    assistant message with <|im_end|>."""
    tok = load_tiny_tokenizer()
    tok.hf.eos_token = "<|endoftext|>"
    assert tok.eos_token_ids[0] == tok.token_id("<|endoftext|>")
    cfg = _cfg(stop_at_answer=False)
    eps = play_oracle_episodes(make_env_batch("Bandit", 4), list(range(4)), tok, cfg)
    ends = {record.response_tokens[-1] for ep in eps for record in ep.history}
    assert ends == {tok.token_id("<|im_end|>")}


def test_frozenlake_and_bandit_demos(tok):
    cfg = _cfg()
    eps = oracle_demo_episodes("FrozenLake", 8, tok, cfg, seed=5, batch_size=8)
    assert len(eps) == 8 and all(ep.success for ep in eps)
    bandit = make_env_batch("Bandit", 16)
    eps = play_oracle_episodes(bandit, list(range(16)), tok, cfg, reasoning_text="risky pays more")
    for ep in eps:
        assert ep.success and ep.num_turns == 1
        parsed = _parsed(tok, cfg, ep.history[0], bandit.action_lookup)
        assert parsed.think == "risky pays more" and parsed.actions[0] % 2 == 1  # the high-risk arm


def _described_thoughts(tok, cfg, env_name, eps):
    """Replays demo episodes -> [(the env's description of each turn's state, what that turn thought)]."""
    env = make_env_batch(env_name, 1)
    out = []
    for ep in eps:
        env.reset([ep.seed])
        for record in ep.history:
            state = jax.tree.map(lambda x: np.asarray(x[0]), jax.device_get(env.state))
            parsed = _parsed(tok, cfg, record, env.action_lookup)
            assert parsed.turn_is_valid
            out.append((env.env.describe_state(state), parsed.think))
            env.step([list(parsed.actions)], np.ones(1, bool))
    return out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("env_name", ["SimpleSokoban", "FrozenLake"])
def test_state_reasoning_demos_think_about_their_own_input(tok, env_name):
    """warmstart.reasoning="state": each turn thinks the env's description of that turn's state, and the
    trainer's MI diagnostics find a reasoning for every turn."""
    from ragen_jax.diagnostics.pairs import reasoning_tokens

    cfg = _cfg(prompt_style="compact")
    eps = oracle_demo_episodes(env_name, 24, tok, cfg, seed=31_000, batch_size=24, reasoning="state")
    pairs = _described_thoughts(tok, cfg, env_name, eps)
    assert all(think == described for described, think in pairs)
    assert len({think for _, think in pairs}) >= 4  # the thinking varies with the input
    close = tok.encode("</think>")
    assert all(reasoning_tokens(r.response_tokens, close) for ep in eps for r in ep.history)  # MI finds them
    with pytest.raises(ValueError, match="describe_state"):
        oracle_demo_episodes("Bandit", 4, tok, cfg, seed=1, batch_size=4, reasoning="state")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_filler_reasoning_demos_set_each_regime_on_purpose(tok):
    """warmstart.reasoning="filler": random words whatever the input (template collapse on purpose);
    "state_filler": the state's description, then random words (diverse). Same seed, same thoughts."""
    from ragen_jax.warmstart.demos import FILLER_WORDS

    cfg = _cfg(prompt_style="compact")

    def thoughts(mode, seed=31_000, words=3):
        eps = oracle_demo_episodes("SimpleSokoban", 16, tok, cfg, seed=seed, batch_size=16, reasoning=mode,
                                   filler_words=words)
        return _described_thoughts(tok, cfg, "SimpleSokoban", eps)

    filler = thoughts("filler")
    assert all(len(t.split()) == 3 and set(t.split()) <= set(FILLER_WORDS) for _, t in filler)
    assert len({t for _, t in filler}) > len(filler) // 2  # varied, and not by the state
    assert filler == thoughts("filler") and filler != thoughts("filler", seed=31_001)
    diverse = thoughts("state_filler", words=2)
    for described, t in diverse:
        head, tail = t.rsplit(", ", 1)
        assert head == described and len(tail.split()) == 2 and set(tail.split()) <= set(FILLER_WORDS)
    with pytest.raises(ValueError, match="filler_words"):
        oracle_demo_episodes("SimpleSokoban", 4, tok, cfg, seed=1, batch_size=4, reasoning="filler", filler_words=0)
    with pytest.raises(ValueError, match="not one of"):
        oracle_demo_episodes("SimpleSokoban", 4, tok, cfg, seed=1, batch_size=4, reasoning="random")


def test_random_demos_teach_format_only(tok):
    """warmstart.source="random": valid actions drawn uniformly, failed episodes kept (format, not skill)."""
    cfg = _cfg(max_turn=1, max_actions_per_turn=1, max_actions_per_traj=1)
    bandit = make_env_batch("Bandit", 1)
    eps = oracle_demo_episodes("Bandit", 64, tok, cfg, seed=3, batch_size=32, random_actions=True)
    arms = [_parsed(tok, cfg, ep.history[0], bandit.action_lookup).actions[0] for ep in eps]
    assert len(eps) == 64 and 20 < sum(a % 2 for a in arms) < 44  # both arms of each pair, about evenly
    lake = oracle_demo_episodes("FrozenLake", 16, tok, _cfg(prompt_style="compact"), seed=3, batch_size=16,
                                random_actions=True)
    assert len(lake) == 16 and not all(ep.success for ep in lake)
    for ep in lake:
        assert ep.system == "Actions: Left, Down, Right, Up"
        for record in ep.history:
            if record.response_tokens is not None:
                parsed = _parsed(tok, cfg, record, {"left": 0, "down": 1, "right": 2, "up": 3})
                assert parsed.format_ok and len(parsed.actions) == 1


def test_host_env_without_oracle_is_refused(tok):
    class NoState:
        batch_size = 1

    with pytest.raises(ValueError, match="JSONL"):
        play_oracle_episodes(NoState(), [0], tok, _cfg())


@pytest.mark.parametrize("mode", MODES)
def test_loss_mask_covers_exactly_the_responses(tok, sokoban_eps, mode):
    eps = sokoban_eps[mode]
    rows = demo_rows(eps, tok, _cfg(mode))
    expected = []
    for ep in eps:
        responses = [r.response_tokens for r in ep.history if r.response_tokens is not None]
        expected.extend([sum(responses, [])] if mode == "full" else responses)
    assert rows.num_rows == len(expected)
    for i, want in enumerate(expected):
        assert rows.tokens[i][rows.loss_mask[i] > 0].tolist() == want
        assert not (rows.loss_mask[i] * ~rows.attention_mask[i]).any()


@pytest.mark.parametrize("mode", MODES)
def test_demo_contexts_are_what_the_engine_would_prompt(tok, sokoban_eps, mode):
    """Every trained response follows exactly the context the rollout engine builds for that turn."""
    from ragen_jax.rollout import LockstepEngine
    from ragen_jax.rollout.episodes import fit_context
    from ragen_jax.rollout.types import Episode

    model, _ = make_tiny_model(seed=0, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                               head_dim=16, intermediate_size=64)
    from flax import nnx

    cfg = _cfg(mode)
    engine = LockstepEngine(nnx.split(model)[0], tok, cfg, batch_size=1)
    rows = demo_rows(sokoban_eps[mode], tok, cfg)
    starts = [int(np.argmax(rows.loss_mask[i] > 0)) for i in range(rows.num_rows)]
    contexts = []
    for ep in sokoban_eps[mode]:
        for t in [0] if mode == "full" else range(len(ep.history)):  # full: one row, first response first
            partial = Episode(env_tag=ep.env_tag, seed=ep.seed, group_id=0, system=ep.system,
                              prompt_style=ep.prompt_style, prompt_max_tokens=ep.prompt_max_tokens,
                              history=[dataclasses.replace(r) for r in ep.history[: t + 1]])
            partial.history[-1].response_text = partial.history[-1].response_tokens = None
            contexts.append(fit_context(engine.builder, engine.config, partial))
    assert len(contexts) == rows.num_rows
    for i, ctx in enumerate(contexts):
        np.testing.assert_array_equal(rows.tokens[i, :starts[i]], ctx)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bandit_demo_prompt_matches_the_engine(tok):
    """Env-specific prompt details (Bandit lists no global arm names) follow the engine's system prompt."""
    from flax import nnx

    from ragen_jax.rollout import LockstepEngine

    cfg = _cfg()
    env = make_env_batch("Bandit", 4)
    model, _ = make_tiny_model(seed=0, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                               head_dim=16, intermediate_size=64)
    engine = LockstepEngine(nnx.split(model)[0], tok, cfg, batch_size=4)
    played = engine.run(nnx.split(model)[1], env, [0, 1, 2, 3], [0, 1, 2, 3], jax.random.PRNGKey(0), tag="b")
    demos = play_oracle_episodes(env, [0, 1, 2, 3], tok, cfg)
    assert [ep.system for ep in demos] == [ep.system for ep in played.episodes]
    assert [ep.history[0].state for ep in demos] == [ep.history[0].state for ep in played.episodes]


@pytest.mark.parametrize("mode", MODES)
def test_jsonl_demos_round_trip(tok, sokoban_eps, mode, tmp_path):
    cfg, eps = _cfg(mode), sokoban_eps[mode]
    want = demo_rows(eps, tok, cfg)
    path = write_demo_jsonl(str(tmp_path / "demos.jsonl"), eps, cfg)
    got = load_jsonl_demos(path, tok, cfg)
    for a, b in ((got.tokens, want.tokens), (got.attention_mask, want.attention_mask), (got.loss_mask, want.loss_mask)):
        np.testing.assert_array_equal(a, b[:, :a.shape[1]])
    # A user's own file (no recorded tokens) gives the same rows: contents are encoded.
    records = [json.loads(line) for line in open(path)]
    bare = rows_from_conversations([{"messages": r["messages"]} for r in records], tok, cfg)
    np.testing.assert_array_equal(bare.tokens, got.tokens)
    np.testing.assert_array_equal(bare.loss_mask, got.loss_mask)


def test_rollout_dump_jsonl_trains_like_full_context_rows(tok, sokoban_eps, tmp_path):
    cfg, eps = _cfg("full"), sokoban_eps["full"]
    path = write_jsonl(str(tmp_path / "dump.jsonl"), eps, max_tokens=cfg.response_length,
                       enable_think=True, format_penalty=cfg.format_penalty)
    got, want = load_jsonl_demos(path, tok, cfg), demo_rows(eps, tok, cfg)
    np.testing.assert_array_equal(got.tokens, want.tokens[:, :got.tokens.shape[1]])
    np.testing.assert_array_equal(got.loss_mask, want.loss_mask[:, :got.tokens.shape[1]])


def test_bad_jsonl_names_the_line_and_fix(tok, tmp_path):
    cfg = _cfg()
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "<answer>Up</answer>"}]}) + "\n")
    with pytest.raises(ValueError, match="line 1.*generation prefix '<think>'"):
        load_jsonl_demos(str(path), tok, cfg)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ValueError, match="no assistant message"):
        load_jsonl_demos(str(path), tok, cfg)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        load_jsonl_demos(str(path), tok, cfg)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_shared_prefix_gives_the_same_loss_and_gradients(tok, sokoban_eps):
    rows = demo_rows(sokoban_eps["single_turn"], tok, _cfg())
    rows = DemoRows(rows.tokens[:6], rows.attention_mask[:6], rows.loss_mask[:6])
    model, _ = make_tiny_model(seed=3, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                               head_dim=16, intermediate_size=64)
    from flax import nnx

    graphdef, params = nnx.split(model)
    lp, _ = policy_logprobs(model, jnp.asarray(rows.tokens), jnp.asarray(rows.attention_mask))
    want_nll = -float((np.asarray(lp) * rows.loss_mask).sum())
    grads = []
    for share in (False, True):
        data = sft.prepare_sft_data(rows, share_prefix=share)
        assert (len(data.prefix) > 100) == share
        batch = {k: jnp.asarray(v) for k, v in data.batch(np.arange(6)).items()}
        loss = lambda p: sft.sft_sums(nnx.merge(graphdef, p), jnp.asarray(data.prefix), batch)[0]  # noqa: E731
        nll, g = jax.jit(jax.value_and_grad(loss))(params)
        np.testing.assert_allclose(float(nll), want_nll, rtol=1e-5)
        grads.append(g)
    for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-6)


def _bandit_config():
    from configs.base import apply_tiny, get_base_config

    c = get_base_config()
    apply_tiny(c)
    c.env.name = "Bandit"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.groups, c.env.group_size = 4, 2
    c.trainer.mini_batch_size = 8  # a step's 8 rows (tiny's 32 is for its larger batches)
    c.val.groups = c.val.batch_size = 32
    c.val.temperature = 0.5
    c.model.tiny = dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    c.trainer.export_hf = False
    c.warmstart.update(enabled=True, num_demos=96, steps=60, batch_size=32, lr=3e-3, warmup_steps=5,
                       seed=4242, val_every=30)
    return c


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_sft_steps_lower_the_loss_and_donate_params(tok):
    """A few jitted SFT steps on Bandit demos (no rollouts): the response NLL falls."""
    from ragen_jax.monitoring import Monitor
    from ragen_jax.trainer.setup import split_model
    from ragen_jax.rollout import RolloutConfig

    c = _bandit_config()
    c.warmstart.update(steps=24, batch_size=16, micro_batch_size=8, warmup_steps=1)
    eps = oracle_demo_episodes("Bandit", 32, tok, RolloutConfig.of(c), seed=99, batch_size=32)
    data = sft.prepare_sft_data(demo_rows(eps, tok, RolloutConfig.of(c)))
    model, _ = make_tiny_model(seed=0, **dict(c.model.tiny))
    actor = split_model(model, lora=False)
    first = actor.trainable
    logged = []
    monitor = Monitor("", enabled=False)
    monitor.scalars = lambda m, step: logged.append(m)
    metrics = flow.train_sft(actor, data, c.warmstart, monitor, steps=24, log_every=1)
    losses = [m["sft/loss"] for m in logged]
    assert len(losses) >= 24 and losses[-1] < 0.5 * losses[0]
    assert metrics["sft/steps"] == 24 and metrics["sft/tokens_per_s"] > 0
    assert actor.trainable is not first and jax.tree.leaves(first)[0].is_deleted()  # donated


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_fewer_demo_rows_than_a_micro_batch_still_train(tok):
    """Two Bandit demonstrations (two rows) under the quickstart's micro-batch of 16 rows: each step takes the rows
    there are (it stopped with a reshape error when the micro-batch was larger than the demonstration set)."""
    from ragen_jax.monitoring import Monitor
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.trainer.setup import split_model

    c = _bandit_config()
    c.warmstart.update(steps=2, batch_size=64, micro_batch_size=16, warmup_steps=0)
    eps = oracle_demo_episodes("Bandit", 2, tok, RolloutConfig.of(c), seed=99, batch_size=2)
    data = sft.prepare_sft_data(demo_rows(eps, tok, RolloutConfig.of(c)))
    assert data.num_rows < 16
    actor = split_model(make_tiny_model(seed=0, **dict(c.model.tiny))[0], lora=False)
    metrics = flow.train_sft(actor, data, c.warmstart, Monitor("", enabled=False), steps=2, log_every=1)
    assert metrics["sft/steps"] == 2 and np.isfinite(metrics["sft/loss"])


def test_sft_metrics_are_logged_once_per_logged_step(tok, monkeypatch):
    """The SFT scalars go to TensorBoard at step 1, every `log_every` steps and the last step, each step once (the
    last step was logged twice when it was also a `log_every` step: two points at one step in every sft/* curve).
    What is logged, not the update, is under test: the jitted step is replaced by one that changes nothing."""
    from ragen_jax.monitoring import Monitor
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.trainer.setup import split_model

    def step_fn(trainable, opt_state, frozen, prefix, batch):
        return trainable, opt_state, {"loss": 1.0, "token_accuracy": 0.5, "grad_norm": 1.0, "update_skipped": 0.0}

    monkeypatch.setattr(flow, "make_sft_step", lambda graphdef, tx, micro: step_fn)
    c = _bandit_config()
    c.warmstart.update(batch_size=8, micro_batch_size=8, warmup_steps=0)
    eps = oracle_demo_episodes("Bandit", 8, tok, RolloutConfig.of(c), seed=99, batch_size=8)
    data = sft.prepare_sft_data(demo_rows(eps, tok, RolloutConfig.of(c)))
    actor = split_model(make_tiny_model(seed=0, **dict(c.model.tiny))[0], lora=False)
    monitor = Monitor("", enabled=False)
    for steps, log_every, expected in ((4, 2, [1, 2, 4]), (5, 2, [1, 2, 4, 5]), (3, 1, [1, 2, 3]), (1, 10, [1])):
        logged = []
        monitor.scalars = lambda m, step: logged.append(step)
        metrics = flow.train_sft(actor, data, c.warmstart, monitor, steps=steps, log_every=log_every)
        assert logged == expected and metrics["sft/steps"] == steps


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_sft_step_whose_new_weights_overflow_changes_nothing(tok):
    """The warm start's step has the RL update's guard: finite loss and gradient but infinite new weights (an
    enormous learning rate) leave the weights and the optimizer state as they were, and the step says so."""
    import optax

    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.trainer.setup import split_model

    c = _bandit_config()
    eps = oracle_demo_episodes("Bandit", 8, tok, RolloutConfig.of(c), seed=99, batch_size=8)
    data = sft.prepare_sft_data(demo_rows(eps, tok, RolloutConfig.of(c)))
    actor = split_model(make_tiny_model(seed=0, **dict(c.model.tiny))[0], lora=False)
    rows = np.arange(8)
    for lr, skipped in ((1e39, 1.0), (1e-3, 0.0)):
        tx = optax.adam(lr)
        opt = tx.init(actor.trainable)
        before = [np.array(x) for x in jax.tree.leaves((actor.trainable, opt))]
        params, opt, metrics = sft.make_sft_step(actor.graphdef, tx, 4)(
            jax.tree.map(jnp.copy, actor.trainable), opt, actor.frozen, jnp.asarray(data.prefix),
            {k: jnp.asarray(v) for k, v in data.batch(rows).items()})
        after = [np.array(x) for x in jax.tree.leaves((params, opt))]
        assert float(metrics["update_skipped"]) == skipped and np.isfinite(float(metrics["loss"]))
        assert all(np.array_equal(a, b) for a, b in zip(before, after)) == bool(skipped)


@pytest.mark.slow
def test_warmstart_run_learns_bandit(tmp_path, monkeypatch):
    """run_warmstart end to end: validation success rises from ~0 to most episodes (about 1-2 min)."""
    monkeypatch.setenv("RAGEN_JAX_CACHE", str(tmp_path / "cache"))
    from ragen_jax.trainer import Trainer

    trainer = Trainer(_bandit_config(), str(tmp_path / "run"))
    seen = []
    monitor_scalars = trainer.monitor.scalars
    trainer.monitor.scalars = lambda m, s: (seen.append((dict(m), s)), monitor_scalars(m, s))
    from ragen_jax.trainer.run_loop import warm_start

    warm_start(trainer)
    metrics = trainer.state.warmstart
    losses = [m["sft/loss"] for m, _ in seen if "sft/loss" in m]
    assert losses[0] > 3.0 and losses[-1] < 0.3 * losses[0]
    assert metrics["val_success_before_warmstart"] < 0.2
    assert metrics["val_success_after_warmstart"] > 0.7
    assert metrics["sft/token_accuracy"] > 0.9
    assert any(k.startswith("sft/val/") and s == 30 for m, s in seen for k in m)
    # The demos are cached on disk: a second build reads them back unchanged.
    demo_cache._DEMO_MEMO.clear()
    again = demo_cache.build_demos(DemoSource(trainer.run.env, trainer.train_env, trainer.run.warmstart,
                                              trainer.rollout, trainer.tokenizer))
    assert again.num_rows == metrics["sft/num_rows"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_demo_responses_longer_than_rl_samples_are_refused(tok):
    """A demo response over rollout.response_length (long thinking) was kept: RL cuts such a response off before
    its answer, so the warm start taught replies the policy can never finish. Now it is refused, saying the fix."""
    cfg = _cfg(prompt_style="compact")  # response_length 32
    with pytest.raises(ValueError, match=r"is 3\d tokens, more than the rollout.response_length=32 .*"
                                         r"warmstart.reasoning_text, warmstart.filler_words"):
        oracle_demo_episodes("SimpleSokoban", 4, tok, cfg, seed=1, batch_size=4, reasoning_text="think " * 30)
    eps = oracle_demo_episodes("SimpleSokoban", 4, tok, cfg, seed=1, batch_size=4, reasoning_text="think " * 5)
    assert max(len(r.response_tokens) for ep in eps for r in ep.history) <= 32


def test_jsonl_demos_rl_could_not_produce_are_refused(tok, sokoban_eps, tmp_path):
    """JSONL rows longer than RL ever trains on were taken as they came: an assistant message over
    response_length, or a conversation over max_model_len (RL drops its oldest turns). Each names its line."""
    cfg = _cfg("full")
    path = write_demo_jsonl(str(tmp_path / "demos.jsonl"), sokoban_eps["full"], cfg)
    longest = load_jsonl_demos(path, tok, cfg).attention_mask.sum(1).max()
    with pytest.raises(ValueError, match=rf"line \d+: the conversation is \d+ tokens, more than "
                                         rf"rollout.max_model_len={longest - 1} .*raise rollout.max_model_len"):
        load_jsonl_demos(path, tok, dataclasses.replace(cfg, max_model_len=int(longest) - 1))
    record = {"messages": [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "<think>" + "think " * 40 + "</think><answer>Up</answer>"}]}
    (tmp_path / "long.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=r"line 1: assistant message 1 is \d+ tokens, more than the "
                                         r"rollout.response_length=32"):
        load_jsonl_demos(str(tmp_path / "long.jsonl"), tok, cfg)


def _demo_source(tok, c=None):
    """What build_demos reads of a run: its env, warm start and rollout settings, tokenizer and train env batch."""
    from ragen_jax.config import validate_config
    from ragen_jax.rollout import RolloutConfig

    c = c or _bandit_config()
    c.warmstart.num_demos = 8
    run = validate_config(c)
    return DemoSource(run.env, make_env_batch(c.env.name, 2, **dict(c.env.kwargs)), run.warmstart,
                      RolloutConfig.of(run), tok)


def test_demo_cache_key_covers_what_shapes_the_rows(tok):
    """The demo cache key changes with every setting the rows depend on (the tokenizer's end-of-turn id, which an
    untrained stop is taught, was not in it) and not with the SFT schedule."""
    base = demo_cache.demo_cache_key(_demo_source(tok), 8)
    changes = {"rollout.action_sep": "|", "rollout.prompt_style": "compact", "rollout.response_length": 17,
               "rollout.max_model_len": 385, "rollout.context_mode": "full", "warmstart.reasoning": "filler",
               "warmstart.reasoning_text": "hm", "warmstart.filler_words": 5, "warmstart.seed": 1,
               "warmstart.source": "random", "env.kwargs": {"hi_prob": 0.5}}
    for key, value in changes.items():
        c = _bandit_config()
        section, name = key.split(".")
        c[section][name] = value
        assert demo_cache.demo_cache_key(_demo_source(tok, c), 8) != base, key
    assert demo_cache.demo_cache_key(_demo_source(tok), 9) != base
    c = _bandit_config()
    c.warmstart.steps, c.warmstart.lr = 7, 0.5
    assert demo_cache.demo_cache_key(_demo_source(tok, c), 8) == base

    class OtherEnd:  # the same vocabulary and chat template, another end-of-turn id
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def __len__(self):
            return len(self.inner)

        eos_token_ids = property(lambda self: (self.inner.eos_token_ids[0] + 1,))

    other = dataclasses.replace(_demo_source(tok), tokenizer=OtherEnd(tok))
    assert demo_cache.demo_cache_key(other, 8) != base


def test_demo_cache_key_reads_ragen_and_our_names_as_one_setting(tok):
    """One env setting given under RAGEN's env_config name or ours (or at the variant's own value) keys one cache
    entry; another value keys another."""
    keys = {}
    for name, kwargs in {"ragen": {"hi_arm_hiscore_prob": 0.5}, "ours": {"hi_prob": 0.5},
                         "default_ragen": {"split": "train"}, "none": {}, "other": {"hi_prob": 0.4}}.items():
        c = _bandit_config()
        c.env.kwargs = kwargs
        keys[name] = demo_cache.demo_cache_key(_demo_source(tok, c), 8)
    assert keys["ragen"] == keys["ours"]
    assert keys["default_ragen"] == keys["none"]
    assert len({keys["ours"], keys["none"], keys["other"]}) == 3
    default_table = {"grid_lookup": {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}}
    assert demo_cache._canonical_env_kwargs("SimpleSokoban", default_table) == demo_cache._canonical_env_kwargs("SimpleSokoban", {})
    assert demo_cache._canonical_env_kwargs("SimpleSokoban", {"dim_x": 6, "dim_y": 6}) == demo_cache._canonical_env_kwargs(
        "SimpleSokoban", {"dim_room": (6, 6)})


def test_demo_cache_code_fingerprint_covers_the_env_package(tmp_path, monkeypatch):
    """An edit of the env's renderer, generator or oracle (modules beside the env class) invalidates cached demos;
    only the env class's own module was hashed, so stale prompts trained silently."""
    import importlib
    import sys
    import types

    pkg = tmp_path / "my_cache_env"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "env.py").write_text("from my_cache_env.render import render\n\nclass MyEnv:\n    pass\n")
    (pkg / "render.py").write_text("def render(state):\n    return 'a'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env_module = importlib.import_module("my_cache_env.env")
    try:
        batch = types.SimpleNamespace(env=env_module.MyEnv())
        before = demo_cache._format_code_fingerprint(batch)
        (pkg / "render.py").write_text("def render(state):\n    return 'b'\n")
        assert demo_cache._format_code_fingerprint(batch) != before
    finally:
        for name in [n for n in sys.modules if n.startswith("my_cache_env")]:
            del sys.modules[name]


def test_demo_cache_code_fingerprint_covers_the_shared_symbol_tables():
    """envs/symbols.py checks and completes the Sokoban and FrozenLake symbol tables (the grid and the legend), but
    lives beside the env packages, not in them: it is hashed too."""
    import os
    import types

    from envs.sokoban.env import Sokoban

    files = demo_cache._demo_code_files(types.SimpleNamespace(env=Sokoban(bank_size=1, use_cache=False)))
    assert os.path.join("envs", "symbols.py") in {os.path.join(*f.split(os.sep)[-2:]) for f in files}


def test_a_damaged_demo_cache_file_is_rebuilt(tok, tmp_path, monkeypatch):
    """A truncated or empty cache file (a copy cut short, a full disk) stopped the run with BadZipFile/EOFError
    although it was meant to be rebuilt."""
    monkeypatch.setenv("RAGEN_JAX_CACHE", str(tmp_path))
    source = _demo_source(tok)
    demo_cache._DEMO_MEMO.clear()
    want = demo_cache.build_demos(source)
    (path,) = [str(p) for p in (tmp_path / "demos").iterdir()]
    whole = open(path, "rb").read()
    for damaged in (whole[: len(whole) // 2], b""):
        with open(path, "wb") as f:
            f.write(damaged)
        demo_cache._DEMO_MEMO.clear()
        got = demo_cache.build_demos(source)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(DemoRows.load(path).loss_mask, want.loss_mask)  # written again, whole
    assert sorted(p.name for p in (tmp_path / "demos").iterdir()) == [os.path.basename(path)]  # no temporary files


def test_bad_jsonl_errors_name_the_file_line(tok, sokoban_eps, tmp_path):
    """Errors named the record's count, not its line, so a file with blank lines pointed at the wrong line; a
    metadata that is not an object stopped with an AttributeError; a weight "0" (a string) trained silently."""
    cfg = _cfg()
    good = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "<think></think><answer>Up</answer>"}]}
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<answer>Up</answer>"}]}
    path = tmp_path / "demos.jsonl"
    path.write_text("\n" + json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="line 4: an assistant message must start"):
        load_jsonl_demos(str(path), tok, cfg)
    path.write_text(json.dumps(dict(good, metadata=["not", "an", "object"])) + "\n")
    assert load_jsonl_demos(str(path), tok, cfg).num_rows == 1
    path.write_text(json.dumps(dict(good, metadata={"response_tokens": [5]})) + "\n")  # not a list per message
    assert load_jsonl_demos(str(path), tok, cfg).num_rows == 1
    weighted = {"messages": [good["messages"][0], dict(good["messages"][1], weight="0")]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(weighted) + "\n")
    with pytest.raises(ValueError, match=r"line 2: a message's weight is 0 \(not trained\) or 1 \(trained\); got '0'"):
        load_jsonl_demos(str(path), tok, cfg)


def test_a_warm_start_cut_by_max_seconds_after_a_validation_validates_once(tok, tmp_path, monkeypatch):
    """warmstart.max_seconds ending the warm start right after a val_every validation validated the same weights
    again (minutes on a real model) and logged every sft/val curve twice at that step."""
    import types

    from ragen_jax.config import validate_config
    from ragen_jax.monitoring import Monitor
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.trainer.setup import split_model

    def step_fn(trainable, opt_state, frozen, prefix, batch):
        return trainable, opt_state, {"loss": 1.0, "token_accuracy": 0.5, "grad_norm": 1.0, "update_skipped": 0.0}

    monkeypatch.setattr(flow, "make_sft_step", lambda graphdef, tx, micro: step_fn)
    monkeypatch.setenv("RAGEN_JAX_CACHE", str(tmp_path / "cache"))
    c = _bandit_config()
    c.warmstart.update(num_demos=8, batch_size=8, micro_batch_size=8, val_every=1, max_seconds=1e-9)
    run = validate_config(c)
    validations, logged = [], []

    def validate():
        validations.append(1)
        return {"val/Bandit/success": 0.5 * len(validations)}, []

    monitor = Monitor("", enabled=False)
    monitor.scalars = lambda m, step: logged.append((step, dict(m)))
    models = types.SimpleNamespace(actor=split_model(make_tiny_model(seed=0, **dict(c.model.tiny))[0], lora=False),
                                   tokenizer=tok)
    result = flow.run_warmstart(models, run, RolloutConfig.of(run), make_env_batch(c.env.name, 2), monitor,
                                validate=validate, success_key="val/Bandit/success", show_progress=False, steps=5)
    metrics = result.metrics
    assert metrics["sft/steps"] == 1 and len(validations) == 2  # before, and after step 1 (not again)
    assert [s for s, m in logged if "sft/val/Bandit/success" in m] == [0, 1]
    assert metrics["val_success_after_warmstart"] == 1.0


class _FragileOracleCounter(FragileCounter):
    """FragileCounter (its renderer raises on one state of the episodes at positions FAILING) with an oracle that
    raises on the states of the episodes at positions ORACLE_FAILING."""

    ORACLE_FAILING: set[int] = set()
    num_actions = 1

    def oracle_actions(self, state):
        if int(state["seed"]) % 100 in _FragileOracleCounter.ORACLE_FAILING:
            raise RuntimeError("no plan for this state")
        return [0] * (3 - int(state["n"]))


@pytest.mark.parametrize("random_actions", [False, True])
@pytest.mark.parametrize("fail_at, oracle_failing", [(0, set()), (2, set()), (None, {3})])
def test_demos_leave_out_episodes_whose_env_or_oracle_failed(tok, random_actions, fail_at, oracle_failing):
    """A JAX env whose renderer raises at reset or mid-episode, or an oracle that raises, on some episodes: those
    episodes are never demos (random demos kept them), and demo generation goes on. Before, the exception ended
    the warm start."""
    FragileCounter.FAILING, FragileCounter.FAIL_AT = {1, 6}, fail_at
    _FragileOracleCounter.ORACLE_FAILING = oracle_failing
    cfg = _cfg(max_turn=3, max_actions_per_turn=1, max_actions_per_traj=3)
    eps = oracle_demo_episodes("test_warmstart:_FragileOracleCounter", 20, tok, cfg, seed=5, batch_size=8,
                               random_actions=random_actions)
    assert len(eps) == 20 and not any(ep.error for ep in eps)
    assert all(ep.success and ep.num_actions == 3 for ep in eps)
    FragileCounter.FAILING, FragileCounter.FAIL_AT, _FragileOracleCounter.ORACLE_FAILING = set(range(8)), 0, set()
    with pytest.raises(ValueError, match=r"solved none of .*cannot draw state 0.*fix the env or its oracle"):
        oracle_demo_episodes("test_warmstart:_FragileOracleCounter", 4, tok, cfg, seed=5, batch_size=8)
