"""The full-size defaults every env config starts from, against RAGEN's.

RAGEN: config/base.yaml (mll-lab-nu/RAGEN), which inherits veRL's ppo_trainer (the pinned submodule,
volcengine/verl d62da495, 0.6.1: verl/trainer/config/_generated_ppo_trainer.yaml is its flattened form).
`:tiny` presets may differ (documented CPU presets); docs/ragen_differences.md lists the rest
(micro_batch_size 8 with loss_scope="mini_batch" vs RAGEN's micro_batch_size_per_gpu 1).
"""

import importlib
from pathlib import Path

import pytest

from configs.base import get_base_config
from ragen_jax.config import validate_config

ENV_MODULES = ("sokoban", "frozenlake", "bandit", "countdown", "metamathqa", "sudoku", "webshop", "searchqa",
               "deepcoder", "lean", "game_2048", "rubikscube")
VERL = "verl/trainer/config/_generated_ppo_trainer.yaml"

# (config key, RAGEN's value, where RAGEN sets it)
RAGEN_DEFAULTS = [
    ("model.path", "Qwen/Qwen2.5-3B-Instruct", "base.yaml:15"),
    ("model.lora.rank", 0, "base.yaml:20"),
    # lora.alpha only acts once a user sets lora.rank; the adapters' scale is alpha / rank
    ("model.lora.alpha", 64.0, "base.yaml:21"),
    ("env.groups", 8, "base.yaml:158"),
    ("env.group_size", 16, "base.yaml:160"),
    ("env.max_turn", 5, "base.yaml:138"),
    ("env.max_actions_per_turn", 2, "base.yaml:140"),
    ("env.max_actions_per_traj", 10, "envs.yaml:62 (CoordSokoban)"),
    ("env.train_seed", 10000, "base.yaml:9"),
    ("val.groups", 512, "base.yaml:165"),
    ("val.group_size", 1, "base.yaml:166"),
    ("val.seed", 123, "base.yaml:10"),
    ("val.temperature", 0.5, "base.yaml:74"),
    ("val.greedy", False, "base.yaml:73 (val_kwargs.do_sample: True)"),
    ("val.top_p", 1.0, f"{VERL}:207 (rollout.val_kwargs.top_p; eval.yaml:47)"),
    ("val.top_k", 0, f"{VERL}:206 (rollout.val_kwargs.top_k -1: off)"),
    ("val.every", 10, "base.yaml:119 (test_freq)"),
    ("val.at_start", True, "base.yaml:117 (val_before_train)"),
    ("rollout.response_length", 400, "base.yaml:56"),
    ("rollout.max_model_len", 3600, "base.yaml:54"),
    ("rollout.temperature", 1.0, "base.yaml:59"),
    ("rollout.top_p", 1.0, f"{VERL}:173"),
    ("rollout.top_k", 0, f"{VERL}:172 (-1: off)"),
    ("rollout.enable_think", True, "base.yaml:142"),
    ("rollout.action_sep", "||", "base.yaml:139"),
    ("rollout.prompt_style", "ragen", "ctx_manager.py's prompts (compact is only the tiny presets')"),
    # 0: each env's envs.yaml max_tokens in the prompts (ctx_manager.py:146), pinned per env below
    ("rollout.prompt_max_tokens", 0, "envs.yaml max_tokens"),
    ("rollout.context_mode", "full", "base.yaml:135"),
    # -1: every earlier turn stays in a non-full mode's context (RAGEN's ctx_manager.py:281-282 maps k < 0 to None,
    # no limit); it only acts once a user picks single_turn / limited_multi_turn
    ("rollout.context_window", -1, "base.yaml:136"),
    ("rollout.use_turn_scores", False, "base.yaml:141"),
    ("rollout.format_penalty", -0.1, "base.yaml:156"),
    ("rollout.reward_norm_method", "identity", "base.yaml:145"),
    ("rollout.reward_norm_grouping", "state", "base.yaml:144"),
    ("filter.strategy", "top_p", "base.yaml:61"),
    ("filter.value", 1.0, "base.yaml:60"),
    ("filter.largest", True, "base.yaml:62"),
    ("filter.include_zero", True, "base.yaml:63"),
    ("filter.prob_mode", "linear", "base.yaml:64"),
    ("filter.selection_eps", 0.01, "base.yaml:65"),
    ("filter.empty_stop_steps", 5, "base.yaml:66"),
    ("filter.metric", "reward_variance", "base.yaml:67"),
    ("filter.loss_scaling", "none", "base.yaml:41"),
    ("algo.adv_estimator", "gae", "base.yaml:97"),
    ("algo.use_critic", True, "base.yaml:97 (gae)"),
    ("algo.gamma", 1.0, "base.yaml:94"),
    ("algo.lam", 1.0, "base.yaml:95"),
    ("algo.high_level_gamma", 0.95, "base.yaml:96"),
    ("algo.bi_level_gae", False, "base.yaml:98"),
    ("algo.zero_task_advantage", False, "base.yaml:99"),
    ("algo.norm_adv_by_std_in_grpo", True, "base.yaml:101"),
    ("algo.soft_advantage_reweight", False, "base.yaml:104"),
    ("algo.grpo_advantage_length_weight", False, "base.yaml:17"),
    ("algo.loss_agg_mode", "token-mean", "base.yaml:43"),
    # RAGEN's dp_critic.py:244 calls veRL's compute_value_loss without a loss_agg_mode: its default token-mean
    ("algo.critic_loss_agg_mode", "token-mean", "ragen/workers/critic/dp_critic.py:244"),
    ("algo.policy_loss", "vanilla", f"{VERL}:58 (actor.policy_loss.loss_mode)"),
    ("algo.value_loss", "clipped", f"{VERL}:386 (critic.cliprange_value: veRL's clipped value loss)"),
    ("algo.rollout_correction", "none", f"{VERL}:469,471 (rollout_is, rollout_rs: null)"),
    ("algo.tis_cap", 0.0, "veRL 0.6.1's ppo_trainer has no TIS cap (0 = off)"),
    ("algo.clip_ratio_low", 0.2, "base.yaml:38"),
    ("algo.clip_ratio_high", 0.28, "base.yaml:39"),
    ("algo.clip_ratio_c", 3.0, f"{VERL}:64"),
    ("algo.cliprange_value", 0.5, f"{VERL}:386"),
    ("algo.entropy_coeff", 0.001, "base.yaml:34"),
    ("algo.use_kl_loss", False, "base.yaml:35"),
    ("algo.kl_loss_coef", 0.0, "base.yaml:36"),
    ("algo.kl_loss_type", "kl", "base.yaml:37"),
    ("algo.use_kl_in_reward", False, f"{VERL}:483"),
    ("algo.kl_penalty", "kl", "base.yaml:105"),
    ("algo.kl_ctrl_type", "fixed", "base.yaml:107"),
    ("algo.kl_ctrl_coef", 0.0, "base.yaml:108"),
    ("algo.kl_ctrl_horizon", 10000.0, f"{VERL}:489"),
    ("algo.kl_ctrl_target", 0.1, f"{VERL}:490"),
    ("algo.temperature_in_logprobs", True, "veRL's actor divides logits by the rollout temperature"),
    ("optim.actor.lr", 1e-6, "base.yaml:46"),
    ("optim.actor.b1", 0.9, "base.yaml:45"),
    ("optim.actor.b2", 0.999, "base.yaml:45"),
    ("optim.actor.weight_decay", 0.01, f"{VERL}:15"),
    # veRL's build_optimizer (verl/workers/config/optimizer.py) passes no eps: torch.optim.AdamW's 1e-8
    ("optim.actor.eps", 1e-8, "torch.optim.AdamW default"),
    ("optim.actor.warmup_steps", 0, f"{VERL}:13,16 (ratio 0.0, steps -1)"),
    ("optim.actor.warmup_steps_ratio", 0.0, f"{VERL}:13"),
    ("optim.actor.schedule", "constant", f"{VERL}:23"),
    ("optim.actor.grad_clip", 1.0, f"{VERL}:107"),
    ("optim.actor.min_lr_ratio", 0.0, f"{VERL}:21"),
    ("optim.actor.num_cycles", 0.5, f"{VERL}:22"),
    ("optim.critic.lr", 1e-5, "base.yaml:86"),
    ("optim.critic.b1", 0.9, "base.yaml:85"),
    ("optim.critic.b2", 0.999, "base.yaml:85"),
    ("optim.critic.weight_decay", 0.01, f"{VERL}:330"),
    ("optim.critic.eps", 1e-8, "ragen/workers/fsdp_workers.py:368 (optim.AdamW without eps: torch's 1e-8)"),
    ("optim.critic.warmup_steps", 0, f"{VERL}:328,331"),
    ("optim.critic.warmup_steps_ratio", 0.0, f"{VERL}:328"),
    ("optim.critic.schedule", "constant", f"{VERL}:338"),
    ("optim.critic.grad_clip", 1.0, f"{VERL}:424"),
    ("optim.critic.min_lr_ratio", 0.0, f"{VERL}:336"),
    ("optim.critic.num_cycles", 0.5, f"{VERL}:337"),
    ("trainer.total_steps", 200, "base.yaml:115"),
    ("trainer.mini_batch_size", 32, "base.yaml:14"),
    ("trainer.epochs", 1, f"{VERL}:71"),
    ("trainer.critic_warmup", 0, f"{VERL}:519"),
    ("trainer.save_every", 100, "base.yaml:114"),
    ("trainer.early_stop.reward_collapse_window", 10, "ragen/trainer/agent_trainer.py:1212,1228 (10 steps)"),
    ("trainer.early_stop.reward_collapse_ratio", 0.1, "ragen/trainer/agent_trainer.py:1229"),
    ("trainer.early_stop.val_success_below", 0.01, "ragen/trainer/agent_trainer.py:1485"),
    ("trainer.early_stop.val_patience", 5, "ragen/trainer/agent_trainer.py:1490"),
    ("model.critic_path", "", "base.yaml:80 (critic.model.path: ${model_path})"),
    ("diagnostics.every", 5, "base.yaml:149"),
    ("diagnostics.max_pairs", 64, "base.yaml:153"),
    ("diagnostics.first_turn", True, "base.yaml:151"),
    ("diagnostics.trajectory", True, "base.yaml:152"),
    ("diagnostics.std_eps", 1e-3, "ragen/trainer/agent_trainer.py:674 (collapse_detection.std_eps)"),
    ("diagnostics.ema_decay", 0.9, "ragen/trainer/agent_trainer.py:675 (collapse_detection.ema_decay)"),
]

# Deliberate differences, each in docs/ragen_differences.md: (key, ours, RAGEN's, where)
DELIBERATE = [
    ("trainer.micro_batch_size", 8, 1, "base.yaml:12 (micro_batch_size_per_gpu)"),
    ("algo.loss_scope", "mini_batch", "micro_batch", "veRL 0.4's dp_actor: each micro-batch aggregated alone"),
    ("trainer.keep_checkpoints", 2, 1, "base.yaml:123 (max_actor_ckpt_to_keep)"),
    ("diagnostics.batch_size", 32, 128, "base.yaml:150 (collapse_detection.micro_batch_size)"),
]


def _get(c, key):
    for part in key.split("."):
        c = c[part]
    return c


@pytest.mark.parametrize("key,want,where", RAGEN_DEFAULTS, ids=[k for k, _, _ in RAGEN_DEFAULTS])
def test_sokoban_defaults_are_ragens(key, want, where):
    from configs.sokoban import get_config

    c = get_config()
    validate_config(c)
    assert _get(c, key) == want, f"{key}: RAGEN's {where} is {want!r}"


@pytest.mark.parametrize("key,ours,ragens,where", DELIBERATE, ids=[k for k, *_ in DELIBERATE])
def test_deliberate_differences_are_documented(key, ours, ragens, where):
    from configs.sokoban import get_config

    differ = (Path(__file__).parents[1] / "docs" / "ragen_differences.md").read_text()
    assert _get(get_config(), key) == ours and ours != ragens, f"{key}: RAGEN's {where} is {ragens!r}"
    assert key in differ, f"{key} differs from RAGEN's {where}; docs/ragen_differences.md must say so"


def test_lora_targets_every_linear_projection():
    """RAGEN's base.yaml:22 lora.target_modules all-linear: every projection of a decoder layer."""
    from configs.sokoban import get_config
    from ragen_jax.models.lora import parse_target_modules

    assert parse_target_modules(get_config().model.lora.target_modules) == parse_target_modules("all-linear")


# Per env: RAGEN's config/_N_<env>.yaml over base.yaml and envs.yaml (test_configs_eval pins the env name, turns,
# actions, response_length, max_model_len and train groups): key -> (value, where)
ENV_SETTINGS = {
    "sokoban": {"val.groups": (512, "base.yaml:165"), "env.kwargs": ({}, "envs.yaml:73-78 (the variant's own)")},
    "frozenlake": {"val.groups": (512, "base.yaml:165"),
                   "env.kwargs.success_rate": (1.0, "_3_frozen_lake.yaml:23"),
                   "env.kwargs.size": (4, "ragen/env/frozen_lake/config.py (size 4)"),
                   "env.kwargs.p": (0.9, "ragen/env/frozen_lake/config.py (p 0.9)")},
    "bandit": {"val.groups": (256, "_1_bandit.yaml:30 (n_groups [256, 256])"), "val.name": ("Bandit,BanditTest",
                                                                                              "_1_bandit.yaml:29")},
    "countdown": {"val.groups": (512, "base.yaml:165")},
    "metamathqa": {"val.groups": (512, "base.yaml:165")},
    "sudoku": {"val.groups": (32, "_8_sudoku.yaml:19"), "val.group_size": (16, "_8_sudoku.yaml:20"),
               "env.kwargs.max_steps": (81, "envs.yaml:286"),
               "env.kwargs.render_format": ("with_feedback", "envs.yaml:283"),
               "env.kwargs.show_conflicts": (True, "envs.yaml:284"),
               "env.kwargs.show_valid_numbers": (True, "envs.yaml:285")},
    "webshop": {"val.groups": (512, "base.yaml:165"), "trainer.mini_batch_size": (32, "_6_webshop.yaml:9"),
                "trainer.micro_batch_size": (4, "_6_webshop.yaml:8")},
    "searchqa": {"val.groups": (256, "_9_search.yaml:35"), "val.group_size": (1, "base.yaml:166"),
                 "trainer.mini_batch_size": (32, "_9_search.yaml:12"),
                 "trainer.micro_batch_size": (4, "_9_search.yaml:11"),
                 "env.kwargs.max_steps": (10, "envs.yaml:326"), "env.kwargs.top_k": (5, "envs.yaml:327")},
    "deepcoder": {"val.groups": (512, "base.yaml:165"), "env.kwargs.max_steps": (1, "envs.yaml:163")},
    "lean": {"val.groups": (512, "base.yaml:165"), "rollout.context_window": (5, "_7_lean.yaml:18"),
             "env.kwargs.server_url": ("http://127.0.0.1:8000", "ragen/env/lean/config.py (server_url)"),
             "env.kwargs.request_timeout": (30.0, "ragen/env/lean/config.py (request_timeout)"),
             "env.kwargs.max_retries": (3, "ragen/env/lean/config.py (max_retries)"),
             "env.kwargs.max_steps": (100, "ragen/env/lean/config.py (max_steps)")},
    "game_2048": {"val.groups": (512, "base.yaml:170"), "rollout.context_window": (5, "_9_2048.yaml:10"),
                  "env.kwargs.size": (4, "ragen/env/game_2048/config.py (size)"),
                  "env.kwargs.two_prob": (0.9, "ragen/env/game_2048/config.py (two_prob)"),
                  "env.kwargs.use_log_reward": (True, "ragen/env/game_2048/config.py (use_log_reward)"),
                  "env.kwargs.target_tile": (0, "none: RAGEN plays until no move is left")},
    "rubikscube": {"val.groups": (512, "base.yaml:170"), "rollout.context_window": (5, "_10_rubikscube.yaml:17"),
                   "env.kwargs.scramble_depth": (1, "envs.yaml:371"), "env.kwargs.max_steps": (20, "envs.yaml:372")},
}
# envs.yaml max_tokens, the prompts' "Max response length" of each registered variant
PROMPT_MAX_TOKENS = {"SimpleSokoban": 100, "CoordSokoban": 120, "LargerSokoban": 100, "SokobanDifferentGridVocab": 100,
                     "FrozenLake": 100, "CoordFrozenLake": 120, "Bandit": 100, "BanditTest": 100, "Countdown": 100,
                     "MetamathQA": 100, "SimpleSudoku": 150, "MediumSudoku": 150, "WebShop": 200, "SearchQA": 300,
                     "DeepCoder": 8000, "Lean": 512, "game_2048": 8192, "rubikscube": 96}


@pytest.mark.parametrize("module", ENV_MODULES)
def test_env_config_settings_are_ragens(module):
    c = importlib.import_module(f"configs.{module}").get_config()
    validate_config(c)
    assert c.model.path == "Qwen/Qwen2.5-3B-Instruct", "every _N_<env>.yaml keeps base.yaml:15's model_path"
    assert c.val.group_size == ENV_SETTINGS[module].get("val.group_size", (1, ""))[0]
    for key, (want, where) in ENV_SETTINGS[module].items():
        got = _get(c, key)
        got = got.to_dict() if hasattr(got, "to_dict") else got
        assert got == want, f"{module} {key}: RAGEN's {where} is {want!r}"


def test_registered_variants_state_ragens_max_tokens():
    from envs.registry import get_spec

    for name, want in PROMPT_MAX_TOKENS.items():
        assert get_spec(name).prompt_max_tokens == want, f"{name}: RAGEN's envs.yaml max_tokens is {want}"


@pytest.mark.parametrize("preset,want", [
    ("ppo", dict(adv_estimator="gae", loss_agg_mode="token-mean", use_critic=True)),
    ("dapo", dict(adv_estimator="gae", loss_agg_mode="token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28,
                  use_kl_loss=False, kl_loss_coef=0.0, use_kl_in_reward=False, kl_ctrl_coef=0.0)),
    ("grpo", dict(adv_estimator="grpo", norm_adv_by_std_in_grpo=True, loss_agg_mode="seq-mean-token-mean",
                  use_critic=False)),
    ("drgrpo", dict(adv_estimator="grpo", norm_adv_by_std_in_grpo=False, loss_agg_mode="seq-mean-token-sum",
                    use_critic=False)),
])
def test_algorithm_variants_are_ragens(preset, want):
    """RAGEN's scripts/runs/run_main_table_diff_algo.sh:228-239 (PPO, DAPO, GRPO, DrGRPO); every other setting
    stays base.yaml's (entropy 0.001, no KL, clip 0.2 / 0.28)."""
    from configs.sokoban import get_config

    c = get_config(preset)
    validate_config(c)
    base = get_config().algo.to_dict()
    assert {k: c.algo[k] for k in want} == want
    changed = {k for k, v in c.algo.to_dict().items() if base[k] != v} - set(want) - {"preset"}
    assert not changed, f"{preset} also changes {sorted(changed)}"


@pytest.mark.parametrize("module", ["sokoban", "frozenlake"])
def test_filter_variants_are_ragens(module):
    """RAGEN's docs/guide_rollout_filtering.md:21-22: no filter = top_p 1.0 with include_zero True; the recommended
    filter = top_p 0.9, linear, include_zero False, selection_eps 0.01."""
    get_config = importlib.import_module(f"configs.{module}").get_config
    f, n = get_config("filter").filter, get_config("no_filter").filter
    assert (f.strategy, f.value, f.prob_mode, f.include_zero, f.selection_eps) == ("top_p", 0.9, "linear", False,
                                                                                     0.01)
    assert (n.strategy, n.value, n.include_zero) == ("top_p", 1.0, True)


@pytest.mark.parametrize("module", ENV_MODULES)
def test_env_configs_keep_ragens_training_defaults(module):
    """No env yaml of RAGEN overrides an optimizer, loss or algorithm setting: each env config keeps base's."""
    c = importlib.import_module(f"configs.{module}").get_config()
    base = get_base_config()
    for section in ("algo", "optim", "filter"):
        assert c[section].to_dict() == base[section].to_dict(), (module, section)
    for key in ("val.temperature", "val.every", "rollout.temperature", "rollout.enable_think",
                "rollout.context_mode", "rollout.format_penalty", "trainer.total_steps", "trainer.epochs",
                "trainer.mini_batch_size", "model.lora.alpha", "model.lora.rank"):
        assert _get(c, key) == _get(base, key), (module, key)


@pytest.mark.parametrize("mode", ["single_turn", "limited_multi_turn"])
def test_context_window_minus_one_keeps_every_turn(mode):
    """RAGEN's max_context_window -1 (ctx_manager.py:276-288): a non-full mode shows every earlier turn;
    k >= 1 shows the last k turns."""
    from ragen_jax.models.tiny import load_tiny_tokenizer
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.rollout.context import ContextBuilder
    from ragen_jax.rollout.episodes import fit_context
    from ragen_jax.rollout.prompts import TurnRecord
    from ragen_jax.rollout.types import Episode

    tok = load_tiny_tokenizer()
    builder = ContextBuilder(tok)
    done = [TurnRecord(state=f"state {t}", actions_left=10 - t, response_text="<answer>Up</answer>",
                       response_tokens=tok.encode("</think><answer>Up</answer>")) for t in range(4)]
    for window, first_shown in ((-1, 0), (2, 3), (1, 4)):
        ep = Episode(env_tag="T", seed=0, group_id=0, system="sys",
                     history=[*done, TurnRecord(state="state 4", actions_left=6)])
        cfg = RolloutConfig(response_length=16, max_model_len=4096, context_mode=mode, context_window=window)
        fit_context(builder, cfg, ep)
        assert ep.history[-1].history_start == first_shown, (window, mode)


def test_context_window_range():
    c = get_base_config()
    c.rollout.context_window = -1
    validate_config(c)
    for bad in (0, -2):
        c.rollout.context_window = bad
        with pytest.raises(ValueError, match="config.rollout.context_window must be >= 1 or -1"):
            validate_config(c)


def test_tiny_presets_keep_a_bounded_window():
    """The `:tiny` presets play single_turn with only the current turn shown (short contexts on a CPU), except
    where an env's RAGEN config sets its own max_context_window, which stays (configs/base.py's apply_tiny): Lean's
    5 (_7_lean.yaml:18), game_2048's and rubikscube's 5."""
    own_window = {"lean": 5, "game_2048": 5, "rubikscube": 5}
    for module in ENV_MODULES:
        c = importlib.import_module(f"configs.{module}").get_config("tiny")
        if c.rollout.context_mode != "full":
            assert c.rollout.context_window == own_window.get(module, 1), module
            assert importlib.import_module(f"configs.{module}").get_config().rollout.context_window == \
                own_window.get(module, -1), module


def test_bandit_validates_on_both_arm_vocabularies_as_ragen():
    """RAGEN's _1_bandit.yaml:26-30: es_manager.val tags ["Bandit", "BanditTest"], n_groups [256, 256]."""
    from configs.bandit import get_config
    from ragen_jax.config.checks import validation_envs

    c = get_config()
    validate_config(c)
    assert validation_envs(c.val.name, c.env.name) == ["Bandit", "BanditTest"] and c.val.groups == 256
    assert get_config("test").val.name == "BanditTest"
    assert get_config("tiny").val.name == "Bandit" and get_config("test,tiny").val.name == "BanditTest"


def test_webshop_validates_on_ragens_val_goals():
    """RAGEN's validation EnvStateManager resets its envs with mode="val" (agent_proxy.py:198, es_manager.py:138),
    and only WebShop reads it: validation goals are the val split (webshop/env.py:104-105), training's the train
    split. Our validation envs get val.env_kwargs over env.kwargs; the WebShop config sets split="val"."""
    from configs.webshop import get_config
    from ragen_jax.trainer import setup as setup_lib

    for variant in (None, "tiny"):
        c = get_config(variant)
        validate_config(c)
        train = setup_lib.env_batch(c.env, c.env.name, 1)
        val = setup_lib.env_batch(c.env, c.env.name, 1, c.val.env_kwargs)
        assert (train.envs[0].split, val.envs[0].split) == ("train", "val"), variant


def test_val_env_kwargs_are_free_form_and_only_for_validation():
    """val.env_kwargs takes any key (an env's constructor argument); other envs' configs leave it empty."""
    c = get_base_config()
    c.val.env_kwargs.anything_goes = 3
    validate_config(c)
    for module in ENV_MODULES:
        if module != "webshop":
            assert not importlib.import_module(f"configs.{module}").get_config().val.env_kwargs, module


def test_validation_samples_with_its_own_top_p_and_top_k():
    """RAGEN validates with veRL's val_kwargs (top_p 1.0, top_k -1; vllm_rollout_spmd.py reads them when
    meta_info.validate), whatever the training rollout's top_p / top_k: config.val.top_p / top_k, not rollout.*."""
    from configs.sokoban import get_config
    from ragen_jax.trainer.validation import val_sampling

    c = get_config()
    c.rollout.top_p, c.rollout.top_k = 0.9, 20
    validate_config(c)
    assert val_sampling(c.val) == dict(temperature=0.5, greedy=False, top_p=1.0, top_k=0)
    c.val.top_p, c.val.top_k, c.val.greedy = 0.95, 5, True
    assert val_sampling(c.val) == dict(temperature=0.5, greedy=True, top_p=0.95, top_k=5)
    for key, bad in (("top_p", 0.0), ("top_k", -2)):
        c = get_config()
        c.val[key] = bad
        with pytest.raises(ValueError, match=f"config.val.{key} must be"):
            validate_config(c)
