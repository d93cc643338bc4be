"""The HTTP side of the endpoint: a Starlette app (`/v1/chat/completions`, `/v1/models`, `/health`) in front of one
`Engine`, served by uvicorn.

Why Starlette and uvicorn rather than the standard library's `http.server`: every request waits for the engine,
and many wait at once (a batch of 64 is 64 open connections). An asyncio server holds each one as a suspended
coroutine on one thread, where `ThreadingHTTPServer` would hold a thread per connection; uvicorn also brings a
complete HTTP/1.1 implementation (keep-alive, pipelining, graceful shutdown), and it is what vLLM and SGLang serve
OpenAI's API with. Starlette rather than FastAPI: the request schema is OpenAI's, checked by `chat.py` into the
400 answers OpenAI's clients expect, so FastAPI's pydantic layer (and its 422 answers) would only stand in between.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from envs.serve.http import HttpError, parse_json_object
from ragen_jax.serve.chat import ChatRequest, RequestError, completion_body, parse_chat_request, render_prompt
from ragen_jax.serve.engine import Engine, EngineStopped, Job, choice_keys

MAX_BODY_BYTES = 16 << 20


def error_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    """OpenAI's error body."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


def create_app(engine: Engine, model: str, *, source: str = "") -> Starlette:
    """The endpoint for `engine`'s model, called `model` by clients."""
    created = int(time.time())
    card = {"id": model, "object": "model", "created": created, "owned_by": "ragen-jax", "root": source or model,
            "max_model_len": engine.cache_size}

    def prepare(body: dict[str, Any]) -> tuple[ChatRequest, Job]:
        request = parse_chat_request(body, model=model, slots=engine.slots)
        prompt = render_prompt(engine.tokenizer, request)
        budget = token_budget(len(prompt), request.max_tokens, engine.cache_size, engine.max_tokens)
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        return request, Job(np.asarray(prompt, np.int32), request.n, budget, request.sampling,
                            choice_keys(seed, request.n), request.stop)

    async def chat_completions(http: Request) -> JSONResponse:
        raw = await http.body()
        if len(raw) > MAX_BODY_BYTES:
            return error_response(413, f"Body of {len(raw)} bytes exceeds the {MAX_BODY_BYTES}-byte limit.")
        try:
            body = parse_json_object(raw)
            request, job = await run_in_threadpool(prepare, body)
            completions = await asyncio.wrap_future(engine.submit(job))
        except HttpError as e:
            return error_response(e.status, e.message)
        except RequestError as e:
            return error_response(e.status, e.message, e.param, e.code)
        except EngineStopped as e:
            return error_response(503, str(e))
        except Exception as e:  # noqa: BLE001 - the server keeps serving; the client learns what failed
            return error_response(500, f"Generation failed: {type(e).__name__}: {e}")
        return JSONResponse(completion_body(request, completions, len(job.prompt)))

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [card]})

    async def one_model(http: Request) -> JSONResponse:
        if http.path_params["name"] != model:
            return error_response(404, f"The model {http.path_params['name']!r} does not exist here; this server "
                                       f"serves {model!r}.", "model", "model_not_found")
        return JSONResponse(card)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "model": model, "slots": engine.slots, "stats": dict(engine.stats)})

    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        return error_response(e.status_code, f"{e.detail}: see GET /v1/models and POST /v1/chat/completions.")

    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]), Route("/v1/models/{name:path}", one_model, methods=["GET"]),
              Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def token_budget(prompt_tokens: int, max_tokens: int | None, context: int, cap: int) -> int:
    """The completion tokens a request gets: its max_tokens, or as many as fit; RequestError when none fit."""
    room = context - prompt_tokens
    if max_tokens is None:
        if room < 1:
            raise RequestError(f"This model's maximum context length is {context} tokens. However, your messages "
                               f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
                               "messages", "context_length_exceeded")
        return min(cap, room)
    if max_tokens > cap:
        raise RequestError(f"'max_tokens' is {max_tokens}; this server answers with at most {cap} tokens "
                           "(its --max-tokens).", "max_tokens")
    if max_tokens > room:
        raise RequestError(f"This model's maximum context length is {context} tokens. However, you requested "
                           f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                           "the completion). Please reduce the length of the messages or completion.",
                           "messages", "context_length_exceeded")
    return max_tokens
