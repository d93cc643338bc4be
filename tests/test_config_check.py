"""validate_config: combinations that cannot run fail before anything is built, in one line naming the fix."""

import pytest

from configs.base import apply_tiny, get_base_config
from ragen_jax.config import validate_config


def _config(env_name: str, *, warmstart: bool, source: str = "oracle"):
    cfg = get_base_config()
    apply_tiny(cfg)
    cfg.env.name = env_name
    cfg.warmstart.enabled, cfg.warmstart.source = warmstart, source
    return cfg


@pytest.mark.parametrize("env_name", ["Countdown", "envs.serve.toy:CounterEnv"])
@pytest.mark.parametrize("source", ["oracle", "random"])
def test_a_played_warm_start_on_a_host_env_is_refused_with_the_fix(env_name, source):
    """Oracle/random demos are played in a JAX env batch; a host env (registered or by import path) fails here,
    not with 'Oracle demos need a JAX env batch' after the model is built."""
    with pytest.raises(ValueError) as info:
        validate_config(_config(env_name, warmstart=True, source=source))
    lines = [line for line in str(info.value).splitlines() if "warmstart" in line]
    assert len(lines) == 1, str(info.value)
    assert f"config.env.name={env_name!r} is a host env" in lines[0]
    assert "config.warmstart.enabled=False" in lines[0] and "JSONL" in lines[0]
    with pytest.raises(ValueError, match="JSONL"):  # --mode=sft always warm-starts: only the JSONL fix applies
        validate_config(_config(env_name, warmstart=False, source=source), mode="sft")


def test_host_envs_accept_a_jsonl_warm_start_or_none_and_jax_envs_the_oracle(tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("")
    validate_config(_config("Countdown", warmstart=False))
    validate_config(_config("Countdown", warmstart=True, source=str(demos)))
    validate_config(_config("Countdown", warmstart=True), mode="eval")  # eval never warm-starts
    validate_config(_config("SimpleSokoban", warmstart=True))
    validate_config(_config("SimpleSokoban", warmstart=False), mode="sft")


def test_a_warm_start_of_no_steps_is_refused_where_it_runs():
    """warmstart.steps=0 validated the policy twice, then stopped with a KeyError ('sft/loss') and a traceback."""
    cfg = _config("SimpleSokoban", warmstart=True)
    cfg.warmstart.steps = 0
    with pytest.raises(ValueError, match=r"config.warmstart.steps=0 trains nothing: set it > 0, or "
                                         r"config.warmstart.enabled=False"):
        validate_config(cfg)
    cfg.warmstart.enabled = False
    validate_config(cfg)  # no warm start: its step count does not matter
    with pytest.raises(ValueError, match=r"config.warmstart.steps=0 trains nothing: set it > 0$"):
        validate_config(cfg, mode="sft")


@pytest.mark.parametrize("env_name", ["SimpleSokoban", "Countdown"])
def test_a_warm_start_from_a_missing_jsonl_is_refused_where_it_runs(env_name, tmp_path):
    """A demonstration file that is not there failed after the model was built and validated, with a traceback."""
    missing = str(tmp_path / "demos.jsonl")
    with pytest.raises(ValueError, match=r"config.warmstart.source='.*demos.jsonl' is neither 'oracle', 'random' "
                                         r"nor an existing JSONL file"):
        validate_config(_config(env_name, warmstart=True, source=missing))
    with pytest.raises(ValueError, match="nor an existing JSONL file"):
        validate_config(_config(env_name, warmstart=False, source=missing), mode="sft")
    validate_config(_config(env_name, warmstart=False, source=missing))  # no warm start: the file is not read


def test_a_warm_start_batch_that_micro_batches_do_not_split_is_refused():
    """The warm start trained on 48 rows a step when asked for 64 in micro-batches of 48, and said nothing (the RL
    update's mini-batch has the same rule)."""
    cfg = _config("SimpleSokoban", warmstart=True)
    cfg.warmstart.batch_size, cfg.warmstart.micro_batch_size = 64, 48
    with pytest.raises(ValueError, match=r"config.warmstart.batch_size \(64\) must be a multiple of "
                                         r"config.warmstart.micro_batch_size \(48\)"):
        validate_config(cfg)
    for micro in (0, 16, 64):
        cfg.warmstart.micro_batch_size = micro
        validate_config(cfg)


def test_an_oracle_warm_start_on_a_jax_env_without_an_oracle_is_refused(monkeypatch):
    """A user's JAX env with no oracle_actions(state) failed with a traceback once the model was built; the built-in
    JAX envs all have one (Bandit's is its high arm), and 'random' demos need none."""
    from envs import registry
    from envs.frozenlake.env import FrozenLake

    class NoSolver(FrozenLake):
        oracle_actions = None

    monkeypatch.setitem(registry._REGISTRY, "NoSolverLake", registry.EnvSpec("NoSolverLake", NoSolver, kind="jax"))
    with pytest.raises(ValueError, match=r"config.env.name='NoSolverLake' \(NoSolver\) has no oracle_actions\(state\): "
                                         r"set config.warmstart.source='random' .*, or config.warmstart.enabled=False"):
        validate_config(_config("NoSolverLake", warmstart=True))
    validate_config(_config("NoSolverLake", warmstart=True, source="random"))
    validate_config(_config("NoSolverLake", warmstart=False))
    for env_name in ("SimpleSokoban", "FrozenLake", "Bandit", "game_2048", "rubikscube"):
        validate_config(_config(env_name, warmstart=True))


def test_a_model_path_beside_the_tiny_preset_is_refused_with_the_fix():
    """The tiny preset builds its own model, so a --config.model.path next to it would be ignored silently.

    The error names both fixes: a path added to a `:tiny` config (drop the preset) and the preset added to a
    full-size config, whose path is RAGEN's hub id (drop the path)."""
    cfg = _config("SimpleSokoban", warmstart=False)
    validate_config(cfg)  # the preset alone: no path to load
    cfg.model.path = "runs/quickstart/hf_export"
    with pytest.raises(ValueError, match=r"model.path='runs/quickstart/hf_export' is not loaded.*"
                                         r"--config.model.preset=''.*--config.model.path=''"):
        validate_config(cfg)
    cfg.model.preset = ""
    validate_config(cfg)


@pytest.mark.parametrize("key, value, message", [
    ("rollout.temperature", -1.0, r"config.rollout.temperature must be >= 0 \(got -1.0\).*0 takes the most likely"),
    ("val.temperature", -0.5, r"config.val.temperature must be >= 0 \(got -0.5\)"),
    ("rollout.top_p", 0.0, r"config.rollout.top_p must be in \(0, 1\] \(got 0.0\)"),
    ("rollout.top_p", 1.5, r"config.rollout.top_p must be in \(0, 1\] \(got 1.5\)"),
    ("rollout.top_k", -2, r"config.rollout.top_k must be >= 0 or -1 \(0 and -1, veRL's vLLM default, = off\) "
                          r"\(got -2\)"),
])
def test_impossible_sampling_settings_fail_before_anything_is_built(key, value, message):
    """A negative temperature used to pass the config check and stop the run with a traceback at its first RL step,
    after the validation and the warm start (minutes on a CPU); it must fail here, naming the key and the fix."""
    cfg = _config("SimpleSokoban", warmstart=False)
    section, name = key.split(".")
    cfg[section][name] = value
    with pytest.raises(ValueError, match=message):
        validate_config(cfg)
    with pytest.raises(ValueError, match=message):
        validate_config(cfg, mode="eval")


def test_temperature_zero_samples_greedily_as_vllm_and_transformers_read_it():
    """temperature=0 is greedy decoding in vLLM and transformers (it was an error here): the sampler takes the
    argmax and reports log-probs of the unscaled distribution, and the update's log-probs divide by 1, not 0."""
    from ragen_jax.algos.settings import AlgoSettings
    from ragen_jax.rollout import RolloutConfig

    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.rollout.temperature, cfg.val.temperature = 0.0, 0.0
    run = validate_config(cfg)
    sampling = RolloutConfig.of(run).sampling(_Tok(), ())
    assert sampling.greedy and sampling.temperature == 1.0
    assert RolloutConfig.of(run).sampling(_Tok(), (), temperature=0.7).greedy is False
    assert AlgoSettings.of(run).temperature == 1.0
    cfg.rollout.temperature = 0.5
    assert AlgoSettings.of(validate_config(cfg)).temperature == 0.5


class _Tok:
    eos_token_ids = (1,)


def test_top_k_minus_one_is_off_as_in_vllm_and_verl():
    """veRL's vLLM rollouts default to top_k=-1 (off); a RAGEN config carrying it must run, untruncated."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.rollout.top_k = -1
    validate_config(cfg)


def test_greedy_validation_at_a_positive_temperature_is_valid():
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.val.greedy, cfg.val.temperature = True, 0.5
    validate_config(cfg)


@pytest.mark.parametrize("key, value, message", [
    ("optim.actor.lr", -1e-4, r"config.optim.actor.lr must be >= 0 \(got -0.0001\)"),
    ("optim.critic.warmup_steps", -5, r"config.optim.critic.warmup_steps must be >= 0 \(got -5\)"),
    ("optim.actor.weight_decay", -0.1, r"config.optim.actor.weight_decay must be >= 0"),
    ("optim.actor.grad_clip", -1.0, r"config.optim.actor.grad_clip must be >= 0 \(0 = off\)"),
    ("optim.actor.b2", 1.0, r"config.optim.actor.b2 must be in \[0, 1\) \(got 1.0\)"),
    ("optim.critic.b1", -0.1, r"config.optim.critic.b1 must be in \[0, 1\)"),
    ("optim.actor.eps", -1e-8, r"config.optim.actor.eps must be >= 0"),
    ("optim.actor.min_lr_ratio", 1.5, r"config.optim.actor.min_lr_ratio must be in \[0, 1\]"),
    ("optim.critic.warmup_steps_ratio", 1.2, r"config.optim.critic.warmup_steps_ratio must be in \[0, 1\]"),
    ("optim.critic.num_cycles", -0.5, r"config.optim.critic.num_cycles must be >= 0"),
    ("optim.critic.schedule", "linear", r"config.optim.critic.schedule must be 'constant' or 'cosine'"),
    ("algo.gamma", 1.5, r"config.algo.gamma must be in \[0, 1\] \(got 1.5\)"),
    ("algo.lam", -0.1, r"config.algo.lam must be in \[0, 1\]"),
    ("algo.high_level_gamma", 2.0, r"config.algo.high_level_gamma must be in \[0, 1\]"),
    ("algo.kl_loss_coef", -0.1, r"config.algo.kl_loss_coef must be >= 0"),
    ("algo.clip_ratio_low", -0.2, r"config.algo.clip_ratio_low must be >= 0"),
    ("algo.clip_ratio_c", 0.5, r"config.algo.clip_ratio_c must be 0 \(off\) or > 1 \(got 0.5\)"),
    ("algo.loss_scale_factor", -1, r"config.algo.loss_scale_factor must be >= 0 tokens \(0 = the padded width\)"),
    ("trainer.logprob_chunk", 0, r"config.trainer.logprob_chunk must be >= 1"),
    ("rollout.context_window", 0, r"config.rollout.context_window must be >= 1"),
    ("rollout.chunk", 0, r"config.rollout.chunk must be >= 1"),
    ("rollout.slots", -1, r"config.rollout.slots must be >= 0 \(0 = chosen from the batch and response length\)"),
    ("rollout.lanes", -1, r"config.rollout.lanes must be >= 0 \(0 = the sampler's default\)"),
    ("val.groups", 0, r"config.val.groups must be >= 1 \(to turn validation off set config.val.every=0\)"),
    ("trainer.keep_checkpoints", 0, r"config.trainer.keep_checkpoints must be >= 1"),
    ("trainer.checkpoint_barrier_timeout_s", 0, r"config.trainer.checkpoint_barrier_timeout_s must be > 0 seconds"),
    ("trainer.checkpoint_barrier_timeout_s", -5, r"checkpoint_barrier_timeout_s must be > 0 seconds .*\(got -5\)"),
    ("rollout.format_penalty", float("nan"), r"config.rollout.format_penalty must be a finite number"),
])
def test_values_outside_their_range_fail_before_anything_is_built(key, value, message):
    """A negative learning rate (gradient ascent), a discount above 1 or a negative KL coefficient used to train
    silently; a zero chunk or context window failed later, once the model was built."""
    cfg = _config("SimpleSokoban", warmstart=False)
    *path, name = key.split(".")
    node = cfg
    for part in path:
        node = node[part]
    node[name] = value
    with pytest.raises(ValueError, match=message):
        validate_config(cfg)


def test_a_warmup_given_both_in_steps_and_as_a_ratio_is_refused():
    """veRL's steps win over its ratio without a word; here the two are one setting given twice."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.optim.actor.warmup_steps, cfg.optim.actor.warmup_steps_ratio = 5, 0.1
    with pytest.raises(ValueError, match=r"config.optim.actor.warmup_steps=5 and warmup_steps_ratio=0.1 are both set"):
        validate_config(cfg)
    cfg.optim.actor.warmup_steps = 0
    validate_config(cfg)


def test_the_edges_of_each_range_are_valid():
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.optim.actor.lr, cfg.optim.actor.grad_clip, cfg.algo.gamma, cfg.algo.lam = 0.0, 0.0, 0.0, 1.0
    cfg.algo.clip_ratio_c, cfg.algo.kl_loss_coef, cfg.rollout.slots, cfg.rollout.lanes = 0.0, 0.0, 0, 0
    validate_config(cfg)


@pytest.mark.parametrize("key, value, message", [
    ("warmstart.lr", -1e-3, r"config.warmstart.lr must be >= 0"),
    ("warmstart.steps", -1, r"config.warmstart.steps must be >= 0"),
    ("warmstart.batch_size", 0, r"config.warmstart.batch_size must be > 0"),
    ("warmstart.micro_batch_size", -1, r"config.warmstart.micro_batch_size must be >= 0 \(0 = the batch size\)"),
    ("warmstart.num_demos", 0, r"config.warmstart.num_demos must be > 0"),
    ("diagnostics.every", -1, r"config.diagnostics.every must be >= 0"),
    ("diagnostics.max_pairs", 0, r"config.diagnostics.max_pairs must be > 0"),
    ("diagnostics.ema_decay", 1.5, r"config.diagnostics.ema_decay must be in \[0, 1\]"),
    ("filter.value", -0.5, r"config.filter: filter value must be >= 0 \(got -0.5\)"),
])
def test_warm_start_diagnostics_and_filter_values_outside_their_range_fail_early(key, value, message):
    cfg = _config("SimpleSokoban", warmstart=True)
    section, name = key.split(".")
    cfg[section][name] = value
    with pytest.raises(ValueError, match=message):
        validate_config(cfg)


def test_a_key_a_config_file_misspells_is_refused_with_the_right_one():
    """Overrides on the command line are checked by ml_collections; keys a config file adds are not, so a typo there
    (env.max_turns) would be ignored and the run would use the default."""
    from configs.sokoban import get_config

    cfg = get_config("tiny")
    cfg.env.max_turns = 2
    cfg.trainer.total_step = 1
    cfg.env.kwargs.anything_goes = 3  # an env's constructor arguments are the user's
    with pytest.raises(ValueError) as e:
        validate_config(cfg)
    message = str(e.value)
    assert "config.env.max_turns is not a config key (did you mean config.env.max_turn?)" in message
    assert "config.trainer.total_step is not a config key (did you mean config.trainer.total_steps?)" in message
    assert "anything_goes" not in message
    for name in ("bandit", "countdown", "frozenlake", "sokoban", "sudoku", "webshop", "game_2048",
                 "rubikscube"):  # shipped configs pass
        validate_config(__import__(f"configs.{name}", fromlist=["get_config"]).get_config("tiny"))


def test_the_micro_batch_error_shows_both_values():
    from configs.base import apply_tiny, get_base_config

    cfg = get_base_config()
    apply_tiny(cfg)
    cfg.trainer.mini_batch_size, cfg.trainer.micro_batch_size = 33, 16
    with pytest.raises(ValueError, match=r"mini_batch_size \(33\) must be a multiple of .*micro_batch_size \(16\)"):
        validate_config(cfg)


def _adv_one_array(inputs):
    return inputs.response_mask  # forgot the returns


def _adv_per_episode(inputs):
    score = inputs.token_level_rewards.sum(-1)
    return score, score  # [B], not [B, T]


def _adv_wrong_signature(rewards, mask, values):
    return rewards, rewards


def _loss_summed(logprobs, old_logprobs, advantages, response_mask):
    return (-advantages * logprobs).sum(-1), {}  # reduced: the aggregation mode must do that


def _loss_without_metrics(logprobs, old_logprobs, advantages, response_mask):
    return -advantages * logprobs


@pytest.mark.parametrize("key, fn, needles", [
    ("custom_adv_estimator", "_adv_one_array", ["returned float32[4, 8]", "(advantages [B, T], returns [B, T])"]),
    ("custom_adv_estimator", "_adv_per_episode", ["returned (float32[4], float32[4])", "returns [B, T]"]),
    ("custom_adv_estimator", "_adv_wrong_signature", ["failed on inputs", "TypeError", "fn(inputs: AdvantageInputs"]),
    ("custom_policy_loss", "_loss_summed", ["returned (float32[4], dict)", "(loss [B, T], metrics dict)"]),
    ("custom_policy_loss", "_loss_without_metrics", ["returned float32[4, 8]", "(loss [B, T], metrics dict)"]),
])
def test_a_custom_algorithm_breaking_its_contract_is_refused_before_any_model_is_built(key, fn, needles):
    """Not a traceback from inside the jitted update after the first rollout: the function, what it did, the fix."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.algo[key] = f"test_config_check:{fn}"
    with pytest.raises(ValueError) as info:
        validate_config(cfg)
    line = next(line for line in str(info.value).splitlines() if f"test_config_check:{fn}" in line)
    for needle in needles + ["docs/custom_losses.md"]:
        assert needle in line, line


def test_the_docs_custom_algorithms_keep_their_contract():
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.algo.custom_adv_estimator = "test_config_check:_doc_median_baseline"
    cfg.algo.custom_policy_loss = "test_config_check:_doc_clipped_pg"
    validate_config(cfg)


def _doc_median_baseline(inputs, *, scale: float = 1.0):  # docs/custom_losses.md
    import jax.numpy as jnp

    score = inputs.token_level_rewards.sum(-1)
    adv = scale * (score - jnp.median(score))[:, None] * inputs.response_mask
    return adv, adv


def _doc_clipped_pg(logprobs, old_logprobs, advantages, response_mask, *, clip_ratio_high=0.28):
    import jax.numpy as jnp

    ratio = jnp.minimum(jnp.exp(logprobs - old_logprobs), 1 + clip_ratio_high)
    return -advantages * ratio * response_mask, {}


@pytest.mark.parametrize("key, value, registry", [
    ("value_loss", "hubr", "value loss"), ("kl_loss_type", "k33", "KL estimator"),
    ("kl_penalty", "lowvar_kl", "KL estimator"), ("loss_agg_mode", "token_mean", "loss aggregation mode"),
    ("critic_loss_agg_mode", "tokenmean", "loss aggregation mode"),
    ("rollout_correction", "tiss", "rollout correction"), ("value_loss", "no_such_mod:huber", "value loss")])
def test_every_name_the_algo_registries_resolve_is_checked_before_any_model_is_built(key, value, registry):
    """A misspelled value loss or KL estimator is one config error naming the key, the known names and the fix,
    not a KeyError traceback after the first rollout."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.algo[key] = value
    with pytest.raises(ValueError) as info:
        validate_config(cfg)
    message = str(info.value)
    assert message.startswith(f"Invalid config: config.algo.{key}: "), message
    assert repr(value) in message and registry in message, message
    assert "import path 'package.module:function'" in message or "PYTHONPATH" in message, message
    assert '"' not in message, message  # the error's text, not the KeyError's repr


def _agg_first_token_numerator(loss, mask):
    return (loss * mask)[:, 0].sum()


def _agg_rows(mask):
    import jax.numpy as jnp

    return jnp.maximum(mask.shape[0], 1).astype(jnp.float32)


def _first_token_agg():
    from ragen_jax.algos import AggMode

    return AggMode(_agg_first_token_numerator, _agg_rows)


FIRST_TOKEN_AGG = _first_token_agg()  # an AggMode (docs/custom_losses.md: AGG_MODES' contract)


def _no_correction(old_logprobs, sampler_logprobs, response_mask, *, bound=None):
    import jax.numpy as jnp

    return jnp.ones_like(old_logprobs), response_mask.astype(bool), {}


def test_registered_aggregation_modes_and_rollout_corrections_are_accepted():
    """docs/custom_losses.md: every registry takes your own entries by name or import path, AGG_MODES and
    ROLLOUT_CORRECTIONS too (the config check does not limit them to the built-ins)."""
    from ragen_jax import algos

    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.algo.loss_agg_mode = cfg.algo.critic_loss_agg_mode = "test_config_check:FIRST_TOKEN_AGG"
    cfg.algo.rollout_correction = "test_config_check:_no_correction"
    validate_config(cfg)
    algos.AGG_MODES.register("first-token", FIRST_TOKEN_AGG)
    try:
        cfg.algo.loss_agg_mode = "first-token"
        validate_config(cfg)
    finally:
        algos.AGG_MODES.unregister("first-token")


@pytest.mark.parametrize("rank, targets, alpha, needle", [
    (4, "q_proj,qproj", 64.0, "names ['qproj'], which are not projections of a decoder layer"),
    (4, " , ", 64.0, "target_modules is empty, so LoRA (rank 4) would train nothing"),
    (4, "q_proj,v_proj", 0.0, "config.model.lora.alpha must be > 0 (got 0.0)"),
    (-1, "q_proj", 64.0, "config.model.lora.rank must be >= 0 (got -1"),
])
def test_lora_settings_that_cannot_train_are_refused_before_the_model_is_built(rank, targets, alpha, needle):
    """An unknown target raised a traceback from apply_lora after the model loaded; no target (or alpha 0) trained
    nothing without a word; a negative rank silently turned LoRA off."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.model.lora.rank, cfg.model.lora.target_modules, cfg.model.lora.alpha = rank, targets, alpha
    with pytest.raises(ValueError, match="Invalid config: ") as info:
        validate_config(cfg)
    message = str(info.value)
    assert needle in message, message
    if rank > 0 and alpha > 0:  # a target error lists the names to choose from
        assert "from q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" in message, message


def test_lora_targets_are_checked_only_when_lora_is_on():
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.model.lora.rank, cfg.model.lora.target_modules = 0, "anything"
    validate_config(cfg)
    cfg.model.lora.rank, cfg.model.lora.target_modules = 8, " q_proj , v_proj "
    validate_config(cfg)


@pytest.mark.parametrize("kwargs, message", [
    ("scale=2", r"config.algo.kwargs='scale=2' is not JSON"),
    ("[2.0]", "must be a JSON object of keyword: value"),
    ('{"scale": {"a": 1}}', "is an object; give numbers"),
    ('{"scael": 2.0}', r"no function of this run takes a keyword 'scael' \(advantage estimator "
                       r"'my_algos_kw:median_baseline', policy loss 'vanilla'\); a misspelled one would be dropped"),
    ('{"gamma": 0.9}', r"'gamma' is a keyword the trainer sets itself \(set config.algo.gamma instead\)"),
])
def test_algo_kwargs_that_would_not_reach_a_function_are_refused(kwargs, message, tmp_path, monkeypatch):
    from configs.sokoban import get_config

    (tmp_path / "my_algos_kw.py").write_text(
        "def median_baseline(inputs, *, scale: float = 1.0):\n"
        "    import jax.numpy as jnp\n"
        "    score = inputs.token_level_rewards.sum(-1)\n"
        "    adv = scale * (score - jnp.median(score))[:, None] * inputs.response_mask\n"
        "    return adv, adv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = get_config("tiny")
    cfg.algo.custom_adv_estimator = "my_algos_kw:median_baseline"
    cfg.algo.kwargs = kwargs
    with pytest.raises(ValueError, match=message):
        validate_config(cfg)
    cfg.algo.kwargs = '{"scale": 2.0}'
    validate_config(cfg)


@pytest.mark.parametrize("estimator,bi_level", [("gae", False), ("gae", True), ("bilevel_gae", False)])
def test_a_critic_estimator_without_a_critic_is_refused(estimator, bi_level):
    """GAE and bi-level GAE read the critic's values: without one they would train on values of 0. The registry
    name "bilevel_gae" needs the critic as much as RAGEN's adv_estimator="gae" + bi_level_gae=True."""
    cfg = get_base_config()
    apply_tiny(cfg)
    cfg.algo.adv_estimator, cfg.algo.bi_level_gae, cfg.algo.use_critic = estimator, bi_level, False
    with pytest.raises(ValueError, match="needs config.algo.use_critic=True"):
        validate_config(cfg)
    cfg.algo.use_critic = True
    validate_config(cfg)


@pytest.mark.parametrize("targets", ["all-linear", "ALL-LINEAR", "[q_proj, v_proj]", "['q_proj', 'v_proj']"])
def test_lora_targets_accept_ragens_all_linear_and_a_yaml_list(targets):
    """RAGEN's base.yaml default `lora.target_modules: all-linear` (PEFT's shorthand) and a veRL-style list were
    refused as unknown projection names."""
    from ragen_jax.models.lora import DEFAULT_TARGETS, parse_target_modules

    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.model.lora.rank, cfg.model.lora.target_modules = 8, targets
    validate_config(cfg)
    expected = DEFAULT_TARGETS if "all" in targets.lower() else ("q_proj", "v_proj")
    assert parse_target_modules(targets) == expected


def test_a_validation_batch_of_part_of_a_group_names_both_sizes():
    """val.batch_size and val.group_size set apart (e.g. sudoku's 16 episodes a group, a batch of 2): the error
    gives both values, so the user sees which one to change."""
    cfg = _config("SimpleSokoban", warmstart=False)
    cfg.val.group_size, cfg.val.batch_size = 16, 2
    with pytest.raises(ValueError, match=r"config.val.batch_size \(2\) must be a multiple of config.val.group_size "
                                         r"\(16\)"):
        validate_config(cfg)
    cfg.val.batch_size = 32
    validate_config(cfg)
