"""One attention call: ragen_jax's blockwise causal attention vs PyTorch's scaled_dot_product_attention, on CPU.

The kernel alone, without the model around it: the same random q [B, T, H, hd] and k/v [B, T, K, hd] (grouped
query heads) on both sides, causal, no padding. Ours is `ragen_jax.models.attention.blockwise_attention` under
`jax.jit` (the path training, scoring and prefill take on a CPU); theirs `torch.nn.functional.
scaled_dot_product_attention(is_causal=True, enable_gqa=True)` (its fused flash kernel on CPU). With --backward
both sides also take the gradients of q, k and v for a fixed output cotangent. The two sides alternate call by
call over --repeats calls after one untimed call each; medians are printed with the load average, the CPU other
processes used while timing (`experiments/bench/quiet.py`), the largest differences of the output (and with --backward
of dq, dk, dv), each side's attention matmul FLOP/s against the measured GEMM bound, and the ratio.

    python experiments/bench/bench_attention.py [--batch 8] [--length 3072] [--heads 4] [--kv-heads 2] [--head-dim 32]
        [--backward] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from experiments.bench.compute_bound import bound_line  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models.attention import blockwise_attention  # noqa: E402


def inputs(batch: int, length: int, heads: int, kv_heads: int, head_dim: int):
    """(q [B, T, H, hd], k, v [B, T, K, hd], output cotangent [B, T, H, hd]) float32, seeded."""
    rng = np.random.default_rng(0)
    shape_q, shape_kv = (batch, length, heads, head_dim), (batch, length, kv_heads, head_dim)
    return (rng.standard_normal(shape_q, np.float32), rng.standard_normal(shape_kv, np.float32),
            rng.standard_normal(shape_kv, np.float32), rng.standard_normal(shape_q, np.float32))


def ours_runner(q, k, v, d_out, backward: bool):
    """() -> (seconds, output [B, T, H, hd] as numpy) of one jitted call (compiled by a first call here)."""
    q, k, v, d_out = map(jnp.asarray, (q, k, v, d_out))
    forward = jax.jit(blockwise_attention)
    if backward:
        def fwd_bwd(q, k, v):  # one forward and its vjp, as torch's forward + backward(d_out)
            out, vjp = jax.vjp(blockwise_attention, q, k, v)
            return out, vjp(d_out)
        fn = jax.jit(fwd_bwd)
    else:
        fn = forward
    jax.block_until_ready(fn(q, k, v))

    def call():
        start = time.perf_counter()
        out = jax.block_until_ready(fn(q, k, v))
        elapsed = time.perf_counter() - start
        return elapsed, ([np.asarray(out[0])] + [np.asarray(g) for g in out[1]] if backward else [np.asarray(out)])
    return call


def theirs_runner(q, k, v, d_out, backward: bool):
    """The same call through torch's SDPA ([B, H, T, hd] layout, is_causal, enable_gqa)."""
    tq, tk, tv, tg = (torch.from_numpy(x).transpose(1, 2).contiguous() for x in (q, k, v, d_out))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def call():
        if backward:
            leaves = [x.detach().requires_grad_() for x in (tq, tk, tv)]
            start = time.perf_counter()
            out = sdpa(*leaves, is_causal=True, enable_gqa=True)
            out.backward(tg)
        else:
            leaves = []
            with torch.inference_mode():
                start = time.perf_counter()
                out = sdpa(tq, tk, tv, is_causal=True, enable_gqa=True)
        elapsed = time.perf_counter() - start
        return elapsed, [x.transpose(1, 2).numpy() for x in [out.detach()] + [leaf.grad for leaf in leaves]]
    call()
    return call


def attention_flops(batch: int, length: int, heads: int, head_dim: int, backward: bool) -> float:
    """Matmul FLOPs of causal attention (QK^T and AV over the T (T + 1) / 2 kept pairs); the backward's four
    products (dV, dP, dQ, dK) double the forward's two."""
    forward = 2 * 2.0 * batch * heads * head_dim * length * (length + 1) / 2
    return 3 * forward if backward else forward


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=3072)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--backward", action="store_true", help="time forward + gradients of q, k, v")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs; at the start: {load_line()}",
          flush=True)
    q, k, v, d_out = inputs(args.batch, args.length, args.heads, args.kv_heads, args.head_dim)
    ours, theirs = ours_runner(q, k, v, d_out, args.backward), theirs_runner(q, k, v, d_out, args.backward)
    t_ours, t_theirs = [], []
    with OtherCpu() as other:
        for _ in range(args.repeats):  # alternate the two sides call by call
            elapsed, out_ours = ours()
            t_ours.append(elapsed)
            elapsed, out_theirs = theirs()
            t_theirs.append(elapsed)
    m_ours, m_theirs = float(np.median(t_ours)), float(np.median(t_theirs))
    what = "forward + backward" if args.backward else "forward"
    print(f"attention {what}, q [{args.batch}, {args.length}, {args.heads}, {args.head_dim}], "
          f"{args.kv_heads} kv heads, causal, float32, medians of {args.repeats}: ours {m_ours * 1e3:.1f} ms, "
          f"torch SDPA {m_theirs * 1e3:.1f} ms (torch {torch.__version__}, {torch.get_num_threads()} threads); "
          f"{other.line()}")
    names = ["output", "dq", "dk", "dv"]
    diffs = {n: float(np.abs(a - b).max()) for n, a, b in zip(names, out_ours, out_theirs)}
    print("max |ours - torch| (the same random inputs on both sides): "
          + ", ".join(f"{n} {d:.1e}" for n, d in diffs.items()))
    flops = attention_flops(args.batch, args.length, args.heads, args.head_dim, args.backward)
    print(f"matmul FLOPs of causal attention ({flops / 1e9:.2f} GFLOP a call): ours {bound_line(flops, m_ours)}; "
          f"torch {bound_line(flops, m_theirs)}")
    print(f"ratio ours/torch speed: {m_theirs / m_ours:.2f}x (above 1: ours faster)", flush=True)
    return {"ratio": m_theirs / m_ours, "diffs": diffs}


if __name__ == "__main__":
    main()
