"""The sections of a run's config: every entry with its default (RAGEN's `_2_sokoban` run on veRL), its meaning and
the rule its value keeps. `configs/base.py` builds the command-line config from these; docs/configuration.md maps the
names to RAGEN's. The algorithm's section is in `config.algo`, the filter's is `ragen_jax.filtering.FilterConfig`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ragen_jax.config.fields import AT_LEAST_0, AT_LEAST_1, FINITE, POSITIVE, UNIT, Rule, Section, section, setting
from ragen_jax.diagnostics.regimes import DEFAULT_THRESHOLDS

MODEL_PATHS = {
    "3b": "Qwen/Qwen2.5-3B-Instruct",
    "1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
}
DTYPES = ("", "float32", "bfloat16")


# ---------------------------------------------------------------------------------------------------- model
@dataclasses.dataclass(frozen=True)
class TinyModel(Section):
    """The built-in tiny model's shape (model.preset="tiny")."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384


@dataclasses.dataclass(frozen=True)
class LoRA(Section):
    """LoRA adapters (RAGEN's lora_rank / lora_alpha / target_modules; rank 0 = full fine-tuning)."""

    rank: int = 0
    alpha: float = 64.0
    # comma-separated projection names, or "all-linear" (RAGEN's default: every projection)
    target_modules: str = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


@dataclasses.dataclass(frozen=True)
class ModelSection(Section):
    path: str = MODEL_PATHS["3b"]  # a local HF folder, or a hub id found in the local HF cache
    # "tiny": the built-in tiny model and tokenizer (no files); "tiny_vision": the same LM with a small vision tower
    preset: str = setting("", choices=("", "tiny", "tiny_vision"))
    tiny: TinyModel = section(TinyModel)
    param_dtype: str = setting("", choices=DTYPES)  # "" = the checkpoint's
    dtype: str = setting("", choices=DTYPES)  # compute dtype, "" = param dtype
    remat: str = setting("none", choices=("none", "full", "dots"))
    freeze_vision: bool = False  # a vision-language policy's vision tower stays as loaded (not trained)
    critic_path: str = ""  # "" = initialise the critic from the policy checkpoint
    lora: LoRA = section(LoRA)
    seed: int = 0
    # --mode=eval of an OpenAI-compatible endpoint instead of a local model (docs/serving.md); "" = a local model
    api_base: str = ""  # e.g. http://127.0.0.1:8000/v1 (POST {api_base}/chat/completions); key: $OPENAI_API_KEY
    api_model: str = ""  # the model name the endpoint serves
    api_concurrency: int = setting(8, POSITIVE)  # requests in flight at once
    api_timeout_s: float = setting(60.0, POSITIVE)  # per request
    api_retries: int = setting(2, AT_LEAST_0)  # retries of a failed request

    def dtype_kwargs(self) -> dict[str, str]:
        """The dtypes a model is built or loaded in, when set ("" = the checkpoint's)."""
        return {k: getattr(self, k) for k in ("param_dtype", "dtype") if getattr(self, k)}


# ---------------------------------------------------------------------------------------------------- env and val
def env_tag(name: str) -> str:
    """The metric prefix of an env name: the class name of an import path ("my_pkg.envs:GuessNumber")."""
    return name.rsplit(":", 1)[-1]


@dataclasses.dataclass(frozen=True)
class TurnLimits(Section):
    """How long an episode may go on (RAGEN names in brackets)."""

    max_turn: int = setting(5, POSITIVE)  # [agent_proxy.max_turn]
    max_actions_per_turn: int = setting(2, POSITIVE)  # [agent_proxy.max_actions_per_turn]
    max_actions_per_traj: int = setting(10, POSITIVE)  # [custom_envs.*.max_actions_per_traj]


@dataclasses.dataclass(frozen=True)
class EnvSection(TurnLimits):
    name: str = "CoordSokoban"  # registered env variant (envs.registry), or "package.module:Class"
    tag: str = ""  # metric prefix; "" = the env name
    groups: int = setting(8, POSITIVE)  # env_groups
    group_size: int = setting(16, POSITIVE)
    kwargs: dict = setting({})  # overrides of the variant's constructor arguments (free-form)
    train_seed: int = 10000  # first train seed; advances by `groups` per rollout

    @property
    def turn_limits(self) -> TurnLimits:
        return TurnLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(TurnLimits)})

    @property
    def batch_size(self) -> int:
        """Episodes per RL step."""
        return self.groups * self.group_size


@dataclasses.dataclass(frozen=True)
class ValSection(Section):
    name: str = ""  # "" = env.name; several envs comma-separated ("Bandit,BanditTest"), val.groups each
    # the validation env batch is built whatever val.every says (0 rows failed later with a mesh error)
    groups: int = setting(512, Rule(lambda v: v >= 1, "must be >= 1 (to turn validation off set config.val.every=0)"))
    group_size: int = setting(1, POSITIVE)
    seed: int = 123
    temperature: float = 0.5
    # validation samples with its own nucleus / top-k, not the rollout's (veRL's val_kwargs top_p 1.0, top_k -1)
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    every: int = setting(10, AT_LEAST_0)  # validate every N steps (0 = never)
    at_start: bool = True
    batch_size: int = setting(128, POSITIVE)  # episodes per validation rollout chunk
    # overrides of the env's constructor arguments for validation only, over env.kwargs (RAGEN resets its
    # validation envs with mode="val": WebShop then draws the val split's goals)
    env_kwargs: dict = setting({})


# ---------------------------------------------------------------------------------------------------- rollout
def turn_scores_problem(mode: str, use_turn_scores: bool) -> str | None:
    """Why `use_turn_scores` cannot train in context mode `mode` (None when it can). A per-turn mode trains each
    turn in its own row, where that turn's own score would leave out every later reward of its episode; RAGEN
    ignores the flag there and gives each row the episode score, which use_turn_scores=False does here."""
    if not use_turn_scores or mode == "full":
        return None
    return (f"rollout.use_turn_scores=True needs rollout.context_mode='full', not {mode!r}: each turn of a per-turn "
            "mode trains in its own row, where the turn's own score would leave out every later reward of its "
            "episode (RAGEN ignores the flag there and scores every row with the episode's score). Set "
            "rollout.use_turn_scores=False (each row then gets the episode score, as in RAGEN) or "
            "rollout.context_mode='full'.")


@dataclasses.dataclass(frozen=True)
class RolloutSection(Section):
    """How episodes are played and turned into rows (RAGEN names in brackets)."""

    response_length: int = setting(400, POSITIVE)  # tokens per turn [actor_rollout_ref.rollout.response_length]
    max_model_len: int = 3600  # context + response, tokens [rollout.max_model_len]
    temperature: float = 1.0  # 0 samples greedily (argmax), as vLLM and transformers read it
    top_p: float = 1.0
    top_k: int = 0
    enable_think: bool = True
    stop_at_answer: bool = True  # stop a turn at "</answer>" (the original has no stop strings)
    # between the actions of one answer, as the system prompt states it [agent_proxy.action_sep]
    action_sep: str = setting("||", Rule(lambda v: bool(v.strip()) and not set("<>") & set(v),
                                         "must hold a visible character and no '<' or '>' (it sits inside "
                                         "<answer>...</answer>)"))
    context_mode: str = setting("full", choices=("full", "limited_multi_turn", "single_turn"))
    # turns a non-full mode shows: the last N, -1 = every turn [max_context_window]
    context_window: int = setting(-1, Rule(lambda v: v >= 1 or v == -1, "must be >= 1 or -1 (every turn)"))
    # ragen (the original's prompts) | compact (actions + state only; a documented departure for small models)
    prompt_style: str = setting("ragen", choices=("ragen", "compact"))
    # the prompts' "Max response length: N": 0 = the env's (RAGEN's envs.yaml max_tokens)
    prompt_max_tokens: int = setting(0, Rule(lambda v: v >= 0,
                                             "must be >= 0 (0 = the env's, else rollout.response_length)"))
    use_turn_scores: bool = False
    # answer (RAGEN's <answer>...</answer>) | tool_call (<tool_call>{"name", "arguments"}</tool_call> to an env with
    # tools, envs.protocols.ToolEnv: the chat template lists the tools, results return in its tool role)
    action_format: str = setting("answer", choices=("answer", "tool_call"))
    # added to the reward of every invalid turn: NaN or inf would make every update non-finite
    format_penalty: float = setting(-0.1, FINITE)
    reward_norm_method: str = setting("identity", choices=("identity", "mean_std", "mean", "asym_clip"))
    reward_norm_grouping: str = setting("state", choices=("state", "inductive", "batch"))
    # continuous (episodes advance on their own) | lockstep (the reference) | auto: continuous on one process,
    # lockstep across hosts; both give the same trajectories
    engine: str = setting("auto", choices=("auto", "continuous", "lockstep"))
    # continuous: decode slots; fewer slots than episodes queue them (0 = chosen from the workload: one per episode
    # on an accelerator, on a CPU max(32, batch x 64 / response_length); rollout.continuous.default_slots;
    # experiments/bench/bench_rollout.py compares slot counts on a RAGEN-shaped and a tiny workload)
    slots: int = setting(0, Rule(lambda v: v >= 0, "must be >= 0 (0 = chosen from the batch and response length)"))
    chunk: int = setting(8, AT_LEAST_1)  # continuous: decode steps per jitted chunk between the host's bookkeeping
    # decode lanes: rows split into parts decoded side by side in threads, one cache each (0 = the sampler's
    # choice: on a CPU with a small model one lane per core of >= 8 rows; experiments/bench/bench_lanes.py)
    lanes: int = setting(0, Rule(lambda v: v >= 0, "must be >= 0 (0 = the sampler's default)"))

    def problems(self) -> list[str]:
        """What the entries break together (each entry's own rule is `field_problems`')."""
        problems = []
        if self.response_length >= self.max_model_len:
            problems.append(f"rollout.response_length ({self.response_length}) must be < rollout.max_model_len "
                            f"({self.max_model_len}): a turn's context and response share max_model_len")
        if self.action_format == "tool_call" and self.context_mode == "single_turn":
            problems.append("rollout.action_format='tool_call' needs a chat context (tool results return as messages "
                            "in the template's tool role): set rollout.context_mode to 'full' or 'limited_multi_turn'")
        turn_scores = turn_scores_problem(self.context_mode, self.use_turn_scores)
        return problems + ([turn_scores] if turn_scores else [])


# ---------------------------------------------------------------------------------------------------- optimizers
def _optimizer(lr: float) -> Any:
    return section(lambda: OptimizerSection(lr=lr))


@dataclasses.dataclass(frozen=True)
class OptimizerSection(Section):
    """AdamW with global-norm clipping and a constant or cosine schedule (veRL's optim keys)."""

    lr: float = setting(1e-6, AT_LEAST_0)
    weight_decay: float = setting(0.01, AT_LEAST_0)
    # AdamW's bias correction divides by 1 - beta^t: a beta of 1 made every update NaN, so every one was skipped
    # (torch.optim.AdamW refuses such betas, and a negative eps, when it is built)
    b1: float = setting(0.9, Rule(lambda v: 0 <= v < 1, "must be in [0, 1)"))
    b2: float = setting(0.999, Rule(lambda v: 0 <= v < 1, "must be in [0, 1)"))
    eps: float = setting(1e-8, AT_LEAST_0)
    warmup_steps: int = setting(0, AT_LEAST_0)
    warmup_steps_ratio: float = setting(0.0, UNIT)  # a warmup of that share of total_steps (veRL's)
    schedule: str = setting("constant", Rule(lambda v: v in ("constant", "cosine"), "must be 'constant' or 'cosine'"))
    grad_clip: float = setting(1.0, Rule(lambda v: v >= 0, "must be >= 0 (0 = off)"))
    state_dtype: str = "float32"
    min_lr_ratio: float = setting(0.0, UNIT)  # the cosine schedule's floor
    num_cycles: float = setting(0.5, AT_LEAST_0)  # the cosine schedule's


@dataclasses.dataclass(frozen=True)
class OptimSection(Section):
    actor: OptimizerSection = _optimizer(1e-6)
    critic: OptimizerSection = _optimizer(1e-5)


# ---------------------------------------------------------------------------------------------------- trainer
@dataclasses.dataclass(frozen=True)
class EarlyStopSection(Section):
    reward_std_patience: int = 0  # stop after N steps of zero in-group reward std (0 = off)
    # RAGEN's reward-variance collapse: the mean in-group reward std of the first N trained steps is the
    # baseline; stop when N steps in a row fall below reward_collapse_ratio x baseline (N = 0: off)
    reward_collapse_window: int = setting(10, AT_LEAST_0)
    reward_collapse_ratio: float = setting(0.1, AT_LEAST_0)
    val_success_below: float = 0.01
    val_patience: int = 5
    skipped_updates: int = 5  # stop after N updates in a row skipped for non-finite values (0 = off)
    max_policy_kl: float = 10.0  # stop when actor/ppo_kl or actor/kl_loss exceeds this (nats/token; 0 = off)


@dataclasses.dataclass(frozen=True)
class TrainerSection(Section):
    total_steps: int = setting(200, AT_LEAST_0)
    mini_batch_size: int = setting(32, POSITIVE)  # ppo_mini_batch_size, in samples
    micro_batch_size: int = setting(8, POSITIVE)  # per gradient-accumulation step
    epochs: int = setting(1, POSITIVE)  # ppo_epochs
    critic_warmup: int = 0
    logprob_chunk: int = setting(256, AT_LEAST_1)  # positions per chunk when computing log-probs (never [B,T,V])
    save_every: int = setting(100, AT_LEAST_0)
    # Orbax deletes every checkpoint past max_to_keep: 0 would delete each one as soon as it is written
    keep_checkpoints: int = setting(2, Rule(lambda v: v >= 1, "must be >= 1 (checkpoints kept on disk)"))
    # several hosts: seconds each waits for the slowest at every checkpoint save/restore step before the save
    # fails on all of them (Orbax's default 300; docs/scaling.md)
    checkpoint_barrier_timeout_s: int = setting(300, Rule(
        lambda v: v > 0, "must be > 0 seconds (how long each host waits for the slowest at a multi-host checkpoint "
        "step; Orbax's default is 300)"))
    resume: bool = False
    export_hf: bool = True  # write the final policy as a Hugging Face folder
    log_samples_every: int = 10  # a sample trajectory as TensorBoard text every N steps (0 = never)
    # every N steps write rollouts/train_step{n}.jsonl, and at every validation rollouts/val_step{n}.jsonl; n is the
    # step TensorBoard and the console show (1 = the first RL step; 0 = never)
    dump_rollouts_every: int = 0
    seed: int = 0
    early_stop: EarlyStopSection = section(EarlyStopSection)
    # sync: rollout, then update (the reference) | async: a rollout worker plays the next steps while the learner
    # updates (docs/async.md); max_staleness: versions a trained token may lag the learner (0 = the sync run);
    # staleness_policy: wait (the worker holds back) | drop (too stale batches are dropped and counted)
    schedule: str = setting("sync", choices=("sync", "async"))
    max_staleness: int = setting(1, AT_LEAST_0)
    staleness_policy: str = setting("wait", choices=("wait", "drop"))


# ---------------------------------------------------------------------------------------------------- the rest
@dataclasses.dataclass(frozen=True)
class DiagnosticsSection(Section):
    every: int = setting(5, AT_LEAST_0)  # MI / collapse diagnostics at step 1 and every N steps (0 = off)
    max_pairs: int = setting(64, POSITIVE)  # (prompt, reasoning) pairs per sampling
    first_turn: bool = True  # collapse_first_turn_sample: first-turn prompts (columns = unique prompts)
    trajectory: bool = True  # collapse_trajectory_sample: turns drawn uniformly over trajectories
    # the regime thresholds, calibrated (ragen_jax/diagnostics/regimes.py, docs/diagnostics.md)
    entropy_threshold: float = DEFAULT_THRESHOLDS["conditional_entropy"]  # H(Z|X), nats/token: high vs low
    mi_threshold: float = DEFAULT_THRESHOLDS["mi"]  # MI as a fraction of log N (nats when not mi_relative)
    mi_relative: bool = DEFAULT_THRESHOLDS["mi_relative"]
    ema_decay: float = setting(0.9, UNIT)
    std_eps: float = setting(1e-3, POSITIVE)  # RAGEN's collapse_detection.std_eps: the MI z-score's (gap / (std + eps))
    batch_size: int = setting(32, POSITIVE)  # pairs per cross-scoring forward pass
    warnings: bool = True  # Echo-Trap early warnings (falling reward std, entropy collapse, grad spikes)
    # RAGEN-2's gradient analysis (its trainer.gradient_analysis_every): the actor's gradient norm split into its
    # task / entropy / KL parts per reward-variance bucket at steps 1, N + 1, 2N + 1, ... (0 = off); buckets: how
    # many; bucket_mode: quantile (equal group counts) | fixed_rv (RAGEN's fixed std intervals). docs/diagnostics.md
    gradient_every: int = setting(50, AT_LEAST_0)
    gradient_buckets: int = setting(6, POSITIVE)
    gradient_bucket_mode: str = setting("quantile", choices=("quantile", "fixed_rv"))


@dataclasses.dataclass(frozen=True)
class WarmstartSection(Section):
    """Supervised warm start (behaviour cloning) before RL; not in RAGEN."""

    enabled: bool = False
    # "oracle" (the env's solver plays) | "random" (random valid actions: format only) | a JSONL of chat messages
    source: str = "oracle"
    num_demos: int = setting(2000, POSITIVE)  # oracle episodes (each gives one row per turn, or one in "full")
    steps: int = setting(300, AT_LEAST_0)  # SFT updates (fewer if max_seconds runs out first)
    max_seconds: float = setting(0.0, AT_LEAST_0)  # stop after this much SFT step time (0 = no limit)
    batch_size: int = setting(32, POSITIVE)  # rows per update
    micro_batch_size: int = setting(0, Rule(lambda v: v >= 0, "must be >= 0 (0 = the batch size)"))
    lr: float = setting(1e-3, AT_LEAST_0)
    warmup_steps: int = setting(10, AT_LEAST_0)
    weight_decay: float = setting(0.0, AT_LEAST_0)
    # "fixed": every oracle response thinks reasoning_text; "state": the env describes its state
    # (env.describe_state, e.g. "box below left, target left"), input-dependent thinking; "filler": filler_words
    # random words whatever the input (template collapse on purpose); "state_filler": the state's description then
    # random words (diverse); docs/diagnostics.md calibrates the regimes with these
    reasoning: str = setting("fixed", choices=("fixed", "state", "filler", "state_filler"))
    reasoning_text: str = ""  # text between "<think>" and "</think>" in oracle responses
    filler_words: int = setting(4, AT_LEAST_0)  # random words of "filler" / "state_filler" thinking
    seed: int = 1_000_000  # first demo seed (apart from train and validation seeds) and batch order
    share_prefix: bool = True  # run the prompt prefix all rows share once per micro-batch (same loss)
    val_every: int = setting(0, AT_LEAST_0)  # also validate every N SFT steps (0 = only before and after)


@dataclasses.dataclass(frozen=True)
class LoggingSection(Section):
    """TensorBoard always (workdir/tb); Weights & Biases on request (`pip install wandb`)."""

    wandb: bool = False  # mirror scalars, text, images and the config to a wandb run
    wandb_project: str = "ragen-jax"
    wandb_entity: str = ""  # "" = your default entity
    wandb_mode: str = ""  # "" = wandb's default (WANDB_MODE); "online" | "offline" | "disabled"


@dataclasses.dataclass(frozen=True)
class MeshSection(Section):
    data: int = -1  # -1 = the remaining devices
    fsdp: int = 1
    tensor: int = 1
    sampling_layout: str = "no_fsdp"
    # trainer.schedule=async: each host's first N local devices sample, the rest learn (the mesh above is over
    # them); 0 = both roles on every device (threads)
    rollout_devices: int = setting(0, AT_LEAST_0)


@dataclasses.dataclass(frozen=True)
class DistributedSection(Section):
    """Multi-host: one process per host (env vars JAX_COORDINATOR_ADDRESS etc. override)."""

    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0
    local_device_ids: str = ""
    auto: bool = False
    initialization_timeout: int = 300
