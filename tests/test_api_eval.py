"""`--mode=eval` of an OpenAI-compatible endpoint (model.api_base): a stub HTTP server on 127.0.0.1 answers Bandit's
turns with scripted replies, so the messages sent, the parsing and the env path are checked exactly; an endpoint
that is down or answers garbage fails its episodes with the reason recorded while the eval finishes; our own
server (ragen_jax.serve's app, a scripted engine) is evaluated through its HTTP side."""

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from configs.bandit import get_config
from envs.bandit.env import ARM_PAIRS
from ragen_jax.config import validate_config
from ragen_jax.errors import ConfigError
from ragen_jax.trainer.api_eval import API_ERROR, run_api_eval

HIGH_ARMS = {hi for pairs in ARM_PAIRS.values() for _, hi in pairs}
LOW_ARMS = {lo for pairs in ARM_PAIRS.values() for lo, _ in pairs}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _arms(messages) -> list[str]:
    """The two arm names the episode's first user message shows."""
    words = re.findall(r"[A-Za-z]+", messages[1]["content"])
    return [w for w in words if w in HIGH_ARMS | LOW_ARMS]


def _reply(body: dict, answer: str) -> dict:
    text = answer.format(hi=next(a for a in _arms(body["messages"]) if a in HIGH_ARMS),
                         lo=next(a for a in _arms(body["messages"]) if a in LOW_ARMS))
    return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}}


@pytest.fixture
def stub():
    """stub(answer=..., status=200, garbage=False) -> (url, requests seen): a bounded chat-completions server whose
    reply is `answer` formatted with the episode's {hi} and {lo} arm names."""
    servers = []

    def start(answer="<think>risk pays</think><answer>{hi}</answer>", status=200, garbage=False, fail_first=0,
              delay=0.0):
        seen, flight = [], {"now": 0, "most": 0}
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    seen.append((self.path, body, self.headers.get("Authorization")))
                    flight["now"] += 1
                    flight["most"] = max(flight["most"], flight["now"])
                    failing = len(seen) <= fail_first
                time.sleep(delay)
                with lock:
                    flight["now"] -= 1
                payload = b"<html>not json" if garbage else json.dumps(_reply(body, answer)).encode()
                self.send_response(500 if failing else status)
                self.send_header("Content-Type", "text/html" if garbage else "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        start.most_in_flight = lambda: flight["most"]
        return f"http://127.0.0.1:{server.server_address[1]}/v1", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _run(url: str, **overrides):
    c = get_config("tiny")
    c.val.groups, c.val.group_size, c.val.batch_size = 3, 2, 6
    c.model.api_base, c.model.api_model = url, "stub-model"
    c.model.api_retries, c.model.api_timeout_s, c.model.api_concurrency = 0, 5.0, 4
    for key, value in overrides.items():
        node = c
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return validate_config(c, mode="eval")


def test_scripted_high_arm_answers_succeed_and_the_requests_are_ragen_messages(stub, tmp_path, capsys):
    url, seen = stub()
    run = _run(url)
    metrics = run_api_eval(run, str(tmp_path))
    assert metrics["val/Bandit/success"] == 1.0
    assert metrics["val/Bandit/env_error"] == 0.0 and metrics["val/api/failed_episodes"] == 0.0
    assert metrics["eval/num_episodes"] == 6.0 and metrics["val/api/completion_tokens"] == 7.0
    assert len(seen) == 6  # Bandit: one turn an episode
    path, body, _ = seen[0]
    assert path == "/v1/chat/completions" and body["model"] == "stub-model"
    assert body["max_tokens"] == run.rollout.response_length and body["temperature"] == run.val.temperature
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"].startswith("You're a helpful assistant.")
    assert "Max response length" in body["messages"][1]["content"]
    out = tmp_path / "eval" / "api_stub-model"
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads((out / "metrics.json").read_text())["val/Bandit/success"] == 1.0
    assert "Bandit: success 1.000 over 6 of 6 episodes" in capsys.readouterr().out


def test_low_arm_and_unparsable_answers_score_as_the_rollout_scores_them(stub, tmp_path):
    url, _ = stub(answer=" safe</think> <answer>{lo}</answer>")  # the rollout opens with <think>
    metrics = run_api_eval(_run(url), str(tmp_path))
    assert metrics["val/Bandit/success"] == 0.0 and metrics["val/api/failed_episodes"] == 0.0
    url, seen = stub(answer="I pick the second one")  # no <answer>: an invalid turn, the env does not pull
    metrics = run_api_eval(_run(url, **{"env.max_turn": 2}), str(tmp_path))
    assert metrics["val/Bandit/success"] == 0.0 and metrics["val/Bandit/env_error"] == 0.0
    assert len(seen) == 12  # two invalid turns an episode, then the turn cap
    messages = seen[-1][1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "<think>I pick the second one"  # read after the opening <think>
    assert "No valid action provided previously" in messages[-1]["content"]


def test_requests_are_bounded_retried_and_carry_the_key(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    url, seen = stub(fail_first=1, delay=0.05)
    metrics = run_api_eval(_run(url, **{"model.api_retries": 1, "model.api_concurrency": 2}), str(tmp_path))
    assert metrics["val/api/failed_episodes"] == 0.0 and metrics["val/Bandit/success"] == 1.0
    assert len(seen) == 7  # one 500, retried, and six answers
    assert stub.most_in_flight() == 2
    assert {auth for _, _, auth in seen} == {"Bearer sk-secret-test"}
    out = tmp_path / "eval" / "api_stub-model"
    assert not any("sk-secret-test" in f.read_text() for f in out.iterdir() if f.is_file())


@pytest.mark.parametrize("how", ["garbage", "500", "down"])
def test_a_broken_endpoint_fails_its_episodes_with_the_reason_and_the_eval_finishes(stub, tmp_path, capsys, how):
    if how == "down":
        url, _ = stub()
        url = url.rsplit(":", 1)[0] + ":9/v1"  # the discard port: nothing listens on loopback
    else:
        url, _ = stub(garbage=how == "garbage", status=500 if how == "500" else 200)
    metrics = run_api_eval(_run(url), str(tmp_path))
    assert metrics["val/api/failed_episodes"] == 6.0 and metrics["val/Bandit/env_error"] == 1.0
    records = [json.loads(line) for line in
               (tmp_path / "eval" / "api_stub-model" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 6
    assert all(API_ERROR in json.dumps(r) for r in records)
    assert "6 failed at the endpoint" in capsys.readouterr().out


def test_api_base_is_refused_for_training_and_needs_a_model_name():
    c = get_config("tiny")
    c.model.api_base = "http://127.0.0.1:1/v1"
    with pytest.raises(ConfigError, match="--mode=eval"):
        validate_config(c, mode="train")
    with pytest.raises(ConfigError, match="api_model"):
        validate_config(c, mode="eval")


@pytest.mark.slow
def test_our_own_server_is_evaluated_through_its_http_side(tmp_path):
    """ragen_jax.serve's app (a scripted engine on the tiny tokenizer) behind a real HTTP server on 127.0.0.1."""
    from envs.serve.asgi import AsgiServer
    from ragen_jax.models import load_tiny_tokenizer
    from ragen_jax.serve.app import create_app
    sys.path.insert(0, os.path.dirname(__file__))
    from serve_testlib import ScriptedEngine

    # the arms of seeds 0..2 are unknown to a scripted engine: it names Trader each time (the high arm of pair 0)
    engine = ScriptedEngine(load_tiny_tokenizer(), ["<think>x</think><answer>Trader</answer>"] * 6, cache_size=4096, max_tokens=64)
    thread = AsgiServer(create_app(engine, "tiny-agent")).start()
    try:
        metrics = run_api_eval(_run(thread.url + "/v1", **{"model.api_model": "tiny-agent"}), str(tmp_path))
    finally:
        thread.stop()
    assert len(engine.jobs) == 6 and metrics["val/api/failed_episodes"] == 0.0
    assert metrics["eval/num_episodes"] == 6.0 and 0.0 <= metrics["val/Bandit/success"] <= 1.0


@pytest.mark.slow
def test_run_py_evaluates_an_endpoint_without_a_local_model(stub, tmp_path):
    url, seen = stub()
    cmd = [sys.executable, "run.py", "--mode=eval", "--config", "configs/bandit.py:tiny", f"--workdir={tmp_path}",
           f"--config.model.api_base={url}", "--config.model.api_model=stub-model", "--config.val.groups=2",
           "--config.val.batch_size=2", "--config.val.group_size=1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout[done.stdout.index("{"):])["val/Bandit/success"] == 1.0
    assert len(seen) == 2


@pytest.mark.slow
def test_our_own_server_on_the_tiny_model_gives_per_env_metrics(tmp_path):
    """python -m ragen_jax.serve's engine on the tiny model (an HF export) behind HTTP on 127.0.0.1: its untrained
    answers are scored, whatever they say, and every episode finishes without an endpoint failure."""
    from envs.serve.asgi import AsgiServer
    from ragen_jax.serve.app import create_app
    from ragen_jax.serve.engine import Engine
    from ragen_jax.serve.weights import load_served
    sys.path.insert(0, os.path.dirname(__file__))
    from serve_testlib import tiny_hf_folder

    served = load_served(tiny_hf_folder(tmp_path / "tiny-agent", tools_template=False))
    engine = Engine(served.graphdef, served.params, served.tokenizer, slots=4, cache_size=2048, max_tokens=16,
                    chunk=8).start()
    thread = AsgiServer(create_app(engine, served.name, source=served.source)).start()
    try:
        metrics = run_api_eval(_run(thread.url + "/v1", **{"model.api_model": served.name, "model.api_timeout_s": 300.0}),
                               str(tmp_path))  # the first requests compile
    finally:
        thread.stop()
        engine.stop()
    assert metrics["val/api/failed_episodes"] == 0.0 and metrics["eval/num_episodes"] == 6.0
    assert {"val/Bandit/success", "val/Bandit/action_is_valid", "val/Bandit/pass_at_2"} <= set(metrics)
    assert metrics["val/api/completion_tokens"] == 16.0  # the untrained model runs to max_tokens
    records = [json.loads(line) for line in
               (tmp_path / "eval" / f"api_{served.name}" / "rollouts.jsonl").read_text().splitlines()]
    assert all(r["messages"][-1]["role"] == "assistant" for r in records)


def test_the_tool_call_format_is_refused_before_any_request(stub, tmp_path):
    url, seen = stub()
    with pytest.raises(ConfigError, match="action_format='answer'"):
        run_api_eval(_run(url).replace(**{"rollout.action_format": "tool_call"}), str(tmp_path))
    assert seen == []
