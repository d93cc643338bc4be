"""The endpoint on a real tiny model (exported to a Hugging Face folder and loaded as `python -m ragen_jax.serve`
loads it): requests batched through the sampler's slots answer as they would alone, and max_tokens and stop strings
end choices where OpenAI's API says. The default tests share one engine and a handful of compiled programs (one
budget, batches of 1 and 4 rows); the slow one sends concurrent HTTP requests of every shape."""

import concurrent.futures

import numpy as np
import openai
import pytest

from envs.serve.asgi import AsgiServer
from ragen_jax.serve.app import create_app
from ragen_jax.serve.engine import Engine, Job, Sampling, choice_keys
from ragen_jax.serve.weights import load_served
from serve_testlib import tiny_hf_folder

SLOTS, CONTEXT, MAX_TOKENS = 4, 128, 8


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    folder = tiny_hf_folder(tmp_path_factory.mktemp("serve") / "tiny-agent", tools_template=False)
    served = load_served(folder)
    engine = Engine(served.graphdef, served.params, served.tokenizer, slots=SLOTS, cache_size=CONTEXT,
                    max_tokens=MAX_TOKENS, chunk=4).start()
    thread = AsgiServer(create_app(engine, served.name, source=served.source)).start()
    client = openai.OpenAI(base_url=thread.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    yield client, engine, served
    thread.stop()
    engine.stop()


def _ask(client, content, **kwargs):
    return client.chat.completions.create(model="tiny-agent", messages=[{"role": "user", "content": content}],
                                          **kwargs)


def _job(tokenizer, content: str, seed: int, budget: int = MAX_TOKENS, sampling=Sampling()) -> Job:
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}])
    return Job(np.asarray(tokenizer.encode(text), np.int32), 1, budget, sampling, choice_keys(seed, 1))


def test_a_seeded_request_answers_alike_alone_and_batched_with_others(endpoint):
    _, engine, served = endpoint
    tok = served.tokenizer
    [alone] = engine.generate([_job(tok, "Go left or right?", 11)], timeout_s=300)[0:1]
    batch = [_job(tok, "Go left or right?", 11)] + [_job(tok, f"Question {i}", i) for i in range(3)]
    begun = engine.stats["requests_begun"]
    replies = engine.generate(batch, timeout_s=300)
    assert replies[0][0].tokens == alone[0].tokens and replies[0][0].text == alone[0].text
    assert len({r[0].tokens for r in replies}) == 4  # each its own prompt and key
    for [reply] in replies:  # the budget ends a choice, unless its end-of-turn token came first
        assert (reply.finish_reason, len(reply.tokens)) == ("length", MAX_TOKENS) or (
            reply.finish_reason == "stop" and len(reply.tokens) < MAX_TOKENS)
    assert engine.stats["requests_begun"] == begun + 4 and not engine.decoding.any()


def test_max_tokens_and_stop_strings_end_a_choice_where_openai_says(endpoint):
    client, engine, _ = endpoint
    full = _ask(client, "Count", seed=5, max_tokens=MAX_TOKENS)
    choice = full.choices[0]
    assert full.usage.completion_tokens == MAX_TOKENS and choice.finish_reason == "length"
    text = choice.message.content
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = _ask(client, "Count", seed=5, max_tokens=MAX_TOKENS, stop=[stop, "never in it"]).choices[0]
    assert cut.message.content == text[:text.index(stop)] and cut.finish_reason == "stop"
    short = _ask(client, "Count", seed=5, max_tokens=3)
    assert short.usage.completion_tokens == 3 and text.startswith(short.choices[0].message.content)
    with pytest.raises(ValueError, match="do not fit"):
        engine.submit(_job(engine.tokenizer, "x", 0, budget=MAX_TOKENS + 1))
    with pytest.raises(ValueError, match=r"budgets must have one entry per row \(1\), each in \[1, max_new_tokens=8\]"):
        engine.sampler.begin(None, None, None, [0], [[1]], [1], [0], choice_keys(0, 1), engine.config,
                             budgets=[MAX_TOKENS + 1])  # refused before the cache or state is touched


@pytest.mark.slow  # compiles a program for each batch shape the arrivals make, and greedy's
def test_concurrent_http_requests_of_every_shape(endpoint):
    client, engine, served = endpoint
    alone = _ask(client, "Go left or right?", n=2, seed=11, max_tokens=6)
    others = [dict(content=f"Question {i}", n=1 + i % 2, max_tokens=3 + i, seed=i) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(5) as pool:  # 1 + 2 + 1 + 2 + 1 choices: more than the 4 slots
        futures = [pool.submit(_ask, client, **kw) for kw in others]
        again = pool.submit(_ask, client, "Go left or right?", n=2, seed=11, max_tokens=6)
        replies = [f.result(timeout=600) for f in futures]
    texts = [c.message.content for c in again.result(timeout=600).choices]
    assert texts == [c.message.content for c in alone.choices] and texts[0] != texts[1]
    for kw, reply in zip(others, replies):
        assert len(reply.choices) == kw["n"] and reply.usage.completion_tokens <= kw["n"] * kw["max_tokens"]
    greedy = [_ask(client, "hi", temperature=0, seed=seed, max_tokens=5).choices[0].message.content for seed in (1, 2)]
    assert greedy[0] == greedy[1]
    assert not engine.decoding.any()
