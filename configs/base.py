"""RAGEN's defaults (its `_2_sokoban` run on veRL) as an ml_collections config.

Every env config starts from `get_base_config()`, then applies variants named after the colon:
`--config configs/sokoban.py:tiny,grpo`. Keys mirror RAGEN's meaning; README maps the names.
"""

from __future__ import annotations

import difflib

import ml_collections

from ragen_jax.algos.presets import get_preset, preset_names
from ragen_jax.diagnostics.regimes import DEFAULT_THRESHOLDS

MODEL_PATHS = {
    "3b": "Qwen/Qwen2.5-3B-Instruct",
    "1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
}


def get_base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.model = dict(
        path=MODEL_PATHS["3b"],  # a local HF folder, or a hub id found in the local HF cache
        preset="",  # "tiny": the built-in tiny model and tokenizer (no files needed)
        tiny=dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=384),
        param_dtype="",  # "" = the checkpoint's; "float32" | "bfloat16"
        dtype="",  # compute dtype, "" = param dtype
        remat="none",  # none | full | dots
        critic_path="",  # "" = initialise the critic from the policy checkpoint
        # target_modules: comma-separated projection names, or "all-linear" (RAGEN's default: every projection)
        lora=dict(rank=0, alpha=64.0, target_modules="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"),
        seed=0,
    )
    c.env = dict(
        name="CoordSokoban",  # registered env variant (envs.registry)
        tag="",  # metric prefix; "" = the env name
        groups=8,  # env_groups
        group_size=16,
        max_turn=5,
        max_actions_per_turn=2,
        max_actions_per_traj=10,
        kwargs=ml_collections.ConfigDict(),  # overrides of the variant's constructor arguments
        train_seed=10000,  # first train seed; advances by `groups` per rollout
    )
    c.val = dict(
        name="",  # "" = env.name; several envs comma-separated ("Bandit,BanditTest"), val.groups each
        groups=512,
        group_size=1,
        seed=123,
        temperature=0.5,
        # validation samples with its own nucleus / top-k, not the rollout's (veRL's val_kwargs top_p 1.0, top_k -1)
        top_p=1.0,
        top_k=0,
        greedy=False,
        every=10,  # validate every N steps (0 = never)
        at_start=True,
        batch_size=128,  # episodes per validation rollout chunk
        # overrides of the env's constructor arguments for validation only, over env.kwargs (RAGEN resets its
        # validation envs with mode="val": WebShop then draws the val split's goals)
        env_kwargs=ml_collections.ConfigDict(),
    )
    c.rollout = dict(
        response_length=400,
        max_model_len=3600,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        enable_think=True,
        stop_at_answer=True,
        action_sep="||",  # between the actions of one answer, as the system prompt states it (agent_proxy.action_sep)
        context_mode="full",  # full | limited_multi_turn | single_turn
        context_window=-1,  # turns a non-full mode shows: the last N, -1 = every turn (RAGEN's max_context_window)
        prompt_style="ragen",  # ragen (the original's prompts) | compact (actions + state only; small models)
        prompt_max_tokens=0,  # the prompts' "Max response length: N": 0 = the env's (RAGEN's envs.yaml max_tokens)
        use_turn_scores=False,
        format_penalty=-0.1,
        reward_norm_method="identity",  # identity | mean_std | mean | asym_clip
        reward_norm_grouping="state",  # state | inductive | batch
        engine="auto",  # continuous (episodes advance on their own) | lockstep (the reference) | auto: continuous
        # on one process, lockstep across hosts; both give the same trajectories
        slots=0,  # continuous: decode slots (0 = one per episode); fewer slots queue the episodes (on a CPU with
        #  RAGEN's long, spread responses a quarter of the episodes measured 1.92x lockstep, one slot each 1.25x)
        chunk=8,  # continuous: decode steps per jitted chunk between the host's turn bookkeeping
        lanes=0,  # decode lanes: rows split into parts decoded side by side in threads, one cache each (0 = auto:
        #  on a CPU with a small model, one per core, >= 8 rows each; 2 cores generate with the tiny model
        #  1.5-1.7x faster)
    )
    c.filter = dict(
        strategy="top_p",  # top_p | top_k | top_k_abs | min_p
        value=1.0,  # 1.0 with top_p keeps everything (RAGEN's default: no filtering)
        metric="reward_variance",  # reward_variance | reward(_sum) | entropy(_variance) | length | FILTER_METRICS
        include_zero=True,
        prob_mode="linear",  # top_p mode: linear | softmax
        selection_eps=0.01,
        largest=True,
        loss_scaling="none",  # scale advantages by the kept ratio: none | linear | sqrt
        empty_stop_steps=5,  # stop after N steps in a row where the filter keeps nothing
    )
    c.algo = dict(preset="ppo", **_algo_defaults("ppo"))
    # min_lr_ratio, num_cycles: the cosine schedule's; warmup_steps_ratio: a warmup of that share of total_steps
    # (veRL's lr_warmup_steps_ratio; set it or warmup_steps). veRL's optim keys.
    c.optim = dict(
        actor=dict(lr=1e-6, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, warmup_steps_ratio=0.0,
                   schedule="constant", grad_clip=1.0, state_dtype="float32",
                   min_lr_ratio=0.0, num_cycles=0.5),
        critic=dict(lr=1e-5, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, warmup_steps_ratio=0.0,
                    schedule="constant", grad_clip=1.0, state_dtype="float32",
                    min_lr_ratio=0.0, num_cycles=0.5),
    )
    c.trainer = dict(
        total_steps=200,
        mini_batch_size=32,  # ppo_mini_batch_size, in samples
        micro_batch_size=8,  # per gradient-accumulation step
        epochs=1,  # ppo_epochs
        critic_warmup=0,
        logprob_chunk=256,  # positions per chunk when computing log-probs (never [B,T,V] at once)
        save_every=100,
        keep_checkpoints=2,
        # several hosts: seconds each waits for the slowest at every checkpoint save/restore step before the save
        # fails on all of them (Orbax's default 300; docs/scaling.md)
        checkpoint_barrier_timeout_s=300,
        resume=False,
        export_hf=True,  # write the final policy as a Hugging Face folder
        log_samples_every=10,  # a sample trajectory as TensorBoard text every N steps (0 = never)
        dump_rollouts_every=0,  # every N steps write rollouts/train_step{n}.jsonl, and at every validation
        # rollouts/val_step{n}.jsonl; n is the step TensorBoard and the console show (1 = the first RL step; 0 = never)
        seed=0,
        early_stop=dict(
            reward_std_patience=0,  # stop after N steps of zero in-group reward std (0 = off)
            # RAGEN's reward-variance collapse: the mean in-group reward std of the first N trained steps is the
            # baseline; stop when N steps in a row fall below reward_collapse_ratio x baseline (N = 0: off)
            reward_collapse_window=10,
            reward_collapse_ratio=0.1,
            val_success_below=0.01,
            val_patience=5,
            skipped_updates=5,  # stop after N updates in a row skipped for non-finite values (0 = off)
            max_policy_kl=10.0,  # stop when actor/ppo_kl or actor/kl_loss exceeds this (nats/token; 0 = off)
        ),
    )
    c.diagnostics = dict(
        every=5,  # MI / collapse diagnostics at step 1 and every N steps (0 = off)
        max_pairs=64,  # (prompt, reasoning) pairs per sampling
        first_turn=True,  # collapse_first_turn_sample: first-turn prompts (columns = unique prompts)
        trajectory=True,  # collapse_trajectory_sample: turns drawn uniformly over trajectories
        # the regime thresholds, calibrated (ragen_jax/diagnostics/regimes.py, docs/diagnostics.md)
        entropy_threshold=DEFAULT_THRESHOLDS["conditional_entropy"],  # H(Z|X), nats/token: high vs low
        mi_threshold=DEFAULT_THRESHOLDS["mi"],  # MI as a fraction of log N (nats when not mi_relative): high vs low
        mi_relative=DEFAULT_THRESHOLDS["mi_relative"],
        ema_decay=0.9,
        std_eps=1e-3,  # RAGEN's collapse_detection.std_eps: the MI z-score's (gap / (std + eps))
        batch_size=32,  # pairs per cross-scoring forward pass
        warnings=True,  # Echo-Trap early warnings (falling reward std, entropy collapse, grad spikes)
    )
    c.warmstart = dict(  # supervised warm-start (behaviour cloning) before RL; not in RAGEN
        enabled=False,
        source="oracle",  # "oracle" (the env's solver plays) | "random" (random valid actions: format only)
        # | a path to a JSONL of chat messages
        num_demos=2000,  # oracle episodes (each gives one row per turn, or one in "full" context)
        steps=300,  # SFT updates (fewer if max_seconds runs out first)
        max_seconds=0.0,  # stop after this much SFT step time (0 = no limit)
        batch_size=32,  # rows per update
        micro_batch_size=0,  # rows per gradient-accumulation step (0 = batch_size)
        lr=1e-3,
        warmup_steps=10,
        weight_decay=0.0,
        reasoning="fixed",  # "fixed": every oracle response thinks reasoning_text; "state": the env describes
        # its state (env.describe_state, e.g. "box below left, target left"), input-dependent thinking; "filler":
        # filler_words random words whatever the input (template collapse on purpose); "state_filler": the state's
        # description then random words (diverse); docs/diagnostics.md calibrates the regimes with these
        reasoning_text="",  # text between "<think>" and "</think>" in oracle responses
        filler_words=4,  # random words of "filler" / "state_filler" thinking
        seed=1_000_000,  # first demo seed (apart from train and validation seeds) and batch order
        share_prefix=True,  # run the prompt prefix all rows share once per micro-batch (same loss)
        val_every=0,  # also validate every N SFT steps (0 = only before and after)
    )
    c.logging = dict(  # TensorBoard always (workdir/tb); Weights & Biases on request (`pip install wandb`)
        wandb=False,  # mirror scalars, text, images and the config to a wandb run
        wandb_project="ragen-jax",
        wandb_entity="",  # "" = your default entity
        wandb_mode="",  # "" = wandb's default (WANDB_MODE); "online" | "offline" | "disabled"
    )
    c.mesh = dict(data=-1, fsdp=1, tensor=1, sampling_layout="no_fsdp")  # -1 = the remaining devices
    c.distributed = dict(  # multi-host: one process per host (env vars JAX_COORDINATOR_ADDRESS etc. override)
        coordinator_address="", num_processes=1, process_id=0, local_device_ids="", auto=False,
        initialization_timeout=300)
    c.workdir = "runs/default"
    return c


def _algo_defaults(preset: str) -> dict:
    p = get_preset(preset)
    p.pop("name")
    for key in ("tis_cap", "rollout_correction_bound"):  # 0 = off / the correction's default
        p[key] = 0.0 if p[key] is None else p[key]
    p["loss_scale_factor"] = p["loss_scale_factor"] or 0  # 0 = the padded width
    p["custom_policy_loss"] = ""  # "package.module:function" overrides policy_loss
    p["custom_adv_estimator"] = ""  # "package.module:function" overrides adv_estimator
    p["kwargs"] = ""  # JSON object of more keywords for your estimator/losses: '{"scale": 2.0}'
    p["temperature_in_logprobs"] = True  # divide logits by the rollout temperature (veRL)
    return p


def apply_algo_preset(c: ml_collections.ConfigDict, preset: str) -> None:
    c.algo.update(dict(preset=preset, **_algo_defaults(preset)))


def apply_variants(c: ml_collections.ConfigDict, arg: str | None, variants: dict) -> ml_collections.ConfigDict:
    """Apply comma-separated variants: algorithm presets, model sizes, and env-specific ones."""
    for name in filter(None, (arg or "").split(",")):
        name = name.strip().lower()
        if name in preset_names():
            apply_algo_preset(c, name)
        elif name in MODEL_PATHS:
            c.model.path = MODEL_PATHS[name]
        elif name in variants:
            variants[name](c)
        else:
            known = sorted(set(variants) | set(MODEL_PATHS) | set(preset_names()))
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Unknown config variant {name!r}.{hint} Known variants: {known}.")
    return c


def apply_tiny(c: ml_collections.ConfigDict) -> None:
    """The built-in tiny model on CPU: small batches and short turns, learning in minutes."""
    c.model.preset = "tiny"
    c.model.path = ""  # the preset needs no files; a path set after this is a conflict (config_check)
    c.model.param_dtype = "float32"
    c.env.groups = 8
    c.env.group_size = 8
    c.val.groups = 128
    c.val.batch_size = 128
    c.val.every = 5
    c.val.temperature = 0.5
    c.rollout.response_length = 32
    c.rollout.max_model_len = 1024
    c.rollout.context_mode = "single_turn"
    if c.rollout.context_window < 0:  # only the current turn (an env's own window, Lean's 5, stays)
        c.rollout.context_window = 1
    c.optim.actor.lr = 1e-4
    c.optim.critic.lr = 1e-3
    c.optim.actor.warmup_steps = 0
    c.trainer.total_steps = 30
    c.trainer.mini_batch_size = 32
    # ~2k tokens per micro-batch: on a 2-core CPU the update is fastest at 1-2k tokens a call, its data staying
    # in cache (the tiny model at 32 x 256 rows: 354 ms a mini-batch at micro-batch 32, 288 ms at 8; scoring too)
    c.trainer.micro_batch_size = 8
    c.trainer.save_every = 0
    c.diagnostics.every = 5
    c.diagnostics.max_pairs = 32
    c.diagnostics.batch_size = 64


def apply_reasoning(c: ml_collections.ConfigDict) -> None:
    """The reasoning variant of the quickstart recipe (RAGEN-2's MI diagnostics need thinking that depends on the
    input): demonstrations think the env's own short description of the state ("box below left, target left"),
    responses get room for it, and the MI diagnostics run at RAGEN's defaults (every 5 steps, 64 pairs)."""
    c.warmstart.reasoning = "state"
    c.rollout.response_length = 40
    c.diagnostics.every, c.diagnostics.max_pairs, c.diagnostics.batch_size = 5, 64, 64


def no_filter(c: ml_collections.ConfigDict) -> None:
    """The SNR filter off (top_p 1.0 keeps every group), for ablations."""
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 1.0, True


def apply_quickstart_rl(c: ml_collections.ConfigDict) -> None:
    """The quickstart recipe for grid games on the tiny model (docs/quickstart.md): the compact prompt
    (actions + state, a documented departure from RAGEN's texts), a warm start on BFS-oracle play, then GRPO
    with RAGEN-2's SNR filter (top_p 0.9) and a k3 KL leash to the warm-started policy. The warm start is
    limited by steps, not seconds, so a run's numbers do not depend on how busy the machine is."""
    c.rollout.prompt_style = "compact"
    c.rollout.response_length = 24
    c.rollout.max_model_len = 256
    c.warmstart.enabled = True
    c.warmstart.num_demos = 5000
    c.warmstart.steps = 500
    c.warmstart.max_seconds = 0.0
    c.warmstart.batch_size, c.warmstart.micro_batch_size = 64, 16  # ~1k tokens a step: 152 vs 163 ms at 64
    c.warmstart.lr = 1e-3
    c.env.groups, c.env.group_size = 16, 8
    c.trainer.total_steps = 80
    c.trainer.mini_batch_size, c.trainer.micro_batch_size = 64, 16  # 64 x 128 rows: 251 vs 351 ms at 64
    c.trainer.epochs = 1
    c.algo.update(dict(preset="grpo", adv_estimator="grpo", use_critic=False, norm_adv_by_std_in_grpo=True,
                       loss_agg_mode="seq-mean-token-mean", use_kl_loss=True, kl_loss_coef=0.05,
                       kl_loss_type="low_var_kl", entropy_coeff=0.0))
    c.optim.actor.lr = 5e-5
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 0.9, False
    c.val.groups, c.val.batch_size, c.val.every = 512, 128, 20
