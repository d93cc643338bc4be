"""Lean env end to end against the protocol stand-in server; client retries/auth; loader; no server."""

import json
import random
import socket
import time

import pytest

from envs import registry
from envs.lean.client import KiminaLeanClient, LeanServerError, LeanServerUnavailable
from envs.lean.env import LeanEnv
from envs.lean.problems import LeanTheorem, build_proof, load_theorems, parse_lean_file
from envs.lean.testing_server import StandInLeanServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def server():
    with StandInLeanServer() as srv:
        yield srv


def make_env(server, **kw):
    env = registry.make("Lean", server_url=server.url, **kw)
    env.reset(0)
    # Pick the two-step theorem deterministically.
    seed = next(s for s in range(50) if env.reset(s)[1]["theorem"] == "ragen_mul_subst")
    return env, seed


def test_instruction_is_ragens():
    """RAGEN's config/envs.yaml Lean env_instruction, verbatim: several '||'-separated tactics a turn (the config
    allows 4), not one."""
    env = registry.make("Lean", check_server=False)
    assert env.instruction() == (
        "You are a Lean theorem prover. Given a Lean theorem statement, propose a sequence of tactics that completes "
        "the proof. Think step by step about which tactics to apply next. Provide tactics separated by '||', for "
        "example <answer>intro || simp || rfl</answer>.")


def test_scripted_proof_rewards(server):
    env, seed = make_env(server)
    obs, info = env.reset(seed)
    assert "⊢ a * b = 6" in obs and "(no tactics yet)" in obs  # initial goals from a `sorry` check
    obs, r, term, trunc, info = env.step("linarith")
    assert r == pytest.approx(-1.1) and not info["accepted"] and not (term or trunc)
    assert "linarith failed" in obs and env.tactics == []
    obs, r, term, trunc, info = env.step("rw [h₀, h₁]")
    assert r == pytest.approx(0.9) and info["accepted"] and not term
    assert "⊢ 2 * 3 = 6" in obs and "UNSOLVED GOALS" in obs
    obs, r, term, trunc, info = env.step("norm_num")
    assert r == pytest.approx(10.9) and term and not trunc and info["success"]
    assert env.tactics == ["rw [h₀, h₁]", "norm_num"] and "theorem is proved" in obs
    # The server saw the full proof, built as RAGEN builds it (imports, statement, indented tactics).
    last_code = server.requests[-1]["snippets"][0]["code"]
    assert last_code.startswith("import Mathlib") and last_code.endswith("  rw [h₀, h₁]\n  norm_num\n")
    assert server.requests[-1]["timeout"] == 30


def test_observation_layout(server):
    """Our layout (docs/lean.md, "Differences from RAGEN"), pinned: RAGEN's first line, then the theorem, the
    informal statement, the accepted tactics, the last 5 attempts, the open goals and the last Lean messages."""
    env, seed = make_env(server)
    env.reset(seed)
    env.step("linarith")
    obs, *_ = env.step("rw [h₀, h₁]")
    assert obs == (
        "Steps taken: 2/100 | accepted tactics: 1\n\n"
        "Theorem:\ntheorem ragen_mul_subst (a b : ℝ) (h₀ : a = 2) (h₁ : b = 3) : a * b = 6 := by\n\n"
        "Informal statement:\nIf a = 2 and b = 3, show that a * b = 6.\n\n"
        "Proof so far:\n  rw [h₀, h₁]\n\n"
        "Recent attempts:\n  rejected: linarith\n  accepted: rw [h₀, h₁]\n\n"
        "Current goals:\na b : ℝ\nh₀ : a = 2\nh₁ : b = 3\n⊢ 2 * 3 = 6\n\n"
        "Last Lean feedback (accepted: True):\n"
        "  01. [UNSOLVED GOALS 5:0] unsolved goals\na b : ℝ\nh₀ : a = 2\nh₁ : b = 3\n⊢ 2 * 3 = 6")
    obs, *_ = env.step("norm_num")
    assert obs.endswith("\n\nNo goals: the theorem is proved.\n\nLast Lean feedback (accepted: True):\n"
                        "  (no Lean messages)")


def test_build_proof_indents_every_line_of_a_tactic():
    """docs/lean.md: each line of a multi-line tactic goes under the statement (RAGEN indents the first only)."""
    theorem = LeanTheorem("t", "theorem t (n : ℕ) : n + 0 = n := by")
    code = build_proof(theorem, ["induction n with\n| zero => simp\n| succ n ih => simp", "   "])
    assert code.endswith(":= by\n  induction n with\n  | zero => simp\n  | succ n ih => simp\n")


def test_seed_picks_ragens_theorem(server):
    """RAGEN seeds its env's `random.Random` with the episode seed and draws `choice(dataset)`: same list, same
    theorem per seed."""
    theorems = [LeanTheorem(f"t{i}", f"theorem t{i} : {i} = {i} := by") for i in range(7)]
    env = LeanEnv(server_url=server.url, theorems=theorems, show_initial_goals=False)
    for seed in (0, 1, 2, 123, 10000, 10007):
        ragen_rng = random.Random()
        ragen_rng.seed(seed)
        assert env.reset(seed)[1]["theorem"] == ragen_rng.choice(theorems).name


def test_empty_sorry_timeout_and_max_steps(server):
    env, seed = make_env(server, max_steps=3)
    env.reset(seed)
    _, r, term, trunc, info = env.step("   ")
    assert r == pytest.approx(-1.1) and not info["accepted"]
    _, r, _, _, info = env.step("sorry")
    assert r == pytest.approx(-1.1) and not info["accepted"]  # sorry never counts as progress
    _, r, term, trunc, info = env.step("sleep_forever")
    assert info["lean_status"] == "timeout"
    assert r == pytest.approx(-0.1 - 1 - 1 - 2) and trunc and not term  # timeout + max-steps penalty


def test_unknown_tactic_message(server):
    env, seed = make_env(server)
    env.reset(seed)
    _, _, _, _, info = env.step("rw [h₀, h₁]")
    _, r, _, _, info = env.step("frobnicate")
    assert not info["accepted"] and any("failed" in m or "unknown" in m for m in info["messages"])


def _free_url() -> str:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_no_server_fails_when_the_env_is_built():
    """Before any rollout: a clear error with the address and how to start a server, not a hang."""
    url = _free_url()
    t = time.monotonic()
    with pytest.raises(LeanServerUnavailable, match=rf"{url}.*docs/lean.md") as info:
        LeanEnv(server_url=url)
    assert time.monotonic() - t < 30  # refused at once; a hang would wait out 60 s HTTP timeouts
    assert isinstance(info.value, ConnectionError)  # run.py reports it as one FATAL line
    assert "--config.env.kwargs.server_url" in str(info.value)


def test_unchecked_env_fails_at_reset_instead(server):
    env = LeanEnv(server_url=_free_url(), check_server=False)
    with pytest.raises(LeanServerUnavailable, match="docs/lean.md"):
        env.reset(0)
    assert LeanEnv(server_url=server.url).reset(0)[1]["theorem"]  # with a server, build and reset work


def test_a_batch_probes_the_server_once(server):
    envs = [LeanEnv(server_url=server.url) for _ in range(8)]
    assert server.health_checks == 1
    envs[0].reset(0)
    assert server.health_checks == 1


def test_client_retries_transient_errors_and_sends_key():
    with StandInLeanServer(api_key="k3y", fail_first=2) as srv:
        client = KiminaLeanClient(srv.url, api_key="k3y", max_retries=3, backoff_s=0.01)
        [res] = client.check("import Mathlib\ntheorem ragen_add_zero (n : ℕ) : n + 0 = n := by\n  simp\n")
        assert res.error is None and res.response == {"env": 0}
        assert len(srv.requests) == 3
        with pytest.raises(LeanServerError, match="HTTP 401"):
            KiminaLeanClient(srv.url, api_key="wrong", max_retries=3, backoff_s=0.01).check("x")
    with StandInLeanServer(fail_first=5) as srv:
        with pytest.raises(LeanServerError, match="after 2 attempts"):
            KiminaLeanClient(srv.url, max_retries=2, backoff_s=0.01).check("x")


def test_loaders(tmp_path):
    rows = [{"name": "mathd_algebra_1", "formal_statement":
             "import Mathlib\nopen Real\n\ntheorem mathd_algebra_1 (x : ℝ) (h : 2 * x = 4) :\n    x = 2 := by sorry",
             "natural_language_statement": "Solve 2x = 4."}]
    p = tmp_path / "minif2f.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    [th] = load_theorems(p)
    assert th.name == "mathd_algebra_1" and th.imports == "import Mathlib" and th.preamble == "open Real"
    assert th.statement.endswith("x = 2 := by") and th.informal == "Solve 2x = 4."
    code = build_proof(th, ["linarith"])
    assert code == ("import Mathlib\nopen Real\ntheorem mathd_algebra_1 (x : ℝ) (h : 2 * x = 4) :\n"
                    "    x = 2 := by\n  linarith\n")
    lean = ("import Mathlib\nopen Nat\n\ntheorem a1 (n : ℕ) : n + 0 = n := by\n  sorry\n\n"
            "theorem a2 (x : ℝ) (h : x = 1) : x + 1 = 2 := by\n  sorry\n")
    ths = parse_lean_file(lean)
    assert [t.name for t in ths] == ["a1", "a2"] and all(t.statement.endswith(":= by") for t in ths)
    with pytest.raises(FileNotFoundError):
        load_theorems(tmp_path / "nope.jsonl")
