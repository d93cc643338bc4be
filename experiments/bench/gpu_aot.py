"""Compile the run's programs for an H100 or H200 that is not there, and print XLA's own bytes and FLOPs per
program beside the memory planner's estimate and the paper roofline (no GPU needed).

    pip install -r requirements-gpu-aot.txt      # in a separate virtual environment (the CUDA plugin, ~3 GB)
    JAX_PLATFORMS=cpu python experiments/bench/gpu_aot.py                          # 0.5B/3B/7B, 1 and 8 GPUs, H100+H200
    JAX_PLATFORMS=cpu python experiments/bench/gpu_aot.py --models 0.5b --meshes 1 --programs all
    JAX_PLATFORMS=cpu python experiments/bench/gpu_aot.py --smoke                  # tiny model and sizes: the script runs
    python experiments/bench/gpu_aot.py --on-device --shapes bench --measured OUT/bench_gpu.txt   # on a GPU (gpu_session.sh)

Shapes: Qwen2.5-0.5B/3B/7B-Instruct from their published config.json (ragen_jax.models.known), bf16 weights with
float32 Adam state (configs/base.py's optim), RAGEN's Sokoban sizes (configs/base.py: micro-batch 8, mini-batch
32, 3600-token rows and cache, 8 x 16 episodes, 400-token responses). Mesh "8" is (data 1, fsdp 4, tensor 2).
Per program and card: per-device argument / output / temp bytes (`compiled.memory_analysis()`), matmul FLOPs of
one call (from its jaxpr: a compile-only executable has no cost analysis; ragen_jax/aot/flops.py), the planner's
estimate of the same program (update: `MemoryPlan.training_peak` of the actor alone; begin/decode:
`MemoryPlan.sampling_program`) and the paper lower bound per call: a decode step's argument bytes (weights and
cache) / HBM bandwidth, an update's FLOPs / the bf16 peak. On a GPU (--on-device) the same programs compile for the
attached card at bench_gpu.py's shapes (--shapes bench), and --measured prints bench_gpu.py's figures beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ragen_jax.aot import gpu as G  # noqa: E402
from ragen_jax.aot import programs as P  # noqa: E402
from ragen_jax.aot.flops import program_flops  # noqa: E402
from ragen_jax.models import target  # noqa: E402
from ragen_jax.models.known import known_config  # noqa: E402
from ragen_jax.sharding import make_mesh  # noqa: E402
from ragen_jax.sharding.memory import GiB, MemoryPlan, estimate_memory  # noqa: E402

MODELS = {"0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "1.5b": "Qwen/Qwen2.5-1.5B-Instruct", "3b": "Qwen/Qwen2.5-3B-Instruct",
          "7b": "Qwen/Qwen2.5-7B-Instruct"}
MESHES = {1: (1, 1, 1), 8: (1, 4, 2)}
CORE = ("update/actor", "lockstep/begin", "lockstep/decode")  # the training and sampling peaks, and the roofline's
# the planner's figure for each phase, and the programs whose largest peak it estimates
PHASES = {"training": ("training_peak", ("update/actor",)),
          "sampling": ("sampling_program", ("lockstep/begin", "lockstep/decode"))}


def bench_sizes() -> P.Sizes:
    """experiments/bench/bench_gpu.py's default shapes: decode 32 rows of a 256-token prompt + 256 new tokens, train 2
    micro-batches of 4 x 1024 tokens (remat "dots", set on the model), so the bounds sit beside its figures."""
    return P.Sizes(micro_batch=4, mini_batch=8, seq_len=1024, scored=1024, rollout_rows=32, slots=32, begin_rows=32,
                   cache_len=512, window=512, prefill=256, new_tokens=256, chunk=8)


def run_sizes(cfg) -> P.Sizes:
    """The sizes a run of `cfg` compiles its programs at (first-turn prompts bucketed to 512 tokens)."""
    t, r = cfg.trainer, cfg.rollout
    rows = cfg.env.groups * cfg.env.group_size
    trained = min(r.max_model_len, cfg.env.max_turn * r.response_length)
    return P.Sizes(micro_batch=t.micro_batch_size, mini_batch=t.mini_batch_size, seq_len=r.max_model_len,
                   scored=-(-trained // 32) * 32, rollout_rows=rows, slots=rows, begin_rows=cfg.env.group_size,
                   cache_len=r.max_model_len, window=r.max_model_len, prefill=512, new_tokens=r.response_length,
                   chunk=r.chunk, lora_rank=64, sft_rows=t.mini_batch_size, sft_prefix=256, sft_width=512,
                   sft_targets=128, cross_columns=8, cross_prompt=512, cross_pairs=32, cross_reasoning=256)


def plan_for(model_config, sizes: P.Sizes, cfg, mesh_shape) -> MemoryPlan:
    """The planner's per-device estimate of the actor's update and the sampler (no critic, no reference: the
    programs compared hold the actor only)."""
    return estimate_memory(model_config, micro_batch_size=sizes.micro_batch, seq_len=sizes.seq_len,
                           mini_batch_size=sizes.mini_batch, rollout_batch_size=sizes.rollout_rows,
                           cache_len=sizes.cache_len, prefill_len=sizes.prefill, mesh_shape=mesh_shape,
                           optimizer_dtype=cfg.optim.actor.state_dtype, logprob_chunk=cfg.trainer.logprob_chunk,
                           platform="gpu")


def measure(model: str, model_config, devices: int, gpus: list[str], names: list[str], sizes: P.Sizes, cfg,
            log=print, on_device: bool = False) -> list[dict]:
    """One row per (program, card): compiled bytes, FLOPs, planner estimate and roofline. on_device: compile for
    the attached GPU(s) (`gpus` then names the card whose bandwidth and peak the bounds use)."""
    import jax

    shape = MESHES[devices]
    plan = plan_for(model_config, sizes, cfg, shape)
    rows = []
    for name in names:
        flops = None
        for gpu in gpus:
            mesh = make_mesh(shape, jax.devices()[:devices] if on_device else G.gpu_topology(gpu, devices))
            program = P.build(name, P.Build(model_config, sizes, mesh if name not in P.SINGLE_DEVICE else None, cfg))
            if flops is None:
                with target.compiling_for("gpu", G.GPUS[gpu]["capability"]), G.cudnn_traceable():
                    flops = program_flops(program.trace())
            t0 = time.perf_counter()
            row = dict(model=model, devices=devices, mesh=list(shape), gpu=gpu, program=name, kind=program.kind)
            try:
                stats = G.compiled_stats(G.compile_for_gpu(program, mesh if name not in P.SINGLE_DEVICE else None,
                                                           None if on_device else G.GPUS[gpu]["capability"]))
            except Exception as e:  # noqa: BLE001 - report which program XLA refused, and why
                row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
                log(f"  {model} x{devices} {gpu} {name}: FAILED {row['error']}")
                rows.append(row)
                continue
            per_device = flops / (1 if name in P.SINGLE_DEVICE else devices)
            stats.flops = per_device
            row.update(compile_s=time.perf_counter() - t0, argument=stats.argument, output=stats.output,
                       alias=stats.alias, temp=stats.temp, peak=stats.peak, flops=per_device,
                       **G.roofline(stats, program, gpu))
            rows.append(row)
            log(f"  {model} x{devices} {gpu} {name}: {row['compile_s']:.0f} s, peak {stats.peak / GiB:.2f} GiB")
    for phase, (field, names_) in PHASES.items():
        for gpu in gpus:
            peaks = [r["peak"] for r in rows if r["gpu"] == gpu and r.get("program") in names_ and "peak" in r]
            if len(peaks) == len(names_):
                rows.append(dict(model=model, devices=devices, mesh=list(shape), gpu=gpu, phase=phase,
                                 planned=getattr(plan, field), compiled=max(peaks),
                                 planned_over_compiled=getattr(plan, field) / max(peaks)))
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per program and card, compiled bytes, FLOPs and the lower bounds; then planner vs compiled."""
    head = ("| model | GPUs | card | program | argument GiB | output GiB | temp GiB | peak GiB | GFLOP per call "
            "(per device) | decode step >= ms | decode tok/s <= | call >= ms at bf16 peak |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in (r for r in rows if "program" in r):
        where = f"| {r['model']} | {r['devices']} | {r['gpu']} | {r['program']} |"
        if "error" in r:
            lines.append(f"{where} failed: {r['error']} |")
            continue
        decode = r["kind"] == "decode"
        lines.append(f"{where} {r['argument'] / GiB:.2f} | {r['output'] / GiB:.2f} | {r['temp'] / GiB:.2f} | "
                     f"{r['peak'] / GiB:.2f} | {r['flops'] / 1e9:,.0f} | "
                     f"{1e3 * r['step_bound_s']:.2f} | {r['tokens_per_s_bound']:,.0f} | "
                     if decode else f"{where} {r['argument'] / GiB:.2f} | {r['output'] / GiB:.2f} | "
                     f"{r['temp'] / GiB:.2f} | {r['peak'] / GiB:.2f} | {r['flops'] / 1e9:,.0f} | - | - | ")
        lines[-1] += f"{1e3 * r['flops_bound_s']:.1f} |"
    phases = [r for r in rows if "phase" in r]
    if phases:
        lines += ["", "| model | GPUs | card | phase | planned GiB | compiled GiB | planned / compiled |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['devices']} | {r['gpu']} | {r['phase']} | {r['planned'] / GiB:.2f} | "
                  f"{r['compiled'] / GiB:.2f} | {r['planned_over_compiled']:.3f} |" for r in phases]
    return "\n".join(lines)


def beside_measured(rows: list[dict], measured: dict[str, dict]) -> str:
    """bench_gpu.py's figures (decode tokens/s, train step seconds) beside the compiled programs' lower bounds."""
    lines = ["| model | card | decode tok/s measured | decode tok/s bound | % of bound | train step s measured | "
             "train step s bound | % of bound (MFU-like) |", "|---|---|---|---|---|---|---|---|"]
    for model, m in measured.items():
        for gpu in sorted({r["gpu"] for r in rows if r.get("model") == model}):
            decode = next((r for r in rows if r.get("model") == model and r["gpu"] == gpu
                           and r.get("program") == "lockstep/decode" and "tokens_per_s_bound" in r), None)
            update = next((r for r in rows if r.get("model") == model and r["gpu"] == gpu
                           and r.get("program") == "update/actor" and "flops_bound_s" in r), None)
            dec = m.get("decode_tokens_per_s", math.nan)
            step = m.get("train_step_s", math.nan)
            bound_tok = decode["tokens_per_s_bound"] if decode else math.nan
            bound_s = update["flops_bound_s"] if update else math.nan
            lines.append(f"| {model} | {gpu} | {dec:,.0f} | {bound_tok:,.0f} | {100 * dec / bound_tok:.1f}% | "
                         f"{step:.3f} | {bound_s:.3f} | {100 * bound_s / step:.1f}% |")
    return "\n".join(lines)


def read_measured(path: str) -> dict[str, dict]:
    """bench_gpu.py's result lines ("0.5b {json}") from its printed output."""
    out = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.strip().partition(" ")
            if name in MODELS and rest.startswith("{"):
                out[name] = json.loads(rest)
    return out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="0.5b,3b,7b", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--meshes", default="1,8", help="GPUs per mesh: 1 and/or 8")
    p.add_argument("--gpus", default="h100,h200", help="cards: h100, h200")
    p.add_argument("--programs", default="core", help=f"core ({', '.join(CORE)}), all, or names from "
                   "ragen_jax.aot.programs.PROGRAMS")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--smoke", action="store_true", help="the tiny model at tiny sizes (checks the script)")
    p.add_argument("--shapes", default="run", choices=("run", "bench"),
                   help="run: RAGEN's Sokoban sizes; bench: experiments/bench/bench_gpu.py's (with --measured)")
    p.add_argument("--on-device", action="store_true", help="compile for the attached GPU(s) instead")
    p.add_argument("--measured", help="bench_gpu.py's output: print its figures beside the bounds")
    args = p.parse_args(argv)
    if not args.on_device and (why := G.plugin_missing()):
        sys.exit(f"experiments/bench/gpu_aot.py: {why}")
    cfg = P.default_run_config()
    names = list(P.PROGRAMS) if args.programs == "all" else list(CORE) if args.programs == "core" else \
        args.programs.split(",")
    if args.smoke:
        from ragen_jax.models.tiny import tiny_config

        models = {"tiny": tiny_config(param_dtype="bfloat16", vocab_size=1152, head_dim=64, num_heads=2,
                                      num_kv_heads=2)}
        sizes = P.Sizes(micro_batch=4, mini_batch=8, rollout_rows=8, slots=8, begin_rows=4)
    else:
        remat = "dots" if args.shapes == "bench" else "none"
        models = {m: known_config(MODELS[m], param_dtype="bfloat16").replace(remat=remat)
                  for m in args.models.split(",")}
        sizes = bench_sizes() if args.shapes == "bench" else run_sizes(cfg)
    rows = []
    for model, model_config in models.items():
        for devices in (int(d) for d in args.meshes.split(",")):
            rows += measure(model, model_config, devices, args.gpus.split(","), names, sizes, cfg,
                            on_device=args.on_device)
    print(table(rows))
    if args.measured:
        print(beside_measured(rows, read_measured(args.measured)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
