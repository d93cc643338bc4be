"""GPU benchmark with random weights in Qwen2.5-0.5B/1.5B/3B shapes (bf16): decode tokens/s against the
HBM-bandwidth bound, and training-step model FLOPs utilisation (MFU) of the trainer's actor update.

    python experiments/bench/bench_gpu.py                      # all three sizes, ~5 minutes on one H100/H200
    python experiments/bench/bench_gpu.py --sizes 0.5b --batch 64
    python experiments/bench/bench_gpu.py --smoke              # tiny model on CPU: checks the script runs

Decode bound: every step reads all weights and the live KV cache once, so
tokens/s <= batch * HBM_bandwidth / (param_bytes + mean KV bytes). MFU = (6 N + 12 L H hd T) flops per
trained token / step time / the chip's dense bf16 peak. Sizes are skipped once --budget-s is spent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ragen_jax.models import CausalLM, ModelConfig  # noqa: E402
from ragen_jax.models.tiny import tiny_config  # noqa: E402
from ragen_jax.sampling import SamplingConfig, Sampler  # noqa: E402
from ragen_jax.sharding.memory import estimate_memory  # noqa: E402
from ragen_jax.sharding.planning import measured_bytes  # noqa: E402
from ragen_jax.optim import make_optimizer  # noqa: E402
from ragen_jax.trainer.setup import split_model  # noqa: E402
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.trainer.steps import make_step_fns  # noqa: E402

QWEN25 = {  # (hidden, intermediate, layers, heads, kv_heads, head_dim)
    "0.5b": (896, 4864, 24, 14, 2, 64),
    "1.5b": (1536, 8960, 28, 12, 2, 128),
    "3b": (2048, 11008, 36, 16, 2, 128),
}
# device_kind substring -> (HBM GB/s, dense bf16 TFLOP/s) from the vendors' datasheets
CHIPS = {"H200": (4800, 989), "H100": (3350, 989), "A100": (2039, 312), "L40S": (864, 362), "L4": (300, 121),
         "A10": (600, 125), "TPU v5p": (2765, 459), "TPU v5 lite": (819, 197), "TPU v4": (1200, 275)}


def qwen25_config(size: str, dtype: str) -> ModelConfig:
    d, i, layers, h, kv, hd = QWEN25[size]
    return ModelConfig(architecture="qwen2", vocab_size=151936, hidden_size=d, intermediate_size=i, num_layers=layers,
                       num_heads=h, num_kv_heads=kv, head_dim=hd, rope_theta=1e6, tie_word_embeddings=True,
                       attention_bias=True, param_dtype=dtype, dtype=dtype)


def chip_specs(args) -> tuple[float | None, float | None]:
    kind = jax.devices()[0].device_kind
    hbm, peak = next((v for k, v in CHIPS.items() if k.lower() in kind.lower()), (None, None))
    return args.hbm_gbps or hbm, args.peak_tflops or peak


def n_params(state) -> int:
    return int(sum(x.size for x in jax.tree.leaves(state)))


def bench_decode(graphdef, params, config: ModelConfig, batch: int, prompt: int, new: int, cache: int = 0,
                 kv_window: bool = True) -> dict:
    """Best-of-3 decode tokens/s (prefill excluded); `cache` slots (default prompt + new) per row."""
    sampler = Sampler(graphdef, cache_size=cache or prompt + new, pad_id=0, batch_size=batch, kv_window=kv_window)
    tokens = np.random.default_rng(0).integers(1, config.vocab_size, size=(batch, prompt)).astype(np.int32)
    lens = np.full((batch,), prompt, np.int32)
    sc = SamplingConfig(max_new_tokens=new, greedy=True)
    one = SamplingConfig(max_new_tokens=1, greedy=True)

    def timed(config: SamplingConfig, repeats: int = 3) -> tuple[float, object]:
        out = sampler.generate(params, tokens, lens, jax.random.PRNGKey(0), config)  # compile
        jax.block_until_ready(out.tokens)
        best = float("inf")
        for r in range(repeats):
            t0 = time.perf_counter()
            out = sampler.generate(params, tokens, lens, jax.random.PRNGKey(r + 1), config)
            jax.block_until_ready(out.tokens)
            best = min(best, time.perf_counter() - t0)
        return best, out

    total, out = timed(sc)
    prefill, _ = timed(one)  # prefill + the first token: the difference is new - 1 decode steps
    decode = total - prefill
    generated = int(np.asarray(out.lengths).sum())
    rate = (generated - batch) / decode if decode > 0 else float("nan")  # nan: too short to time
    return dict(decode_s=decode, prefill_s=prefill, decode_tokens_per_s=rate, tokens=np.asarray(out.tokens))


def decode_bound(config: ModelConfig, param_bytes: int, batch: int, prompt: int, new: int, hbm_gbps: float) -> float:
    """Tokens/s if every decode step only streamed the weights and the mean live KV cache from HBM."""
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * config.jnp_dtype.itemsize
    mean_kv = batch * (prompt + new / 2) * kv_per_token
    return batch * hbm_gbps * 1e9 / (param_bytes + mean_kv)


def bench_train(graphdef, trainable, frozen, config: ModelConfig, micro: int, seq: int) -> dict:
    algo = AlgoSettings(adv_estimator="grpo", policy_loss="vanilla", value_loss="clipped", loss_agg_mode="token-mean",
                        gamma=1.0, lam=1.0, high_level_gamma=0.95, norm_adv_by_std_in_grpo=True, clip_ratio_low=0.2,
                        clip_ratio_high=0.28, clip_ratio_c=3.0, cliprange_value=0.5, entropy_coeff=0.0,
                        use_kl_loss=False, kl_loss_coef=0.0, kl_loss_type="kl", tis_cap=None, temperature=1.0,
                        logprob_chunk=256)
    tx, _ = make_optimizer(dict(lr=1e-6, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0,
                                schedule="constant", grad_clip=1.0, state_dtype="float32"), 1000)
    opt = tx.init(trainable)
    fns = make_step_fns(graphdef, None, algo, tx, None, micro)
    rng = np.random.default_rng(0)
    rows = 2 * micro
    ones = np.ones((rows, seq), np.float32)
    batch = dict(tokens=rng.integers(1, config.vocab_size, (rows, seq)).astype(np.int32),
                 attention_mask=ones.astype(np.int32), loss_mask=ones, old_logprobs=-ones, sample_logprobs=-ones,
                 advantages=rng.normal(size=(rows, seq)).astype(np.float32))
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    t0 = time.perf_counter()
    update = fns["actor_update"].lower(trainable, opt, frozen, batch).compile()
    compile_s = time.perf_counter() - t0
    xla_bytes = measured_bytes(update)
    trainable, opt, m = update(trainable, opt, frozen, batch)  # warm-up
    jax.block_until_ready(m["loss"])
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        trainable, opt, m = update(trainable, opt, frozen, batch)
        jax.block_until_ready(m["loss"])
        times.append(time.perf_counter() - t0)
    step = float(np.median(times))
    n = n_params(trainable) + n_params(frozen)
    embed = config.vocab_size * config.hidden_size
    tokens = rows * seq
    attention = 12 * config.num_layers * config.num_heads * config.head_dim * seq * tokens
    flops = 6 * (n - embed) * tokens + 6 * embed * tokens + attention
    return dict(train_compile_s=compile_s, train_step_s=step, train_tokens_per_s=tokens / step,
                train_tflops=flops / step / 1e12, train_xla_gib=xla_bytes / 2**30)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="0.5b,1.5b,3b")
    p.add_argument("--batch", type=int, default=32, help="decode batch (rows)")
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--new", type=int, default=256, help="decode steps")
    p.add_argument("--micro", type=int, default=4, help="train micro-batch rows (2 micro-batches per step)")
    p.add_argument("--seq", type=int, default=1024, help="train sequence length")
    p.add_argument("--remat", default="dots", choices=("none", "dots", "full"))
    p.add_argument("--hbm-gbps", type=float, default=None, help="HBM bandwidth; default from the device kind")
    p.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak; default from the device kind")
    p.add_argument("--budget-s", type=float, default=420, help="skip remaining sizes after this many seconds")
    p.add_argument("--smoke", action="store_true", help="tiny float32 model, tiny shapes (runs on CPU)")
    args = p.parse_args(argv)
    hbm, peak = chip_specs(args)
    print(f"device: {jax.devices()[0].device_kind} x{jax.device_count()}  HBM {hbm} GB/s  peak {peak} TFLOP/s",
          flush=True)
    if args.smoke:
        hbm, peak = hbm or 50.0, peak or 1.0  # nominal CPU figures so the smoke run exercises every formula
        sizes = {"tiny": tiny_config(remat=args.remat)}
        args.batch, args.prompt, args.new, args.micro, args.seq = 4, 16, 8, 2, 32
    else:
        sizes = {s: qwen25_config(s, "bfloat16").replace(remat=args.remat) for s in args.sizes.split(",")}
    t_start, results = time.perf_counter(), {}
    for name, config in sizes.items():
        if time.perf_counter() - t_start > args.budget_s:
            print(f"{name}: skipped (budget of {args.budget_s:.0f}s spent)", flush=True)
            continue
        # decode with remat off (the sampler's while_loop cannot trace nnx.remat; see docs/scaling.md)
        graphdef, state = nnx.split(CausalLM(config.replace(remat="none"), rngs=nnx.Rngs(0)))
        param_bytes = int(sum(x.nbytes for x in jax.tree.leaves(state)))
        plan = estimate_memory(config, micro_batch_size=args.micro, mini_batch_size=2 * args.micro, seq_len=args.seq,
                               rollout_batch_size=args.batch, cache_len=args.prompt + args.new,
                               optimizer_dtype="float32", sampling_layout="training")
        r = dict(params=n_params(state), param_gib=param_bytes / 2**30,
                 planned_train_gib=plan.training_peak / 2**30)
        decode = bench_decode(graphdef, state, config.replace(remat="none"), args.batch, args.prompt, args.new)
        decode.pop("tokens")
        r.update(decode)
        if hbm:
            r["decode_bound_tokens_per_s"] = decode_bound(config, param_bytes, args.batch, args.prompt, args.new, hbm)
            r["decode_fraction_of_bound"] = r["decode_tokens_per_s"] / r["decode_bound_tokens_per_s"]
        train_graph = nnx.graphdef(nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0))))
        split = split_model(nnx.merge(train_graph, state), False)
        r.update(bench_train(split.graphdef, split.trainable, split.frozen, config, args.micro, args.seq))
        r["planned_over_xla"] = r["planned_train_gib"] / r["train_xla_gib"]
        if peak:
            r["mfu"] = r["train_tflops"] / peak
        results[name] = r
        print(name, json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    print(f"total {time.perf_counter() - t_start:.1f}s", flush=True)
    return results


if __name__ == "__main__":
    main()
