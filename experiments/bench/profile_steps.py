"""Where a decode step and an update step spend their time: an XLA-op profile of our compiled programs on CPU.

Runs one program (`generate`: Sampler.generate of the tiny/0.5B benchmark case; `update`: the actor update of a
bench_train.py size) a few times under `jax.profiler.trace`, then prints (1) the op histogram of the compiled
HLO (copies, scatters, dots, fusions... in the decode loop body and overall) and (2) the time per XLA op from
the trace, largest first, with each op's share. Shares are meaningful on a busy machine; seconds are not.

    python experiments/bench/profile_steps.py generate --case tiny
    python experiments/bench/profile_steps.py update --size medium
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

OPS = ("copy", "scatter", "gather", "dot", "convolution", "fusion", "dynamic-update-slice", "dynamic-slice",
       "transpose", "reduce", "sort", "rng", "while", "custom-call", "all-reduce")


def hlo_histogram(text: str) -> dict[str, int]:
    """Counts of instruction kinds in compiled HLO text (fusion bodies included)."""
    counts: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*(?:ROOT\s+)?%[\w.\-]+ = (?:\([^)]*\)|\S+) ([a-z][\w\-]*)\(", line)
        if m:
            counts[m.group(1)] += 1
    return {k: counts[k] for k in OPS if counts[k]}


def while_body(hlo: str) -> str | None:
    """The instructions of the body of the entry computation's first while loop (the decode loop, the update's
    micro-batch loop) in compiled HLO text; None without one. XLA names a body after its region
    (`%wide.region_0.57.clone`), so it is found through the loop's `body=` attribute, not by its name."""
    entry = hlo.find("\nENTRY ")
    loop = re.search(r"\bwhile\(.*?\bbody=(%?[\w.\-]+)", hlo[max(entry, 0):]) or re.search(
        r"\bwhile\(.*?\bbody=(%?[\w.\-]+)", hlo)
    if loop is None:
        return None
    body = re.search(r"^" + re.escape(loop.group(1)) + r" .*?\{\n(.*?)\n\}", hlo, re.S | re.M)
    return body.group(1) if body else None


def trace_ops(fn, runs: int) -> dict[str, float]:
    """Total microseconds per XLA op name over `runs` calls of fn() under the profiler."""
    out = tempfile.mkdtemp(prefix="profile_")
    try:
        with jax.profiler.trace(out, create_perfetto_trace=True):
            for _ in range(runs):
                fn()
        path = glob.glob(os.path.join(out, "**", "perfetto_trace.json.gz"), recursive=True)[0]
        with gzip.open(path) as f:
            data = json.load(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    events = data["traceEvents"] if isinstance(data, dict) else data
    ops = [e for e in events if e.get("ph") == "X" and not e.get("name", "").startswith("$")
           and "::" not in e["name"] and "Pjit" not in e["name"]]
    totals: collections.Counter = collections.Counter()
    by_thread: dict = collections.defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for thread in by_thread.values():  # self time: an op's duration minus the ops nested inside it (while bodies)
        thread.sort(key=lambda e: (e["ts"], -e.get("dur", 0.0)))
        stack: list = []
        for e in thread:
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0.0) <= e["ts"]:
                stack.pop()
            if stack:
                totals[_op_name(stack[-1])] -= e.get("dur", 0.0)
            totals[_op_name(e)] += e.get("dur", 0.0)
            stack.append(e)
    return dict(totals)


def _op_name(event) -> str:
    return event["name"]


def source_of(hlo: str) -> dict[str, str]:
    """HLO instruction name -> the JAX op path it came from (its metadata op_name, shortened)."""
    out = {}
    for m in re.finditer(r"%([\w.\-]+) = .*?metadata=\{op_name=\"([^\"]+)\"", hlo):
        path = re.sub(r"^jit\([^)]*\)/", "", m.group(2))
        out[m.group(1)] = path[-70:]
    return out


def print_profile(title: str, hlo: str, totals: dict[str, float], runs: int, top: int) -> None:
    print(f"\n== {title}")
    print("compiled HLO op counts:", hlo_histogram(hlo))
    body = while_body(hlo)
    if body is not None:
        print("while-loop body op counts:", hlo_histogram(body))
    total = sum(totals.values()) or 1.0
    kinds: collections.Counter = collections.Counter()
    for name, us in totals.items():
        kinds[re.sub(r"\.\d+$", "", name)] += us
    print(f"time per call by kind of XLA op ({runs} calls; {total / runs / 1e3:.2f} ms of ops per call):")
    for name, us in sorted(kinds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {name:<48} {us / runs / 1e3:9.3f} ms  {100 * us / total:5.1f}%")
    sources = source_of(hlo)
    print("largest single ops, with the JAX op they come from:")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {name:<36} {100 * us / total:5.1f}%  {sources.get(name, '?')}")


def profile_generate(case: str, runs: int, top: int) -> None:
    import bench_generate as bg
    import transformers

    from ragen_jax.models import load_model

    hf_cfg, batch = bg.hf_config(case)
    prompt_len, new = bg.case_lengths(case)
    with tempfile.TemporaryDirectory() as folder:
        transformers.Qwen2ForCausalLM(hf_cfg).save_pretrained(folder)
        model = load_model(folder, param_dtype="float32")
    graphdef, params = nnx.split(model)
    prompts = np.random.default_rng(0).integers(1, hf_cfg.vocab_size, (batch, prompt_len)).astype(np.int32)
    call, _, _ = bg.ours_runner(graphdef, params, prompts, new)
    sampler_hlo = _sampler_hlo(graphdef, params, prompts, new)
    print_profile(f"generate {case}: batch {batch}, prompt {prompt_len}, {new} greedy tokens", sampler_hlo,
                  trace_ops(call, runs), runs, top)


def _sampler_hlo(graphdef, params, prompts, new) -> str:
    from ragen_jax.sampling import Sampler, SamplingConfig
    from ragen_jax.sampling.lanes import split_rows
    from ragen_jax.sampling.turn import temperature_arg

    batch, prompt_len = prompts.shape
    sampler = Sampler(graphdef, cache_size=prompt_len + new, pad_id=0, batch_size=batch)
    config = SamplingConfig(max_new_tokens=new, greedy=True)
    cache, _ = sampler.init_cache()
    state = sampler.idle_state(config)
    if sampler.lanes > 1:  # every lane runs the same program over its rows
        cache, state = cache.lanes[0], split_rows(state, sampler.lanes)[0]
    decode = sampler._decode_fn(config, sampler.decode_window(prompt_len + new), new)
    return decode.lower(params, sampler.decode_weights(params), cache, state,
                        temperature_arg(config)).compile().as_text()


def profile_update(size: str, runs: int, top: int) -> None:
    import bench_train as bt

    model, batch, micro = bt.size_setup(size, "none")
    step, _ = bt.ours_runner(model, batch, micro, 256)
    step()
    from ragen_jax.optim import make_optimizer
    from ragen_jax.trainer.setup import split_model
    from ragen_jax.trainer.steps import make_step_fns, scored_positions

    split = split_model(model, lora=False)
    tx, _ = make_optimizer(bt.OPTIM, 1000)
    fns = make_step_fns(split.graphdef, None, bt.algo_settings(256), tx, None, micro)
    mb = dict(jax.tree.map(jnp.asarray, batch))
    mb["sample_logprobs"] = mb["old_logprobs"]
    mb["positions"] = jnp.asarray(scored_positions(batch["loss_mask"]))  # as bench_train.ours_runner
    hlo = fns["actor_update"].lower(split.trainable, tx.init(split.trainable), split.frozen, mb).compile().as_text()
    rows, length = batch["tokens"].shape
    print_profile(f"actor update {size}: mini-batch {rows} x {length}, micro-batch {micro}", hlo,
                  trace_ops(step, runs), runs, top)


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", choices=("generate", "update"))
    p.add_argument("--case", default="tiny", help="bench_generate.py case (generate)")
    p.add_argument("--size", default="tiny", help="bench_train.py size (update)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    print(f"1-minute load average {os.getloadavg()[0]:.2f} (shares are meaningful when busy; seconds are not)")
    if args.program == "generate":
        profile_generate(args.case, args.runs, args.top)
    else:
        profile_update(args.size, args.runs, args.top)


if __name__ == "__main__":
    main()
