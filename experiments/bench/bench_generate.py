"""Generated tokens/s of ragen_jax's Sampler vs transformers' PyTorch `generate`, on CPU.

Both sides run the same random Hugging Face weights (saved by transformers, loaded into ours with
`ragen_jax.models.load_model`), the same prompts (batch x 128 tokens) and greedy decoding of exactly 64
new tokens (`min_new_tokens` for transformers; no EOS for ours). Compile time and first-call overheads are
excluded by one untimed full-size call per side. Cases: (a) the built-in tiny config at batch 64, (b) Qwen2.5-0.5B's
shapes at batch 8, (c) `prefill-long`: the tiny config at batch 8 with 3072-token prompts and one new token,
i.e. the prefill (its tokens/s counts prompt tokens). The two sides alternate call by call over --repeats
calls and medians are reported, with the 1-minute load average at the start and the CPU other processes used
during the timed calls (`experiments/bench/quiet.py`; a warning when the machine was not quiet), and peak memory:
ours is XLA's compiled bytes of the prefill forward into the KV cache (`memory_analysis`), transformers' the
growth of the peak resident set over one generate call in a fresh subprocess (`experiments/bench/peak_memory.py`: the
peak reset first). `--top-p P` samples instead (temperature 1, nucleus P, no top-k, on both sides: ours a
bisection over the float order, transformers a sort of the vocabulary); the tokens then differ by construction
and are not compared. Prints per-case figures and, on the last line, the ratios ours/theirs.

    python experiments/bench/bench_generate.py [--cases tiny,qwen2.5-0.5b,prefill-long] [--repeats 3] [--top-p 0.9]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from experiments.bench.compute_bound import (  # noqa: E402
    bound_line, decode_step_bytes, forward_flops, prefill_flops, stream_bytes_per_s)
from experiments.bench.peak_memory import peak_growth_bytes  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models import init_cache, load_model, tiny_config  # noqa: E402
from ragen_jax.sampling import Sampler, SamplingConfig  # noqa: E402
from ragen_jax.sampling.turn import model_config_of  # noqa: E402
from ragen_jax.shapes import bucket_length  # noqa: E402
from ragen_jax.sharding.planning import measured_bytes  # noqa: E402

PAD = 0
LENGTHS = {"prefill-long": (3072, 1)}  # case -> (prompt length, new tokens); others: 128 prompt, 64 new


def case_lengths(case: str) -> tuple[int, int]:
    return LENGTHS.get(case, (128, 64))


def hf_config(case: str) -> tuple[transformers.Qwen2Config, int]:
    """(transformers config, batch size) for a benchmark case."""
    if case in ("tiny", "prefill-long"):
        c = tiny_config()
        cfg = transformers.Qwen2Config(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
            num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
            head_dim=c.head_dim, rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
            tie_word_embeddings=c.tie_word_embeddings, max_position_embeddings=c.max_position_embeddings,
        )
        return cfg, 64 if case == "tiny" else 8
    if case == "qwen2.5-0.5b":
        cfg = transformers.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=True, max_position_embeddings=32768,
        )
        return cfg, 8
    raise ValueError(f"unknown case {case!r}; use tiny, qwen2.5-0.5b or prefill-long")


def theirs_runner(model, prompts: np.ndarray, new_tokens: int, top_p: float = 1.0):
    """() -> (seconds, new tokens [B, N]) of one transformers generate call (greedy, or nucleus sampling at
    top_p < 1), after a short warm-up."""
    ids = torch.from_numpy(prompts.astype(np.int64))
    decoding = dict(do_sample=False) if top_p >= 1.0 else dict(do_sample=True, temperature=1.0, top_p=top_p, top_k=0)
    kwargs = dict(attention_mask=torch.ones_like(ids), pad_token_id=PAD, eos_token_id=None, **decoding)
    with torch.inference_mode():
        warm = ids[:, :8]  # a short warm-up: PyTorch compiles nothing, this only starts its thread pools
        model.generate(warm, attention_mask=torch.ones_like(warm), max_new_tokens=2, do_sample=False, pad_token_id=PAD)

    def call() -> tuple[float, np.ndarray]:
        with torch.inference_mode():
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
            return time.perf_counter() - start, out[:, prompts.shape[1]:].numpy()
    return call


def prefill_bytes(graphdef, params, batch: int, bucket: int, cache_size: int, window: int) -> int:
    """XLA's compiled bytes of the prefill the sampler runs: the model writing a [batch, bucket] prompt into a
    [batch, cache_size] KV cache and attending over the first `window` slots (the sampler's own program adds
    sampling the first token)."""
    def prefill(params, cache, tokens):
        positions = jnp.broadcast_to(jnp.arange(bucket, dtype=jnp.int32), (batch, bucket))
        _, cache = nnx.merge(graphdef, params).hidden(tokens, positions, cache=cache, kv_len=window,
                                                      cache_index=jnp.zeros((batch,), jnp.int32))
        return cache
    config = model_config_of(graphdef)
    cache = jax.eval_shape(lambda: init_cache(config, batch, cache_size))
    tokens = jax.ShapeDtypeStruct((batch, bucket), jnp.int32)
    return measured_bytes(jax.jit(prefill, donate_argnums=(1,)).lower(params, cache, tokens).compile())


def ours_runner(graphdef, params, prompts: np.ndarray, new_tokens: int, top_p: float = 1.0):
    """(() -> (seconds, new tokens [B, N]) of one Sampler.generate call, compiled bytes of its prefill, the
    sampler's decode lanes (its default)). The warm-up call compiles."""
    batch, prompt_len = prompts.shape
    sampler = Sampler(graphdef, cache_size=prompt_len + new_tokens, pad_id=PAD, batch_size=batch)
    config = (SamplingConfig(max_new_tokens=new_tokens, greedy=True) if top_p >= 1.0
              else SamplingConfig(max_new_tokens=new_tokens, temperature=1.0, top_p=top_p))
    lens = np.full((batch,), prompt_len, np.int32)
    sampler.generate(params, prompts, lens, jax.random.key(0), config).tokens.block_until_ready()  # compile
    peak = prefill_bytes(graphdef, params, batch, bucket_length(prompt_len), sampler.cache_size,
                         sampler.window_length(prompt_len + new_tokens))

    def call() -> tuple[float, np.ndarray]:
        start = time.perf_counter()
        out = sampler.generate(params, prompts, lens, jax.random.key(0), config)
        out.tokens.block_until_ready()
        return time.perf_counter() - start, np.asarray(out.tokens)
    return call, peak, sampler.lanes


def torch_peak_bytes(folder: str, case: str) -> int:
    """Growth of the peak RSS over one transformers generate call, in a fresh subprocess (see --torch-peak)."""
    out = subprocess.run([sys.executable, __file__, "--torch-peak", folder, "--cases", case], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def torch_peak_main(folder: str, case: str) -> None:
    """Subprocess body: prints the peak-RSS growth in bytes over one generate call of `case`."""
    cfg, batch = hf_config(case)
    prompt_len, new_tokens = case_lengths(case)
    model = transformers.Qwen2ForCausalLM.from_pretrained(folder).eval()
    call = theirs_runner(model, case_prompts(cfg, batch, prompt_len), new_tokens)
    print(peak_growth_bytes(call))


def case_prompts(cfg, batch: int, prompt_len: int) -> np.ndarray:
    return np.random.RandomState(0).randint(1, cfg.vocab_size, (batch, prompt_len)).astype(np.int32)


def run_case(case: str, repeats: int, top_p: float = 1.0) -> float:
    cfg, batch = hf_config(case)
    prompt_len, new_tokens = case_lengths(case)
    torch.manual_seed(0)
    hf_model = transformers.Qwen2ForCausalLM(cfg).eval()
    prompts = case_prompts(cfg, batch, prompt_len)
    with tempfile.TemporaryDirectory() as folder:
        hf_model.save_pretrained(folder)
        theirs_peak = torch_peak_bytes(folder, case)
        ours = load_model(folder)
        graphdef, params = nnx.split(ours)
        del ours
        ours_call, ours_peak, lanes = ours_runner(graphdef, params, prompts, new_tokens, top_p)
    theirs_call = theirs_runner(hf_model, prompts, new_tokens, top_p)
    theirs_call()  # one untimed call at full size, as ours' compiling call: PyTorch's first allocations and page faults
    t_ours, t_theirs = [], []
    with OtherCpu() as other:
        for _ in range(repeats):  # alternate the two sides call by call
            elapsed, ours_tokens = ours_call()
            t_ours.append(elapsed)
            elapsed, theirs_tokens = theirs_call()
            t_theirs.append(elapsed)
    counted = batch * (prompt_len if case in LENGTHS else new_tokens)  # prefill cases count prompt tokens
    ours_tps, theirs_tps = counted / float(np.median(t_ours)), counted / float(np.median(t_theirs))
    agree = (f"greedy tokens identical: {np.mean(ours_tokens[:, :new_tokens] == theirs_tokens):.1%}" if top_p >= 1.0
             else "sampled tokens not compared")
    decoding = "greedy" if top_p >= 1.0 else f"sampled, top-p {top_p}"
    what = "prompt tokens/s (prefill)" if case in LENGTHS else "generated tok/s"
    config = model_config_of(graphdef)
    decode = forward_flops(config, batch * (new_tokens - 1), prompt_len + new_tokens / 2)
    ours_flops = prefill_flops(config, batch, prompt_len, last_layer_all=False) + decode
    theirs_flops = prefill_flops(config, batch, prompt_len) + decode
    print(f"[{case}] batch {batch}, prompt {prompt_len}, {new_tokens} new tokens ({decoding}), medians of {repeats}: "
          f"ours {ours_tps:.1f} ({lanes} decode lane{'s' if lanes > 1 else ''}), transformers {theirs_tps:.1f} "
          f"{what}, ratio {ours_tps / theirs_tps:.2f}x; "
          f"{agree}\n"
          f"[{case}] peak memory: ours {ours_peak / 2**20:.1f} MiB (compiled prefill), transformers "
          f"{theirs_peak / 2**20:.1f} MiB (peak RSS growth over one generate); {other.line()}\n"
          f"[{case}] matmul FLOPs each side performs (prefill + decode; ours skips the last layer's attention and "
          f"MLP for all but each prompt's last token): ours {bound_line(ours_flops, float(np.median(t_ours)))}; "
          f"transformers {bound_line(theirs_flops, float(np.median(t_theirs)))}", flush=True)
    if case not in LENGTHS:
        step_bytes = decode_step_bytes(config, batch, prompt_len + new_tokens / 2)
        bound_tps = batch * stream_bytes_per_s() / step_bytes
        print(f"[{case}] memory bound of decoding: a step reads {step_bytes / 2**20:.0f} MiB (weights and cache, "
              f"float32) at the measured {stream_bytes_per_s() / 1e9:.1f} GB/s: at most {bound_tps:.1f} tok/s; "
              f"the whole call (prefill included) reaches ours {ours_tps / bound_tps:.1%}, transformers "
              f"{theirs_tps / bound_tps:.1%} of it", flush=True)
    return ours_tps / theirs_tps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny,qwen2.5-0.5b,prefill-long")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side (interleaved; medians)")
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="< 1: both sides sample with this nucleus (temperature 1) instead of greedy decoding")
    parser.add_argument("--torch-peak", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torch_peak:
        return torch_peak_main(args.torch_peak, args.cases)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, {os.cpu_count()} CPUs; "
          f"at the start: {load_line()}", flush=True)
    ratios = {case: run_case(case, args.repeats, args.top_p) for case in args.cases.split(",")}
    print("ratios ours/transformers: " + ", ".join(f"{c}={r:.2f}x" for c, r in ratios.items()))


if __name__ == "__main__":
    main()
