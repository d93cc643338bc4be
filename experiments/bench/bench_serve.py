"""Throughput of the OpenAI-compatible endpoint (`python -m ragen_jax.serve`): generated tokens/s at 1, 8 and 64
concurrent requests, for the tiny preset and a Qwen2.5-0.5B-shaped random model, against the same engine called
in-process (no HTTP, no JSON): the ratio is what the HTTP side costs.

Per case, one engine with --slots decode slots serves both sides: the endpoint on 127.0.0.1 (uvicorn, as the CLI
runs it) with C client threads each sending one request (http.client, a fresh connection each), and the same C
requests given to `Engine.generate` at once. Every request is one chat message of --prompt-words words,
max_tokens --new, temperature 1 and `ignore_eos` (every choice generates exactly --new tokens, so both sides do the
same work). tok/s = completion tokens / wall seconds of the round. The engine compiles its programs first
(`Engine.warm_up`: a begin per power-of-two batch of arrivals, a decode per chunk length), each (case, C) runs one
untimed round per side, then --repeats rounds alternating side by side; medians are reported with the machine's
load (`experiments/bench/quiet.py`).

    python experiments/bench/bench_serve.py [--cases tiny,qwen2.5-0.5b] [--concurrency 1,8,64] [--repeats 3]
        [--slots 64] [--prompt-words 48] [--new 32] [--smoke]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from envs.serve.asgi import AsgiServer  # noqa: E402
from experiments.bench.bench_decode_layout import QWEN25_05B  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402
from ragen_jax.models import CausalLM, load_tiny_tokenizer, make_tiny_model  # noqa: E402
from ragen_jax.serve.app import create_app  # noqa: E402
from ragen_jax.serve.engine import Engine, Job, Sampling, choice_keys  # noqa: E402

MODEL = "bench"


def build(case: str):
    """(graphdef, params, tokenizer) of a case: random weights; the tiny tokenizer for both (ids past its
    vocabulary decode to nothing, which only shortens the answers' text)."""
    if case == "tiny":
        model, tokenizer = make_tiny_model(seed=0)
    elif case == "qwen2.5-0.5b":
        model, tokenizer = CausalLM(QWEN25_05B, rngs=nnx.Rngs(0)), load_tiny_tokenizer()
    else:
        raise ValueError(f"unknown case {case!r}; use tiny or qwen2.5-0.5b")
    graphdef, params = nnx.split(model)
    return graphdef, params, tokenizer


def request_body(words: int, new: int, index: int) -> dict:
    content = " ".join(f"word{(index * 7 + i) % 50}" for i in range(words))
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": new,
            "temperature": 1.0, "seed": index, "ignore_eos": True}


def post(url: str, body: dict) -> int:
    """Completion tokens of one request (a fresh connection, as independent clients make)."""
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=3600)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {answer}")
        return int(answer["usage"]["completion_tokens"])
    finally:
        conn.close()


def endpoint_round(url: str, bodies: list[dict]) -> tuple[float, int]:
    """(seconds, completion tokens) of the bodies sent at once by one thread each."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        tokens = sum(pool.map(lambda b: post(url, b), bodies))
    return time.perf_counter() - start, tokens


def engine_round(engine: Engine, bodies: list[dict]) -> tuple[float, int]:
    """(seconds, completion tokens) of the same requests given to the engine in-process (prompts rendered first)."""
    jobs = []
    for body in bodies:
        text = engine.tokenizer.apply_chat_template(body["messages"])
        jobs.append(Job(np.asarray(engine.tokenizer.encode(text), np.int32), 1, body["max_tokens"],
                        Sampling(ignore_eos=True), choice_keys(body["seed"], 1)))
    start = time.perf_counter()
    done = engine.generate(jobs)
    return time.perf_counter() - start, sum(len(c.tokens) for r in done for c in r)


def run_case(case: str, concurrency: list[int], args) -> list[str]:
    graphdef, params, tokenizer = build(case)
    prompt_tokens = len(tokenizer.encode(tokenizer.apply_chat_template(
        request_body(args.prompt_words, args.new, 0)["messages"])))
    engine = Engine(graphdef, params, tokenizer, slots=args.slots, cache_size=prompt_tokens + args.new + 16,
                    max_tokens=args.new, chunk=args.chunk).start()
    server = AsgiServer(create_app(engine, MODEL)).start()
    lines = []
    try:
        first = request_body(args.prompt_words, args.new, 0)["messages"]
        engine.warm_up(tokenizer.encode(tokenizer.apply_chat_template(first)), Sampling(ignore_eos=True))
        for c in concurrency:
            bodies = [request_body(args.prompt_words, args.new, i) for i in range(c)]
            endpoint_round(server.url, bodies)  # any program the warm-up left
            engine_round(engine, bodies)
            rates = {"endpoint": [], "engine": []}
            with OtherCpu() as other:
                for _ in range(args.repeats):
                    for side, fn in (("endpoint", lambda: endpoint_round(server.url, bodies)),
                                     ("engine", lambda: engine_round(engine, bodies))):
                        seconds, tokens = fn()
                        rates[side].append(tokens / seconds)
            ours, base = (statistics.median(rates[s]) for s in ("endpoint", "engine"))
            lines.append(f"{case:>13} C={c:<3} endpoint {ours:9.1f} tok/s   in-process engine {base:9.1f} tok/s   "
                         f"ratio {ours / base:.2f}   ({prompt_tokens}-token prompts, {args.new} new; {other.line()})")
            print(lines[-1], flush=True)
    finally:
        server.stop()
        engine.stop()
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="tiny,qwen2.5-0.5b")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=48)
    parser.add_argument("--new", type=int, default=32, help="completion tokens of every request")
    parser.add_argument("--chunk", type=int, default=8, help="the engine's decode steps between looks")
    parser.add_argument("--smoke", action="store_true", help="tiny case, 8 new tokens, 1 repeat (checks it runs)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.cases, args.new, args.repeats = "tiny", 8, 1
    concurrency = [int(c) for c in args.concurrency.split(",")]
    if max(concurrency) > args.slots:
        parser.error(f"--concurrency {max(concurrency)} is above --slots {args.slots}: a request would wait for "
                     "a slot, which is queueing, not throughput")
    print(f"at the start: {load_line()}", flush=True)
    lines = []
    for case in args.cases.split(","):
        lines += run_case(case, concurrency, args)
    print("\n".join(["summary (tok/s: endpoint / in-process engine)", *lines]))


if __name__ == "__main__":
    main()
