"""Answer labels and answer checks of RAGEN's `static` env (ragen/env/static/utils.py), one per kind of dataset.

RAGEN's three checks, each -> (correct, valid):
- exact: equal after `normalize_text` (lower-case, all whitespace and ASCII punctuation removed); valid when the
  normalised answer is not empty.
- numeric: the first unsigned number (`\\d+(\\.\\d+)?`) of the answer equals the label's first number as floats,
  or the two are equal after `normalize_text`; valid when the answer holds a number. Signs and thousands commas
  are not read ("-5" matches "5", "1,250" reads as 1), as in RAGEN.
- choice: the first of the letters A-D anywhere in the upper-cased answer equals the label's letter (so
  "The answer is B" reads as "A", from "ANSWER"); with no letter in either, `normalize_text` equality; valid
  when the answer holds a letter A-D.
`rule="lenient"` (ours) judges correctness instead by envs.metamathqa.answers' lenient match for the free-form
checks (whitespace-free equality, LaTeX clean-up, exact numeric equality with signs and thousands commas: "-5" is
not "5") and, for choices, by the first standalone capital A-D ("(B)", "B.", "answer: B"), falling back to
RAGEN's scan when there is none. Validity is RAGEN's under both rules.
"""

from __future__ import annotations

import re
import string
from typing import Callable

from envs.metamathqa.answers import answers_match, matching_brace

MATCH_RULES = ("ragen", "lenient")

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_WS_RE = re.compile(r"\s+")
# RAGEN's label patterns, tried in order; each takes the rest of its line.
_LABEL_PATTERNS = tuple(re.compile(p, re.DOTALL) for p in (
    r"The answer is:?\s*(.*?)(?:\n|$)", r"Answer:?\s*(.*?)(?:\n|$)", r"Final answer:?\s*(.*?)(?:\n|$)",
    r"Therefore,\s*(.*?)(?:\n|$)", r"Thus,\s*(.*?)(?:\n|$)"))
_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
_LETTER_RE = re.compile(r"[A-D]")
_STANDALONE_LETTER_RE = re.compile(r"(?<![A-Za-z])([A-D])(?![A-Za-z])")

Check = Callable[[str, str], tuple[bool, bool]]


def check_match_rule(rule: str) -> str:
    """`rule` if it is one of MATCH_RULES, else a ValueError naming them."""
    if rule not in MATCH_RULES:
        raise ValueError(f"Unknown static env answer_match {rule!r}; use 'ragen' (RAGEN's check for the dataset) "
                         "or 'lenient' (RAGEN's check, plus LaTeX clean-up and exact numeric equality).")
    return rule


def normalize_text(text: str) -> str:
    """RAGEN's normalisation: lower-case, whitespace and ASCII punctuation removed ("3.5 m" -> "35m")."""
    return _WS_RE.sub("", text.lower()).translate(_PUNCTUATION)


def extract_answer_from_text(text: str) -> str:
    """RAGEN's label of a worked solution: the rest of the line after the first of "The answer is", "Answer",
    "Final answer", "Therefore,", "Thus," (tried in that order, case-sensitive), else the last line."""
    for pattern in _LABEL_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1).strip()
    return text.strip().split("\n")[-1].strip()


def last_boxed(text: str) -> str | None:
    r"""The content of the last `\boxed{...}` (or `\fbox{...}`) in `text`, braces balanced; None if there is none."""
    starts = [m.end() - 1 for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for open_at in reversed(starts):
        close = matching_brace(text, open_at)
        if close != -1:
            return text[open_at + 1:close].strip()
    return None


def exact_check(answer: str, label: str) -> tuple[bool, bool]:
    """RAGEN's exact-match check (module docstring) -> (correct, valid)."""
    normalized = normalize_text(answer)
    return normalized == normalize_text(label), len(normalized) > 0


def numeric_check(answer: str, label: str) -> tuple[bool, bool]:
    """RAGEN's numeric check (module docstring) -> (correct, valid)."""
    number, label_number = _NUMBER_RE.search(answer), _NUMBER_RE.search(label)
    correct = bool(number and label_number and float(number.group(0)) == float(label_number.group(0)))
    return correct or normalize_text(answer) == normalize_text(label), number is not None


def choice_check(answer: str, label: str) -> tuple[bool, bool]:
    """RAGEN's multiple-choice check (module docstring) -> (correct, valid)."""
    letter, label_letter = _LETTER_RE.search(answer.upper()), _LETTER_RE.search(label.upper())
    if letter and label_letter:
        return letter.group(0) == label_letter.group(0), True
    return normalize_text(answer) == normalize_text(label), letter is not None


def lenient_choice(answer: str, label: str) -> bool:
    """The first standalone capital A-D of the answer is the label's letter; RAGEN's check when it has none."""
    standalone = _STANDALONE_LETTER_RE.search(answer)
    if standalone is None:
        return choice_check(answer, label)[0]
    return standalone.group(1) == label.strip().upper()


CHECKS: dict[str, Check] = {"exact": exact_check, "numeric": numeric_check, "choice": choice_check}


def score_answer(check: str, answer: str, label: str, rule: str = "ragen") -> tuple[bool, bool]:
    """(correct, valid) of `answer` against `label` by RAGEN's `check` ("exact" | "numeric" | "choice"); under
    rule "lenient" correctness is ours (module docstring), validity stays RAGEN's."""
    correct, valid = CHECKS[check](answer, label)
    if rule == "lenient":
        correct = lenient_choice(answer, label) if check == "choice" else answers_match(answer, label, "lenient")
    return correct, valid
