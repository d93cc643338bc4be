"""RAGEN's `static` env: question answering over local copies of MetaMathQA, GSM8K, TheoremQA, MATH, MMLU and
MMLU-STEM, each scored by RAGEN's answer check for it."""

from envs.static.catalog import DATASETS, DatasetSpec, dataset_spec
from envs.static.env import StaticEnv
from envs.static.files import load_rows
from envs.static.rules import (choice_check, exact_check, extract_answer_from_text, last_boxed, normalize_text,
                               numeric_check, score_answer)

__all__ = ["DATASETS", "DatasetSpec", "StaticEnv", "choice_check", "dataset_spec", "exact_check",
           "extract_answer_from_text", "last_boxed", "load_rows", "normalize_text", "numeric_check", "score_answer"]
