"""Training throughput: our jitted actor update vs the same PPO update in PyTorch + transformers, on CPU.

Ours: `make_step_fns(...)["actor_update"]` (forward, backward, global-norm clip, AdamW; micro-batch
accumulation in a scan; chunked log-probs at the trained positions only, as the trainer computes them;
`--score-all` applies the vocabulary head at every position as PyTorch does). Theirs: transformers'
Qwen2ForCausalLM loaded from our exported weights (`save_pretrained`), the same PPO-clip (clip-higher,
dual-clip) token-mean loss with the entropy bonus, the same micro-batches (loss numerators / mini-batch
token count, backward per micro-batch), `clip_grad_norm_` and `torch.optim.AdamW`. Same config, weights and
batch; the first update's loss and grad norm are printed for both as a check that they compute the same thing.

    python experiments/bench/bench_train.py [--sizes tiny,medium,long,tiny-384] [--steps 3] [--remat none]

Tokens/s counts every position of the [B, T] mini-batch; ours and PyTorch alternate update by update and
times are medians of --steps interleaved repeats. `long` is RAGEN's row length (mini-batch 8 x 3584,
micro-batch 4); `tiny-384` the tiny model at one of the trainer's length buckets that is not a multiple of 256.
Peak memory: ours is XLA's compiled bytes of the update (arguments + outputs - aliased + temporaries,
`memory_analysis`); PyTorch's is the growth of the peak resident set (reset first: peak_memory.py) over one update
in a fresh subprocess (so it counts gradients, AdamW state and activations, not the loaded
weights). The 1-minute load average at the start and the CPU other processes used during the timed updates are
printed (`experiments/bench/quiet.py`), with a warning when the machine was not quiet. Last line: ours/PyTorch per size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.compute_bound import bound_line, forward_flops  # noqa: E402
from experiments.bench.peak_memory import peak_growth_bytes  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.algos.presets import get_preset  # noqa: E402
from ragen_jax.models import CausalLM, save_pretrained  # noqa: E402
from ragen_jax.models.tiny import tiny_config  # noqa: E402
from ragen_jax.sharding.planning import measured_bytes  # noqa: E402
from ragen_jax.optim import make_optimizer  # noqa: E402
from ragen_jax.trainer.setup import split_model  # noqa: E402
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.trainer.steps import make_step_fns, scored_positions  # noqa: E402

# name -> (model overrides of tiny_config, mini-batch rows, sequence length, micro-batch rows)
SIZES = {
    "tiny": (dict(), 32, 256, 8),
    "medium": (dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_layers=8, num_heads=8,
                    num_kv_heads=2, head_dim=64), 8, 512, 4),
    "long": (dict(), 8, 3584, 4),
    "tiny-384": (dict(), 32, 384, 8),  # the trainer's 384-token length bucket (shapes.ROW_BUCKETS)
}
OPTIM = dict(lr=1e-6, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, schedule="constant",
             grad_clip=1.0)


def algo_settings(chunk: int) -> AlgoSettings:
    p = get_preset("ppo")
    return AlgoSettings(
        adv_estimator=p["adv_estimator"], policy_loss="vanilla", value_loss=p["value_loss"],
        loss_agg_mode="token-mean", gamma=p["gamma"], lam=p["lam"], high_level_gamma=p["high_level_gamma"],
        norm_adv_by_std_in_grpo=True, clip_ratio_low=p["clip_ratio_low"], clip_ratio_high=p["clip_ratio_high"],
        clip_ratio_c=p["clip_ratio_c"], cliprange_value=p["cliprange_value"], entropy_coeff=p["entropy_coeff"],
        use_kl_loss=False, kl_loss_coef=0.0, kl_loss_type="kl", tis_cap=None, temperature=1.0,
        logprob_chunk=chunk)


def synthetic_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Right-padded rows (lengths in [T/2, T]); the second half of each row is the trained response."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(length // 2, length + 1, size=rows)
    pos = np.arange(length)[None, :]
    attention = pos < lens[:, None]
    loss_mask = (attention & (pos >= lens[:, None] // 2)).astype(np.float32)
    return dict(
        tokens=rng.integers(0, vocab, size=(rows, length)).astype(np.int32),
        attention_mask=attention,
        loss_mask=loss_mask,
        # old log-probs around a random model's (~ -log V) so ratios spread over the clip range
        old_logprobs=(-np.log(vocab) + 0.3 * rng.standard_normal((rows, length))).astype(np.float32) * loss_mask,
        advantages=rng.standard_normal((rows, length)).astype(np.float32) * loss_mask,
    )


# ---------------------------------------------------------------------------------------------- ours
def ours_runner(model: CausalLM, batch: dict, micro: int, chunk: int, score_all: bool = False):
    """(step() -> first metrics, compiled peak bytes of the update). As the trainer does, the update applies the
    vocabulary head only at trained positions (`scored_positions`; the same loss and gradients), unless
    `score_all` (every position, as the PyTorch side does)."""
    split = split_model(model, lora=False)
    tx, _ = make_optimizer(OPTIM, 1000)
    fns = make_step_fns(split.graphdef, None, algo_settings(chunk), tx, None, micro)
    update = fns["actor_update"]
    state = {"params": jax.tree.map(jnp.copy, split.trainable), "frozen": split.frozen}
    state["opt"] = tx.init(state["params"])
    mb = dict(jax.tree.map(jnp.asarray, batch))
    mb["sample_logprobs"] = mb["old_logprobs"]
    if not score_all:
        mb["positions"] = jnp.asarray(scored_positions(batch["loss_mask"]))
    update = update.lower(state["params"], state["opt"], state["frozen"], mb).compile()

    def step() -> dict:
        state["params"], state["opt"], metrics = update(state["params"], state["opt"], state["frozen"], mb)
        jax.block_until_ready(state["params"])
        return {k: float(metrics[k]) for k in ("loss", "grad_norm")}
    return step, measured_bytes(update)


# ------------------------------------------------------------------------------------------- PyTorch
def torch_ppo_token_loss(logits, tokens, old_lp, adv, mask, *, low: float, high: float, c: float,
                         entropy_coeff: float):
    """Sum over masked tokens of the PPO-clip (dual-clip) loss minus entropy_coeff * entropy."""
    logits = logits[:, :-1].float()
    targets = tokens[:, 1:]
    log_z = torch.logsumexp(logits, dim=-1)
    lp = torch.gather(logits, -1, targets[..., None])[..., 0] - log_z
    entropy = log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    old_lp, adv, mask = old_lp[:, 1:], adv[:, 1:], mask[:, 1:]
    ratio = torch.exp(torch.clamp(lp - old_lp, -20.0, 20.0))
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high))
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * c), pg)
    return ((pg - entropy_coeff * entropy) * mask).sum()


def torch_runner(folder: str, batch: dict, micro: int):
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.train()
    algo = algo_settings(0)
    opt = torch.optim.AdamW(model.parameters(), lr=OPTIM["lr"], betas=(OPTIM["b1"], OPTIM["b2"]),
                            eps=OPTIM["eps"], weight_decay=OPTIM["weight_decay"])
    t = {k: torch.from_numpy(np.asarray(v)) for k, v in batch.items()}
    t["tokens"] = t["tokens"].long()
    t["attention_mask"] = t["attention_mask"].long()
    denom = float(t["loss_mask"][:, 1:].sum().clamp(min=1e-8))
    rows = t["tokens"].shape[0]

    def step() -> dict:
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for s in range(0, rows, micro):
            sl = slice(s, s + micro)
            logits = model(input_ids=t["tokens"][sl], attention_mask=t["attention_mask"][sl]).logits
            loss = torch_ppo_token_loss(logits, t["tokens"][sl], t["old_logprobs"][sl], t["advantages"][sl],
                                        t["loss_mask"][sl], low=algo.clip_ratio_low, high=algo.clip_ratio_high,
                                        c=algo.clip_ratio_c, entropy_coeff=algo.entropy_coeff) / denom
            loss.backward()
            total += float(loss.detach())
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM["grad_clip"])
        opt.step()
        return {"loss": total, "grad_norm": float(norm)}
    return step


# ------------------------------------------------------------------------------------------------
def time_interleaved(ours, theirs, warmup: int, repeats: int) -> tuple[list[float], list[float], dict, dict]:
    """Per-update times of ours and theirs, alternating update by update after `warmup` untimed updates
    each, and both sides' first-update metrics."""
    first_ours, first_theirs = ours(), theirs()
    for _ in range(warmup - 1):
        ours(), theirs()
    t_ours, t_theirs = [], []
    for _ in range(repeats):
        for step, times in ((ours, t_ours), (theirs, t_theirs)):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return t_ours, t_theirs, first_ours, first_theirs


def size_setup(name: str, remat: str) -> tuple[CausalLM, dict, int]:
    """(model with seeded weights, synthetic batch, micro-batch rows) of a benchmark size."""
    overrides, rows, length, micro = SIZES[name]
    if remat != "none":
        overrides = dict(overrides, remat=remat)
    model = CausalLM(tiny_config(**overrides), rngs=nnx.Rngs(0))
    return model, synthetic_batch(rows, length, model.config.vocab_size), micro


def torch_peak_bytes(folder: str, name: str, remat: str) -> int:
    """Growth of the peak RSS over one PyTorch update, measured in a fresh subprocess (see --torch-peak)."""
    out = subprocess.run([sys.executable, __file__, "--torch-peak", folder, "--sizes", name, "--remat", remat],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def bench_size(name: str, args) -> float:
    model, batch, micro = size_setup(name, args.remat)
    cfg = model.config
    rows, length = batch["tokens"].shape
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    tokens = rows * length
    print(f"\n{name}: {n_params / 1e6:.1f}M params (hidden {cfg.hidden_size}, {cfg.num_layers} layers, "
          f"vocab {cfg.vocab_size}), mini-batch {rows} x {length}, micro-batch {micro}, remat {cfg.remat}, "
          f"logprob chunk {args.chunk}, ours scores {'every position' if args.score_all else 'trained positions'}",
          flush=True)
    with tempfile.TemporaryDirectory() as folder:
        save_pretrained(model, folder)
        torch_peak = torch_peak_bytes(folder, name, args.remat)
        theirs = torch_runner(folder, batch, micro)
    ours, ours_peak = ours_runner(model, batch, micro, args.chunk, args.score_all)
    del model
    with OtherCpu() as other:
        t_ours, t_theirs, first_ours, first_theirs = time_interleaved(ours, theirs, args.warmup, args.steps)
    print(f"  {other.line()} (warm-up updates included)")
    print(f"  first update  ours loss {first_ours['loss']:+.6f} grad_norm {first_ours['grad_norm']:.6f} | "
          f"torch loss {first_theirs['loss']:+.6f} grad_norm {first_theirs['grad_norm']:.6f}")
    m_ours, m_theirs = float(np.median(t_ours)), float(np.median(t_theirs))
    ratio = m_theirs / m_ours
    print(f"  ours  {m_ours:8.3f} s/update (median of {len(t_ours)}: {', '.join(f'{t:.2f}' for t in t_ours)})  "
          f"{tokens / m_ours:10.0f} tokens/s  peak {ours_peak / 2**20:8.1f} MiB (compiled update)")
    print(f"  torch {m_theirs:8.3f} s/update (median of {len(t_theirs)}: {', '.join(f'{t:.2f}' for t in t_theirs)})  "
          f"{tokens / m_theirs:10.0f} tokens/s  peak {torch_peak / 2**20:8.1f} MiB (peak RSS growth over one update)"
          f"  (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    flops = 3.0 * forward_flops(cfg, tokens, (length + 1) / 2)  # forward + backward (2x) over every position
    print(f"  matmul FLOPs of a full-sequence update: ours {bound_line(flops, m_ours)}; "
          f"torch {bound_line(flops, m_theirs)}")
    print(f"  ratio ours/torch tokens/s: {ratio:.2f}", flush=True)
    return ratio


def torch_peak_main(folder: str, name: str, remat: str) -> None:
    """Subprocess body: prints the peak-RSS growth in bytes over one PyTorch update of size `name`."""
    _, batch, micro = size_setup(name, remat)
    step = torch_runner(folder, batch, micro)
    print(peak_growth_bytes(step))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="tiny,medium")
    parser.add_argument("--warmup", type=int, default=1, help="untimed updates first (compilation for ours)")
    parser.add_argument("--steps", type=int, default=3, help="timed updates per side (interleaved; medians)")
    parser.add_argument("--chunk", type=int, default=256, help="trainer.logprob_chunk")
    parser.add_argument("--score-all", action="store_true",
                        help="ours applies the vocabulary head at every position "
                             "(default: trained ones, as the trainer)")
    parser.add_argument("--remat", default="none", choices=("none", "full", "dots"))
    parser.add_argument("--torch-peak", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torch_peak:
        return torch_peak_main(args.torch_peak, args.sizes, args.remat)
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), torch {torch.__version__}, float32; "
          f"at the start: {load_line()}", flush=True)
    ratios = {name: bench_size(name, args) for name in args.sizes.split(",")}
    print("ratio ours/torch tokens/s: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
