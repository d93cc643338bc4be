"""Warm-start learning curve: validation success of the tiny policy vs SFT time, and SFT throughput.

  python experiments/bench/bench_warmstart.py --config configs/sokoban.py:tiny --checkpoints 60,120,240
  python experiments/bench/bench_warmstart.py --lr 2e-3 --batch 64 --micro 16 --demos 2000 --compare_prefix

Validation (config.val: 512 episodes at temperature 0.5 for `configs/sokoban.py:tiny`) runs when the SFT step time
passes each checkpoint; its own time is not counted. With --compare_prefix, also prints the step time
and tokens/s with and without the shared-prefix KV, interleaved, medians of 3, and exits 1 unless both
give the same first-step loss.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402


def _load_config(spec: str):
    import importlib.util

    path, _, arg = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("bench_cfg", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def _sft_stepper(trainer, data, batch: int, micro: int):
    """() -> loss: one SFT step (compiled on the first call) on a throwaway copy of the params, always on the
    data's first `batch` rows, so two steppers over the same rows laid out differently see the same losses."""
    from ragen_jax.trainer import warmstart as ws

    tx, _ = ws.sft_optimizer(trainer.run.warmstart, 100)
    step = ws.make_sft_step(trainer.models.actor.graphdef, tx, micro)
    state = {"params": jax.tree.map(jnp.copy, trainer.models.actor.trainable)}
    state["opt"] = tx.init(state["params"])
    b = {k: jnp.asarray(v) for k, v in data.batch(np.arange(batch)).items()}
    prefix = jnp.asarray(data.prefix)

    def call() -> float:
        state["params"], state["opt"], m = step(state["params"], state["opt"], trainer.models.actor.frozen, prefix, b)
        return float(m["loss"])
    return call


def compare_prefix(trainer, rows, batch: int, micro: int, repeats: int = 3, rtol: float = 1e-4) -> None:
    """Median seconds of an SFT step on demo `rows` with and without the shared-prefix KV, interleaved call by
    call after one untimed (compiling) call each; exits 1 unless both sides' first-step losses agree to `rtol`."""
    from ragen_jax.trainer import warmstart as ws

    data = ws.prepare_sft_data(rows, share_prefix=True)
    micro = min(micro, data.num_rows)
    batch = min(batch, data.num_rows) // micro * micro
    plain = ws.prepare_sft_data(rows, share_prefix=False)
    steps = {"shared prefix": _sft_stepper(trainer, data, batch, micro),
             "plain": _sft_stepper(trainer, plain, batch, micro)}
    first = {name: call() for name, call in steps.items()}
    times: dict[str, list[float]] = {name: [] for name in steps}
    with OtherCpu() as other:
        for _ in range(repeats):
            for name, call in steps.items():
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
    s_share, s_plain = (float(np.median(times[name])) for name in steps)
    tokens = float(data.real_tokens[:batch].sum())
    print(f"step (medians of {repeats}, interleaved): shared prefix {s_share:.2f} s ({tokens / s_share:.0f} "
          f"tokens/s), plain {s_plain:.2f} s ({tokens / s_plain:.0f} tokens/s): plain / shared time "
          f"x{s_plain / s_share:.2f} (above 1: sharing the prefix is faster); first-step loss "
          f"{first['shared prefix']:.6f} vs {first['plain']:.6f}; {other.line()}")
    if not np.isclose(first["shared prefix"], first["plain"], rtol=rtol, atol=0.0):
        raise SystemExit(f"the shared-prefix and plain SFT steps disagree on the first loss ({first['shared prefix']}"
                         f" vs {first['plain']}, rtol {rtol}): the timings compare different computations")


def parser() -> argparse.ArgumentParser:
    """The command line (the docstring's commands parse with it: test)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/sokoban.py:tiny")
    p.add_argument("--checkpoints", default="60,120,240", help="SFT seconds at which to validate")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--micro", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--demos", type=int, default=None)
    p.add_argument("--greedy", action="store_true", help="greedy validation (default: config.val)")
    p.add_argument("--compare_prefix", action="store_true", help="also time the step without prefix sharing")
    p.add_argument("--workdir", default="/tmp/bench_warmstart")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(f"at the start: {load_line()}", flush=True)

    from ragen_jax.trainer import warmstart as ws
    from ragen_jax.trainer import Trainer

    cfg = _load_config(args.config)
    w = cfg.warmstart
    for key, value in (("lr", args.lr), ("batch_size", args.batch), ("micro_batch_size", args.micro),
                       ("warmup_steps", args.warmup), ("num_demos", args.demos)):
        if value is not None:
            w[key] = value
    if args.greedy:
        cfg.val.greedy = True
    checkpoints = sorted(float(x) for x in args.checkpoints.split(","))
    trainer = Trainer(cfg, args.workdir)
    t0 = time.perf_counter()
    rows = ws.build_demos(trainer)
    data = ws.prepare_sft_data(rows, share_prefix=bool(w.share_prefix))
    print(f"demos: {w.num_demos} episodes -> {data.num_rows} rows in {time.perf_counter() - t0:.1f} s; "
          f"row length mean {data.real_tokens.mean():.0f} tokens, shared prefix {len(data.prefix)}, "
          f"trained tokens/row {data.target_mask.sum(1).mean():.1f}")
    print(f"settings: lr {w.lr} batch {w.batch_size} micro {w.micro_batch_size or w.batch_size} "
          f"warmup {w.warmup_steps} val {cfg.val.groups * cfg.val.group_size} episodes "
          f"{'greedy' if cfg.val.greedy else f'T={cfg.val.temperature}'}")
    if args.compare_prefix:
        compare_prefix(trainer, rows, int(w.batch_size), int(w.micro_batch_size or w.batch_size))

    key = f"val/{trainer.val_tags[0]}/success"
    t_val = time.perf_counter()
    vm, _ = trainer.run_validation(0)
    print(f"validation takes {time.perf_counter() - t_val:.0f} s")
    rows_out = [(0.0, 0, float("nan"), float("nan"), vm[key])]
    pending = list(checkpoints)
    state = {"metrics": None}

    def callback(step: int, spent: float) -> None:
        if pending and spent >= pending[0]:
            while pending and spent >= pending[0]:
                pending.pop(0)
            success = trainer.run_validation(0)[0][key]
            rows_out.append((spent, step, state.get("loss", float("nan")), state.get("acc", float("nan")), success))
            print(f"  {spent:6.0f} s  step {step:4d}  val success {success:.3f}", flush=True)

    orig = trainer.monitor.scalars

    def capture(m, s):
        if "sft/loss" in m:
            state["loss"], state["acc"] = m["sft/loss"], m["sft/token_accuracy"]
        orig(m, s)

    trainer.monitor.scalars = capture
    metrics = ws.train_sft(trainer, data, steps=100_000, max_seconds=checkpoints[-1] + 1e-3, log_every=1,
                           callback=callback)
    print("\n| SFT time (s) | steps | loss | token acc | val success |\n|---|---|---|---|---|")
    for spent, step, loss, acc, success in rows_out:
        print(f"| {spent:.0f} | {step} | {loss:.3f} | {acc:.3f} | {success:.3f} |")
    print(f"\nSFT step {metrics['sft/step_seconds']:.2f} s, {metrics['sft/tokens_per_s']:.0f} tokens/s "
          f"(all row tokens), {metrics['sft/trained_tokens_per_s']:.0f} trained tokens/s, compile "
          f"{metrics['sft/compile_seconds']:.0f} s; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
