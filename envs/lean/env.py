"""Lean: prove a miniF2F theorem tactic by tactic against a Kimina Lean server (RAGEN's LeanEnv).

Each step appends one tactic to the accepted ones and checks the whole proof. A tactic is accepted
when Lean reports no error other than "unsolved goals" and no `sorry`; the proof is complete when
there is no error at all. Reward per step: -0.1, then +1 accepted / -1 rejected, +10 proved,
-1 on a Lean timeout, -2 when `max_steps` run out unproved.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

from envs.lean.client import KiminaLeanClient, LeanServerError, LeanServerUnavailable, ReplResult
from envs.lean.problems import BUILTIN_THEOREMS, DEFAULT_IMPORTS, LeanTheorem, build_proof, load_theorems
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys

# A batch builds many envs on one server: a URL that answered /health this recently is not probed again.
HEALTH_MEMO_S = 10.0
_last_healthy: dict[str, float] = {}

# RAGEN's Lean env_instruction (config/envs.yaml), verbatim.
INSTRUCTION = ("You are a Lean theorem prover. Given a Lean theorem statement, propose a sequence of tactics that "
               "completes the proof. Think step by step about which tactics to apply next. Provide tactics separated "
               "by '||', for example <answer>intro || simp || rfl</answer>.")


@dataclasses.dataclass
class CheckOutcome:
    """Classified server answer. status: valid | invalid | error | timeout | server_error."""

    status: str
    accepted: bool
    proved: bool
    messages: list[dict[str, Any]]
    goals: str = ""


def _is_unsolved(msg: dict[str, Any]) -> bool:
    return "unsolved goals" in str(msg.get("data", "")).lower()


def classify(result: ReplResult) -> CheckOutcome:
    """Kimina result -> accepted / proved / timeout, as RAGEN's LeanEnv decides them."""
    if result.error is not None:
        status = "timeout" if "timed out" in result.error.lower() else "server_error"
        return CheckOutcome(status, False, False, [{"severity": "error", "data": result.error}])
    resp = result.response or {}
    if "message" in resp:  # REPL-level error
        message = {"severity": "error", "data": resp["message"], "pos": resp.get("pos")}
        return CheckOutcome("error", False, False, [message])
    messages = list(resp.get("messages") or [])
    errors = [m for m in messages if str(m.get("severity", "")).lower() == "error"]
    sorries = list(resp.get("sorries") or [])
    accepted = not any(not _is_unsolved(m) for m in errors) and not sorries
    proved = not errors and not sorries
    goals = "\n\n".join(str(m.get("data", "")).split("\n", 1)[-1] for m in errors if _is_unsolved(m))
    goals = goals or "\n\n".join(str(s.get("goal", "")) for s in sorries)
    return CheckOutcome("valid" if accepted else "invalid", accepted, proved, messages, goals.strip())


def format_messages(messages: list[dict[str, Any]], limit: int = 0) -> list[str]:
    """'01. [ERROR 7:2] text' lines; 'unsolved goals' errors are labelled as such."""
    out = []
    for i, m in enumerate(messages, start=1):
        sev = str(m.get("severity", "info")).upper()
        data = str(m.get("data") or m.get("message") or "").strip()
        if sev == "ERROR" and _is_unsolved(m):
            sev = "UNSOLVED GOALS"
        if limit and len(data) > limit:
            data = data[: limit - 3] + "..."
        pos = m.get("pos") or {}
        where = f" {pos.get('line')}:{pos.get('column')}" if pos.get("line") is not None else ""
        out.append(f"{i:02d}. [{sev}{where}] {data}")
    return out or ["(no Lean messages)"]


# RAGEN's LeanEnvConfig names -> ours (the other keys are ours too).
RAGEN_KEYS = RagenKeys(
    renames={"dataset_name_or_path": "dataset_path"},
    unsupported={"dataset_split": "ragen-jax never downloads a dataset: dataset_path is a local file of one split's "
                                  "theorems; without it the built-in theorems are used"})


class LeanEnv(HostEnv):
    """`dataset_path`: miniF2F-style .jsonl/.json/.lean file; None -> two built-in theorems.

    The server is probed when the env is built (`check_server=False` defers that to the first reset),
    so a run without a Lean server stops before its first rollout with the address and how to start one.
    """

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, dataset_path: str | None = None, server_url: str = "http://127.0.0.1:8000",
                 api_key: str | None = None, request_timeout: float = 30.0, http_timeout: float = 60.0,
                 max_retries: int = 3, max_steps: int = 100, step_penalty: float = -0.1,
                 valid_step_reward: float = 1.0, invalid_step_reward: float = -1.0,
                 success_reward: float = 10.0, timeout_penalty: float = -1.0, max_steps_penalty: float = -2.0,
                 default_imports: str = DEFAULT_IMPORTS, message_truncate_limit: int = 0,
                 show_initial_goals: bool = True, theorems: list[LeanTheorem] | None = None,
                 client: KiminaLeanClient | None = None, check_server: bool = True):
        self.theorems = list(theorems) if theorems is not None else (
            load_theorems(dataset_path) if dataset_path else list(BUILTIN_THEOREMS))
        self.client = client or KiminaLeanClient(server_url, api_key, http_timeout, max_retries)
        self.request_timeout = request_timeout
        self.max_steps = max_steps
        self.rewards = dict(step=step_penalty, valid=valid_step_reward, invalid=invalid_step_reward,
                            success=success_reward, timeout=timeout_penalty, max_steps=max_steps_penalty)
        self.default_imports = default_imports
        self.message_truncate_limit = message_truncate_limit
        self.show_initial_goals = show_initial_goals
        self.step_timeout_s = max(60.0, (request_timeout + 5) * max_retries + 10)
        self._server_checked = False
        self.theorem: LeanTheorem | None = None
        self.tactics: list[str] = []
        self.log: list[tuple[str, bool]] = []
        self.last: CheckOutcome | None = None
        self.goals = ""
        self.num_steps = 0
        if check_server:
            self.check_available()

    def check_available(self) -> None:
        """Probe the server's /health; raises LeanServerUnavailable with its URL and how to start one."""
        url = self.client.api_url
        if time.monotonic() - _last_healthy.get(url, -HEALTH_MEMO_S) < HEALTH_MEMO_S:
            self._server_checked = True
            return
        try:
            self.client.health()
        except LeanServerError as e:
            raise LeanServerUnavailable(f"LeanEnv needs a running Lean server: {e}") from e
        _last_healthy[url] = time.monotonic()
        self._server_checked = True

    def instruction(self) -> str:
        return INSTRUCTION

    def _check(self, tactics: list[str]) -> CheckOutcome:
        code = build_proof(self.theorem, tactics, self.default_imports)
        try:
            result = self.client.check(code, timeout=int(self.request_timeout), debug=False, reuse=True)[0]
        except LeanServerError as e:
            status = "timeout" if "timed out" in str(e).lower() else "server_error"
            return CheckOutcome(status, False, False, [{"severity": "error", "data": str(e)}])
        return classify(result)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        if not self._server_checked:  # fail fast and clearly when no server runs
            self.check_available()
        self.theorem = random.Random(seed).choice(self.theorems)
        self.tactics, self.log, self.last, self.num_steps = [], [], None, 0
        self.goals = ""
        if self.show_initial_goals:
            start = self._check(["sorry"])
            if start.status in ("server_error", "timeout"):
                raise LeanServerError(f"Lean server could not check {self.theorem.name}: {start.messages[0]['data']}")
            self.goals = start.goals
        return self.render(), {"theorem": self.theorem.name}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.theorem is None:
            raise RuntimeError("call reset(seed) before step()")
        tactic = action.strip()
        if not tactic:
            outcome = CheckOutcome("invalid", False, False,
                                   [{"severity": "error", "data": "Empty tactic is not allowed."}])
        else:
            outcome = self._check(self.tactics + [tactic])
        r = self.rewards
        reward = r["step"] + (r["valid"] if outcome.accepted else r["invalid"])
        reward += r["success"] if outcome.proved else 0.0
        reward += r["timeout"] if outcome.status == "timeout" else 0.0
        if outcome.accepted:
            self.tactics.append(tactic)
            self.goals = outcome.goals
        self.num_steps += 1
        self.log.append((tactic, outcome.accepted))
        self.last = outcome
        truncated = not outcome.proved and self.num_steps >= self.max_steps
        reward += r["max_steps"] if truncated else 0.0
        info = {"success": outcome.proved, "action_is_valid": outcome.accepted,
                "action_is_effective": outcome.accepted, "accepted": outcome.accepted,
                "lean_status": outcome.status,
                "messages": format_messages(outcome.messages, self.message_truncate_limit)}
        return self.render(), float(reward), outcome.proved, truncated, info

    def render(self) -> str:
        """Theorem, informal statement, accepted tactics, open goals, last Lean feedback."""
        th = self.theorem
        lines = [f"Steps taken: {self.num_steps}/{self.max_steps} | accepted tactics: {len(self.tactics)}", "",
                 "Theorem:", th.statement]
        if th.informal:
            lines += ["", "Informal statement:", th.informal]
        lines += ["", "Proof so far:"] + ([f"  {t}" for t in self.tactics] or ["  (no tactics yet)"])
        if self.log:
            lines += ["", "Recent attempts:"] + [f"  {'accepted' if ok else 'rejected'}: {t or '(empty)'}"
                                                  for t, ok in self.log[-5:]]
        if self.last is not None and self.last.proved:
            lines += ["", "No goals: the theorem is proved."]
        elif self.goals:
            lines += ["", "Current goals:", self.goals]
        if self.last is not None:
            lines += ["", f"Last Lean feedback (accepted: {self.last.accepted}):"]
            lines += ["  " + m for m in format_messages(self.last.messages, self.message_truncate_limit)]
        return "\n".join(lines)
