"""Generated tokens/s of ragen_jax's Sampler vs transformers' PyTorch `generate`, on CPU.

Both sides run the same random Hugging Face weights (saved by transformers, loaded into ours with
`ragen_jax.models.load_model`), the same prompts (batch x 128 tokens) and greedy decoding of exactly 64
new tokens (`min_new_tokens` for transformers; no EOS for ours). Compile time and first-call overheads are
excluded by one warm-up call per side. Cases: (a) the built-in tiny config at batch 64, (b) Qwen2.5-0.5B's
shapes at batch 8. Prints per-case figures and, on the last line, the ratios ours/theirs.

    python experiments/bench_generate.py [--cases tiny,qwen2.5-0.5b] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from ragen_jax.models import load_model, tiny_config  # noqa: E402
from ragen_jax.sampling import Sampler, SamplingConfig  # noqa: E402

PROMPT_LEN, NEW_TOKENS, PAD = 128, 64, 0


def hf_config(case: str) -> tuple[transformers.Qwen2Config, int]:
    """(transformers config, batch size) for a benchmark case."""
    if case == "tiny":
        c = tiny_config()
        cfg = transformers.Qwen2Config(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
            num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
            head_dim=c.head_dim, rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
            tie_word_embeddings=c.tie_word_embeddings, max_position_embeddings=c.max_position_embeddings,
        )
        return cfg, 64
    if case == "qwen2.5-0.5b":
        cfg = transformers.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=True, max_position_embeddings=32768,
        )
        return cfg, 8
    raise ValueError(f"unknown case {case!r}; use tiny or qwen2.5-0.5b")


def time_theirs(model, prompts: np.ndarray, repeats: int) -> tuple[float, np.ndarray]:
    """Best tokens/s of transformers' greedy generate over `repeats` timed calls, and its new tokens."""
    ids = torch.from_numpy(prompts.astype(np.int64))
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=PAD, eos_token_id=None)
    with torch.inference_mode():
        warm = ids[:, :8]  # a short warm-up: PyTorch compiles nothing, this only starts its thread pools
        model.generate(warm, attention_mask=torch.ones_like(warm), max_new_tokens=2, do_sample=False, pad_token_id=PAD)
        best, out = 0.0, None
        for _ in range(repeats):
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **kwargs)
            elapsed = time.perf_counter() - start
            new = out[:, PROMPT_LEN:].numpy()
            best = max(best, new.size / elapsed)
    return best, new


def time_ours(graphdef, params, prompts: np.ndarray, repeats: int) -> tuple[float, np.ndarray]:
    """Best tokens/s of our Sampler (warm-up call compiles) and its new tokens."""
    batch = prompts.shape[0]
    sampler = Sampler(graphdef, cache_size=PROMPT_LEN + NEW_TOKENS, pad_id=PAD, batch_size=batch)
    config = SamplingConfig(max_new_tokens=NEW_TOKENS, greedy=True)
    lens = np.full((batch,), PROMPT_LEN, np.int32)
    sampler.generate(params, prompts, lens, jax.random.key(0), config).tokens.block_until_ready()  # compile
    best, out = 0.0, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = sampler.generate(params, prompts, lens, jax.random.key(0), config)
        out.tokens.block_until_ready()
        elapsed = time.perf_counter() - start
        best = max(best, int(np.asarray(out.lengths).sum()) / elapsed)
    return best, np.asarray(out.tokens)


def run_case(case: str, repeats: int) -> float:
    cfg, batch = hf_config(case)
    torch.manual_seed(0)
    hf_model = transformers.Qwen2ForCausalLM(cfg).eval()
    prompts = np.random.RandomState(0).randint(1, cfg.vocab_size, (batch, PROMPT_LEN)).astype(np.int32)
    with tempfile.TemporaryDirectory() as folder:
        hf_model.save_pretrained(folder)
        ours = load_model(folder)
        graphdef, params = nnx.split(ours)
        del ours
        ours_tps, ours_tokens = time_ours(graphdef, params, prompts, repeats)
    del params
    theirs_tps, theirs_tokens = time_theirs(hf_model, prompts, repeats)
    agree = float(np.mean(ours_tokens == theirs_tokens))
    print(f"[{case}] batch {batch}, prompt {PROMPT_LEN}, {NEW_TOKENS} new tokens (greedy): "
          f"ours {ours_tps:.1f} tok/s, transformers {theirs_tps:.1f} tok/s, ratio {ours_tps / theirs_tps:.2f}x; "
          f"greedy tokens identical: {agree:.1%}", flush=True)
    return ours_tps / theirs_tps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny,qwen2.5-0.5b")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per side (best is kept)")
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, {os.cpu_count()} CPUs")
    ratios = {case: run_case(case, args.repeats) for case in args.cases.split(",")}
    print("ratios ours/transformers: " + ", ".join(f"{c}={r:.2f}x" for c, r in ratios.items()))


if __name__ == "__main__":
    main()
