"""experiments/bench/bench_gpu.py runs end to end on CPU with --smoke (the GPU numbers need a GPU machine) and its
figures agree with the times and token counts it measured; bench_kv_window.py compares windowed and
full-cache decoding on the same tokens."""

import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments", "bench"))

# --smoke shapes (bench_gpu.main): decode batch 4, prompt 16, 8 new tokens; train 2 micro-batches of 2 rows x 32
BATCH, PROMPT, NEW, ROWS, SEQ = 4, 16, 8, 4, 32
NOMINAL_HBM_GBPS, NOMINAL_PEAK_TFLOPS = 50.0, 1.0  # what --smoke assumes on a CPU


def _tiny_param_count(c) -> int:
    """Parameters of a tied-embedding Qwen2 from its config: embedding, per layer q/k/v (with biases), o,
    gate/up/down and two norms, and the final norm."""
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    attention = c.hidden_size * (q + 2 * kv) + (q + 2 * kv) + q * c.hidden_size
    layer = attention + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
    return c.vocab_size * c.hidden_size + c.num_layers * layer + c.hidden_size


@pytest.mark.slow
def test_bench_gpu_smoke_figures_follow_from_its_measurements():
    from bench_gpu import main
    from ragen_jax.models.tiny import tiny_config

    r = main(["--smoke"])["tiny"]
    assert set(r) == {"params", "param_gib", "planned_train_gib", "decode_s", "prefill_s", "decode_tokens_per_s",
                      "decode_bound_tokens_per_s", "decode_fraction_of_bound", "train_compile_s", "train_step_s",
                      "train_tokens_per_s", "train_tflops", "train_xla_gib", "planned_over_xla", "mfu"}
    timed_decode = {"decode_s", "decode_tokens_per_s", "decode_fraction_of_bound"}  # see below
    assert all(math.isfinite(v) and v > 0 for k, v in r.items() if k not in timed_decode), r
    c = tiny_config()
    assert r["params"] == _tiny_param_count(c)
    assert r["param_gib"] == pytest.approx(r["params"] * 4 / 2**30)  # float32 weights
    # decode: greedy rows never stop early; the first token of each row is timed with the prefill.
    # decode_s = best total - best prefill: a busy machine can make it <= 0, which is reported as nan.
    if r["decode_s"] > 0:
        assert r["decode_tokens_per_s"] * r["decode_s"] == pytest.approx(BATCH * (NEW - 1))
    else:
        assert math.isnan(r["decode_tokens_per_s"]), r
    kv_bytes_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    bound = BATCH * NOMINAL_HBM_GBPS * 1e9 / (r["params"] * 4 + BATCH * (PROMPT + NEW / 2) * kv_bytes_per_token)
    assert r["decode_bound_tokens_per_s"] == pytest.approx(bound)
    assert r["decode_fraction_of_bound"] == pytest.approx(r["decode_tokens_per_s"] / bound, nan_ok=True)
    # train: one step trains ROWS x SEQ tokens at 6 N + 12 L H hd T flops each
    tokens = ROWS * SEQ
    assert r["train_tokens_per_s"] * r["train_step_s"] == pytest.approx(tokens)
    flops = (6 * r["params"] + 12 * c.num_layers * c.num_heads * c.head_dim * SEQ) * tokens
    assert r["train_tflops"] * 1e12 * r["train_step_s"] == pytest.approx(flops)
    assert r["mfu"] == pytest.approx(r["train_tflops"] / NOMINAL_PEAK_TFLOPS)
    # the memory planner's training peak within a factor 2 of what XLA allocates (0.83 measured on CPU)
    assert r["planned_over_xla"] == pytest.approx(r["planned_train_gib"] / r["train_xla_gib"])
    assert 0.5 < r["planned_over_xla"] < 2.0


@pytest.mark.slow
def test_bench_kv_window_reports_both_and_the_same_tokens():
    from bench_kv_window import main

    batch, new = 2, 64
    r = main(["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
              "--vocab", "256", "--batch", str(batch), "--prompt", "20", "--new", str(new), "--cache", "600"])
    assert r["same_tokens"]
    rates = r["rates"]
    assert set(rates) == {"windowed", "every slot (baseline)"}
    for name, rate in rates.items():  # decode = median call - median 1-token call: a busy machine can make it <= 0
        assert rate > 0 or math.isnan(rate), (name, rate)  # NaN: reported as too short to time
    assert r["ratio"] == pytest.approx(rates["windowed"] / rates["every slot (baseline)"], nan_ok=True)
