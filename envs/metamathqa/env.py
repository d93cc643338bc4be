"""MetaMathQA as a host env: answer a math question; reward 1/2^k for a correct answer on
attempt k (0-based); "Correct!" ends the episode, "Incorrect. Please think again." does not.

Questions come from a local MetaMathQA file (`data_path`: .json/.jsonl/.parquet with `query`
and `response` holding "The answer is: X"), picked per seed as the original does
(`random.seed(seed); random.randint(0, n - 1)`), or, with no file, from the offline generator.
`max_attempts` (default 1, RAGEN's max_actions_per_traj) truncates after that many wrong answers;
None leaves the cap to the rollout.
"""

from __future__ import annotations

from typing import Any

from envs.metamathqa.answers import answers_match, check_match_rule, extract_label, normalize_original
from envs.metamathqa.generator import generate_problem
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys
from envs.records import read_records, seeded_index

INSTRUCTION = "You are solving Math problems. "


def load_problems(path: str, max_instances: int | None = None) -> list[dict[str, Any]]:
    """Rows of a local MetaMathQA file; each must have `query` and `response` (clear error if not)."""
    rows = read_records(path, limit=max_instances)
    if not rows:
        raise ValueError(f"MetaMathQA file {path!r} has no rows.")
    for i, row in enumerate(rows):
        missing = [k for k in ("query", "response") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"MetaMathQA {path} row {i} lacks text field(s) {missing}; each row "
                             f"needs 'query' and 'response' (ending 'The answer is: X').")
    return rows


_LOCAL_DATA = ("ragen-jax never downloads a dataset: give data_path, a local JSON/JSONL/parquet copy of MetaMathQA's "
               "train rows (query, response); without it seeded offline problems are used")
# RAGEN's MetaMathQAEnvConfig names (a Hugging Face dataset it downloads) -> what ragen-jax offers.
RAGEN_KEYS = RagenKeys(fixed={"split": ("train", _LOCAL_DATA)},
                       unsupported={"dataset_path": _LOCAL_DATA, "cache_dir": _LOCAL_DATA})


class MetaMathQAEnv(HostEnv):
    """RAGEN's MetamathQA env over local data or seeded offline word problems."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, data_path: str | None = None, max_instances: int | None = None,
                 max_attempts: int | None = 1, answer_match: str = "lenient") -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None (no env-side cap), got {max_attempts}.")
        self.answer_match = check_match_rule(answer_match)  # an unknown rule fails here, not at the first answer
        self.data = load_problems(data_path, max_instances) if data_path else None
        self.max_attempts = max_attempts
        self.question: str | None = None
        self.label: str | None = None
        self.attempt = 0
        self.solved = False

    def instruction(self) -> str:
        return INSTRUCTION

    def problem_for_seed(self, seed: int) -> dict[str, Any]:
        """The record shown for `seed`: the original's seeded random row, or a generated one."""
        if self.data is None:
            return generate_problem(int(seed))
        return self.data[seeded_index(seed, len(self.data))]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        record = self.problem_for_seed(seed)
        self.question = record["query"]
        self.label = extract_label(record["response"])
        self.attempt = 0
        self.solved = False
        return self.question, {"label": self.label}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.question is None:
            raise RuntimeError("MetaMathQAEnv.step called before reset(seed).")
        text = action if isinstance(action, str) else str(action)
        correct = answers_match(text, self.label, self.answer_match)
        reward = 1.0 / (2 ** self.attempt) if correct else 0.0
        self.attempt += 1
        self.solved = correct
        truncated = (not correct and self.max_attempts is not None
                     and self.attempt >= self.max_attempts)
        info = {"action_is_valid": normalize_original(text) != "", "success": correct}
        observation = "Correct!" if correct else "Incorrect. Please think again."
        return observation, reward, correct, truncated, info
