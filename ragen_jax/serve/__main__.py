"""`python -m ragen_jax.serve --checkpoint RUN`: an OpenAI-compatible endpoint (`/v1/chat/completions`,
`/v1/models`) for a trained agent; see docs/serving.md."""

from __future__ import annotations

import argparse
import logging

import uvicorn

from ragen_jax.serve.app import create_app
from ragen_jax.serve.engine import Engine
from ragen_jax.serve.weights import load_served


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ragen_jax.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="a training run folder (its latest checkpoint, else its hf_export/), an Orbax step "
                             "folder (.../checkpoints/<N>) or a Hugging Face folder")
    parser.add_argument("--model-name", default=None, help="the id clients send as 'model' (default: the run's name)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 to accept other machines)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--slots", type=int, default=8,
                        help="decode slots: the choices generated at once (the batch of every compiled program)")
    parser.add_argument("--max-model-len", type=int, default=4096, help="prompt + completion tokens per choice")
    parser.add_argument("--max-tokens", type=int, default=1024, help="the most completion tokens of one choice")
    parser.add_argument("--chunk", type=int, default=8, help="decode steps between two looks at the rows")
    parser.add_argument("--no-warmup", action="store_true", help="skip compiling before the first request")
    args = parser.parse_args(argv)
    problems = [f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})"
                for name in ("slots", "max_model_len", "max_tokens", "chunk") if getattr(args, name) < 1]
    if not problems and args.max_tokens >= args.max_model_len:
        problems.append(f"--max-tokens ({args.max_tokens}) must be below --max-model-len ({args.max_model_len}): a "
                        "prompt needs room")
    if problems:
        parser.error("; ".join(problems))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    served = load_served(args.checkpoint, args.model_name)
    engine = Engine(served.graphdef, served.params, served.tokenizer, slots=args.slots, cache_size=args.max_model_len,
                    max_tokens=args.max_tokens, chunk=args.chunk).start()
    if not args.no_warmup:
        warm_up(engine)
    print(f"serving {served.name!r} ({served.source}) at http://{args.host}:{args.port}/v1", flush=True)
    try:
        uvicorn.run(create_app(engine, served.name, source=served.source), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        engine.stop()


def warm_up(engine: Engine) -> None:
    """Compile the programs of short prompts (default sampling) before the first client waits for them."""
    prompt = engine.tokenizer.encode(engine.tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}]))
    logging.info("compiled %d programs for short prompts", engine.warm_up(prompt))


if __name__ == "__main__":
    main()
