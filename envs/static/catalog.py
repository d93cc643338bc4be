"""The datasets of the static env: how a row becomes (question, label), which answer check scores it, and where
the data comes from.

RAGEN (ragen/env/static/utils.py) registers metamathqa, gsm8k and mmlu (cais/mmlu, abstract_algebra), and keeps
theoremqa commented out with its processor; its env's docstring also names MATH and MMLU-STEM, for which it
has no entry. Here all five run: MMLU-STEM rows have MMLU's columns and take its processor and check; MATH has
no RAGEN processor, so ours takes the `answer` column when a row has one (MATH-500) or else the last
`\\boxed{...}` of `solution`, and uses RAGEN's exact check (its check for free-form MetaMathQA labels).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from envs.static.rules import extract_answer_from_text, last_boxed

Processor = Callable[[dict[str, Any]], tuple[str, str]]

MATH_INSTRUCTION = "You are solving Math problems. "  # RAGEN's MetamathQA env_instruction
CHOICE_INSTRUCTION = ("You are answering multiple-choice questions. Give the letter (A, B, C or D) of the "
                      "correct choice as your answer. ")


def process_metamathqa(row: dict[str, Any]) -> tuple[str, str]:
    """MetaMathQA: `query`; the label is RAGEN's reading of `response` (the line after "The answer is:")."""
    return row["query"], extract_answer_from_text(row["response"])


def process_gsm8k(row: dict[str, Any]) -> tuple[str, str]:
    """GSM8K: `question`; the label is the lower-cased text after "####" in `answer`."""
    answer = row["answer"]
    if "####" not in answer:
        raise ValueError(f"GSM8K answer {answer[-80:]!r} has no '####' before its final number.")
    return row["question"], answer.split("####")[1].strip().lower()


def process_theoremqa(row: dict[str, Any]) -> tuple[str, str]:
    """TheoremQA: `Question`; the label is `str(Answer)` (numbers, lists and booleans as Python prints them)."""
    return row["Question"], str(row["Answer"])


def process_math(row: dict[str, Any]) -> tuple[str, str]:
    """MATH: `problem`; the label is `answer` when the row has one, else the last \\boxed{} of `solution`."""
    if isinstance(row.get("answer"), str) and row["answer"].strip():
        return row["problem"], row["answer"].strip()
    boxed = last_boxed(row.get("solution") or "")
    if boxed is None:
        raise ValueError("MATH row has neither an 'answer' nor a \\boxed{...} answer in its 'solution'.")
    return row["problem"], boxed


def process_mmlu(row: dict[str, Any]) -> tuple[str, str]:
    """MMLU / MMLU-STEM: the question, then one line per choice ("A. ..."); the label is the answer's letter
    (`answer` is the choice's 0-based index, or already a letter)."""
    choices = list(row["choices"])
    lines = [f"{chr(65 + i)}. {choice}" for i, choice in enumerate(choices)]
    answer = row["answer"]
    letter = answer.strip().upper() if isinstance(answer, str) else chr(65 + int(answer))
    return row["question"] + "\n" + "\n".join(lines), letter


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the static env.

    columns: what every row must hold (any of a tuple's names in `one_of`); split: the split used when none is
    given; hub: where the data is published (`datasets.load_dataset` arguments, for the download hint only)."""

    name: str
    processor: Processor
    check: str  # "exact" | "numeric" | "choice" (envs.static.rules)
    columns: tuple[str, ...]
    split: str
    hub: str
    instruction: str
    one_of: tuple[str, ...] = ()


DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    DatasetSpec("metamathqa", process_metamathqa, "exact", ("query", "response"), "train",
                "'meta-math/MetaMathQA'", MATH_INSTRUCTION),
    DatasetSpec("gsm8k", process_gsm8k, "numeric", ("question", "answer"), "train", "'openai/gsm8k', 'main'",
                MATH_INSTRUCTION),
    DatasetSpec("theoremqa", process_theoremqa, "numeric", ("Question", "Answer"), "test", "'TIGER-Lab/TheoremQA'",
                MATH_INSTRUCTION),
    DatasetSpec("math", process_math, "exact", ("problem",), "test", "'HuggingFaceH4/MATH-500' (or a "
                "hendrycks MATH copy)", MATH_INSTRUCTION, one_of=("answer", "solution")),
    DatasetSpec("mmlu", process_mmlu, "choice", ("question", "choices", "answer"), "test",
                "'cais/mmlu', 'abstract_algebra'", CHOICE_INSTRUCTION),
    DatasetSpec("mmlu_stem", process_mmlu, "choice", ("question", "choices", "answer"), "test",
                "'TIGER-Lab/MMLU-STEM'", CHOICE_INSTRUCTION),
)}


def dataset_spec(name: str) -> DatasetSpec:
    """The spec of dataset `name` (case-insensitive; "mmlu-stem" is "mmlu_stem"), or a ValueError listing them."""
    key = name.strip().lower().replace("-", "_")
    if key not in DATASETS:
        raise ValueError(f"Unknown static env dataset_name {name!r}; use one of {', '.join(DATASETS)}.")
    return DATASETS[key]


def row_problem(spec: DatasetSpec, row: dict[str, Any], where: str) -> str | None:
    """What row `row` lacks for dataset `spec` (None if nothing), naming the row as `where`."""
    missing = [c for c in spec.columns if row.get(c) is None]
    if spec.one_of and all(row.get(c) is None for c in spec.one_of):
        missing.append(" or ".join(spec.one_of))
    if missing:
        return (f"{where} lacks column(s) {missing}; {spec.name} rows need {', '.join(spec.columns)}"
                f"{' and ' + ' or '.join(spec.one_of) if spec.one_of else ''}.")
    return None
