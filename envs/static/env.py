"""RAGEN's `static` env: one question-answer env over several datasets, each with its own answer check.

Observation: the question (MMLU-style rows add their lettered choices). Reward `1 / 2**k` for a correct answer on
attempt k (0-based); "Correct!" ends the episode, "Incorrect. Please think again." does not (the rollout's action
budget does, or `max_attempts`). Rows come from local files only (envs.static.files); with no data_path,
metamathqa uses the offline word problems of envs.metamathqa.generator.
"""

from __future__ import annotations

from typing import Any

from envs.metamathqa.generator import generate_problem
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys
from envs.records import seeded_index
from envs.static.catalog import dataset_spec
from envs.static.files import expected_layout, load_rows
from envs.static.rules import check_match_rule, score_answer

_LOCAL_DATA = ("ragen-jax never downloads a dataset: give data_path, a local file or folder (a JSONL/JSON/parquet "
               "copy, the hub repo's files, or a folder saved with datasets' save_to_disk); envs/static/README.md")
# RAGEN's StaticEnvConfig: dataset_name and split are our argument names too; these two load from the hub.
RAGEN_KEYS = RagenKeys(unsupported={"cache_dir": _LOCAL_DATA, "dataset_config": _LOCAL_DATA})


class StaticEnv(HostEnv):
    """Question answering over MetaMathQA, GSM8K, TheoremQA, MATH, MMLU or MMLU-STEM rows (RAGEN's `static`)."""

    ragen_keys = RAGEN_KEYS

    def __init__(self, dataset_name: str = "metamathqa", data_path: str | None = None, split: str | None = None,
                 max_instances: int | None = None, max_attempts: int | None = None,
                 answer_match: str = "ragen") -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None (no env-side cap), got {max_attempts}.")
        self.spec = dataset_spec(dataset_name)
        self.answer_match = check_match_rule(answer_match)
        if data_path is None and self.spec.name != "metamathqa":
            raise ValueError(f"static env: dataset_name={self.spec.name!r} needs data_path (only metamathqa has "
                             f"offline generated problems). {expected_layout(self.spec, split or self.spec.split)}")
        self.rows = load_rows(self.spec, data_path, split, max_instances) if data_path else None
        self.max_attempts = max_attempts
        self.question: str | None = None
        self.label: str | None = None
        self.attempt = 0

    def instruction(self) -> str:
        return self.spec.instruction

    def row_for_seed(self, seed: int) -> dict[str, Any]:
        """The row shown for `seed`: RAGEN's seeded pick from the data, or a generated MetaMathQA record."""
        if self.rows is None:
            return generate_problem(int(seed))
        return self.rows[seeded_index(seed, len(self.rows))]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.question, self.label = self.spec.processor(self.row_for_seed(seed))
        self.attempt = 0
        return self.question, {"label": self.label}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.question is None:
            raise RuntimeError("StaticEnv.step called before reset(seed).")
        correct, valid = score_answer(self.spec.check, str(action), self.label, self.answer_match)
        reward = 1.0 / (2 ** self.attempt) if correct else 0.0
        self.attempt += 1
        truncated = not correct and self.max_attempts is not None and self.attempt >= self.max_attempts
        observation = "Correct!" if correct else "Incorrect. Please think again."
        return observation, reward, correct, truncated, {"action_is_valid": valid, "success": correct}
