"""The benchmarks' FLOP and byte counts: what each side of a prefill performs, what a decode step reads."""

from experiments.bench.compute_bound import decode_step_bytes, forward_flops, layer_flops, prefill_flops
from ragen_jax.models import tiny_config


def test_prefill_counts_logits_at_the_last_token_only_and_the_kept_last_layer():
    cfg = tiny_config()  # hidden 128, intermediate 384, 4 heads, 2 kv heads of 32, vocab 1119, 2 layers
    per_layer = 2.0 * (128 * 128 + 2 * 128 * 64 + 128 * 128 + 3 * 128 * 384) + 4.0 * 4 * 32 * 5.0
    assert layer_flops(cfg, 5.0) == per_layer
    assert layer_flops(cfg, 5.0, queries=False) == 2.0 * 2 * 128 * 64
    head = 2.0 * 1119 * 128
    assert forward_flops(cfg, 3, 5.0) == 3 * (2 * per_layer + head)
    full = prefill_flops(cfg, 2, 9)  # 2 rows of 9 tokens, attending over 5 keys on average
    assert full == 18 * 2 * per_layer + 2 * head
    kept = prefill_flops(cfg, 2, 9, last_layer_all=False)  # the last layer's queries run for 1 token per row
    assert kept == 18 * per_layer + 2 * per_layer + 16 * 2.0 * 2 * 128 * 64 + 2 * head


def test_a_decode_step_reads_every_weight_once_and_the_cache():
    cfg = tiny_config()
    weights = 2 * (128 * 128 + 2 * 128 * 64 + 128 * 128 + 3 * 128 * 384) + 1119 * 128
    cache = 8 * 2 * 2 * 64 * 100.0  # rows x layers x (k, v) x kv width x slots read
    assert decode_step_bytes(cfg, 8, 100.0) == 4 * (weights + cache)
    assert decode_step_bytes(cfg, 8, 100.0, dtype_bytes=2) == 2 * (weights + cache)
