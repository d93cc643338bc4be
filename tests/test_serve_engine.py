"""The endpoint on a real tiny model (exported to a Hugging Face folder and loaded as `python -m ragen_jax.serve`
loads it): requests batched through the sampler's slots answer as they would alone, and max_tokens and stop strings
end choices where OpenAI's API says. The default test compiles three programs (a begin for 1 and for 2 rows, one
decode chunk); the slow ones send concurrent HTTP requests of every shape and check the warm-up."""

import concurrent.futures

import numpy as np
import openai
import pytest

from envs.serve.asgi import AsgiServer
from ragen_jax.serve.app import create_app
from ragen_jax.serve.engine import Engine, Job, Sampling, choice_keys
from ragen_jax.serve.weights import load_served
from serve_testlib import tiny_hf_folder

SLOTS, CONTEXT, MAX_TOKENS, CHUNK = 2, 128, 5, 4  # a budget of 5: the first token, then one chunk of 4


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    folder = tiny_hf_folder(tmp_path_factory.mktemp("serve") / "tiny-agent", tools_template=False)
    served = load_served(folder)
    engine = Engine(served.graphdef, served.params, served.tokenizer, slots=SLOTS, cache_size=CONTEXT,
                    max_tokens=MAX_TOKENS, chunk=CHUNK).start()
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


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_batched_requests_answer_as_alone_and_max_tokens_and_stop_end_them(endpoint):
    client, engine, served = endpoint
    tok = served.tokenizer
    [[alone]] = engine.generate([_job(tok, "Go left or right?", 11)], timeout_s=300)
    [[batched], [other]] = engine.generate([_job(tok, "Go left or right?", 11), _job(tok, "Question", 1)],
                                           timeout_s=300)
    assert (batched.tokens, batched.text) == (alone.tokens, alone.text) and other.tokens != alone.tokens
    for c in (alone, other):  # the budget ends a choice, unless its end-of-turn token came first
        assert (c.finish_reason, len(c.tokens)) == ("length", MAX_TOKENS) or (
            c.finish_reason == "stop" and len(c.tokens) < MAX_TOKENS)

    full = _ask(client, "Count", seed=5, max_tokens=MAX_TOKENS)
    text = full.choices[0].message.content
    assert (full.usage.completion_tokens, full.choices[0].finish_reason) == (MAX_TOKENS, "length")
    assert full.usage.prompt_tokens == len(tok.encode(tok.apply_chat_template([{"role": "user", "content": "Count"}])))
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = _ask(client, "Count", seed=5, max_tokens=MAX_TOKENS, stop=[stop, "never in it"]).choices[0]
    assert (cut.message.content, cut.finish_reason) == (text[:text.index(stop)], "stop")
    one = _ask(client, "Count", seed=5, max_tokens=1)
    assert one.usage.completion_tokens == 1 and text.startswith(one.choices[0].message.content)
    with pytest.raises(ValueError, match="do not fit"):
        engine.submit(_job(tok, "x", 0, budget=MAX_TOKENS + 1))
    with pytest.raises(ValueError, match=r"budgets must have one entry per row \(1\), each in \[1, max_new_tokens=5\]"):
        engine.sampler.begin(None, None, None, [0], [[1]], [1], [0], choice_keys(0, 1), engine.config,
                             budgets=[MAX_TOKENS + 1])  # refused before the cache or state is touched
    assert not engine.decoding.any() and engine.stats["requests_done"] == 6


@pytest.mark.slow  # compiles a begin per batch shape and a decode per chunk length
def test_after_the_warm_up_requests_of_short_prompts_compile_nothing(endpoint):
    client, engine, served = endpoint
    engine.warm_up(_job(served.tokenizer, "Hello", 0).prompt)
    programs = engine.sampler.num_programs
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda i: _ask(client, f"Question {i}", seed=i, max_tokens=2 + i), range(3)))
    assert [len(r.choices) for r in replies] == [1, 1, 1]
    assert engine.sampler.num_programs == programs


@pytest.mark.slow  # compiles a program for each batch shape the arrivals make, and greedy's
def test_concurrent_http_requests_of_every_shape(endpoint):
    client, engine, _ = endpoint
    alone = _ask(client, "Go left or right?", n=2, seed=11, max_tokens=4)
    others = [dict(content=f"Question {i}", n=1 + i % 2, max_tokens=2 + i, seed=i) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(5) as pool:  # 1 + 2 + 1 + 2 + 2 choices: more than the 2 slots
        futures = [pool.submit(_ask, client, **kw) for kw in others]
        again = pool.submit(_ask, client, "Go left or right?", n=2, seed=11, max_tokens=4)
        replies = [f.result(timeout=600) for f in futures]
    texts = [c.message.content for c in again.result(timeout=600).choices]
    assert texts == [c.message.content for c in alone.choices] and texts[0] != texts[1]
    for kw, reply in zip(others, replies):
        assert len(reply.choices) == kw["n"] and reply.usage.completion_tokens <= kw["n"] * kw["max_tokens"]
    greedy = [_ask(client, "hi", temperature=0, seed=seed, max_tokens=3).choices[0].message.content for seed in (1, 2)]
    assert greedy[0] == greedy[1]
    long = _ask(client, "hi", seed=3, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == MAX_TOKENS  # vLLM's extension: no end-of-turn token ends it
    assert not engine.decoding.any()
