"""HotpotQA/SQuAD answer scoring: normalisation, exact match, token F1, and the SearchQA reward
(1.0 on exact match, else F1 when F1 >= 0.3, else 0), best over all gold answers.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections import Counter
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str) -> tuple[float, float, float]:
    """(f1, precision, recall) over normalised tokens; yes/no/noanswer must match exactly."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


@dataclasses.dataclass(frozen=True)
class AnswerScore:
    reward: float
    exact_match: bool
    f1: float
    best_match: str


def score_answer(prediction: str, golds: str | Sequence[str], f1_threshold: float = 0.3,
                 correct_reward: float = 1.0, incorrect_reward: float = 0.0) -> AnswerScore:
    """The SearchQA reward of `prediction` against one or several gold answers."""
    golds = [golds] if isinstance(golds, str) else [str(g) for g in golds]
    best_f1, best = 0.0, ""
    for gold in golds:
        if exact_match(prediction, gold):
            return AnswerScore(correct_reward, True, 1.0, gold)
        f1 = f1_score(prediction, gold)[0]
        if f1 > best_f1:
            best_f1, best = f1, gold
    reward = correct_reward * best_f1 if best_f1 >= f1_threshold else incorrect_reward
    return AnswerScore(reward, False, best_f1, best)


_BOXED = re.compile(r"\\boxed\{([^}]+)\}")
_EMPHASIS = (re.compile(r"\*\*([^*]+)\*\*"), re.compile(r"\*([^*]+)\*"))
# Search anywhere, case-insensitive; unbounded words as in RAGEN ("so" also matches inside "also").
_ANSWER_PHRASES = (re.compile(r"(?:the\s+)?(?:correct\s+)?answer\s+is\s*:?\s*([^.!?]+)", re.IGNORECASE),
                   re.compile(r"(?:therefore|thus|so|hence)\s*,?\s*([^.!?]+)", re.IGNORECASE))


def extract_answer(text: str) -> str:
    """RAGEN's answer from free text (used when the action is not `finish[...]`), its rules in order:
    think blocks dropped, whitespace collapsed; then the first of: `\\boxed{X}`; the first bold `**X**`, else
    italic `*X*`, with more than 2 characters and a word character; the text after "answer is" or after
    "therefore / thus / so / hence" up to . ! or ?, edge punctuation stripped, if longer than 3 characters;
    the first sentence longer than 5 characters; the first 100 characters."""
    text = re.sub(r"<think>.*?</think>", "", text.strip(), flags=re.DOTALL)
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return ""
    boxed = _BOXED.search(text)
    if boxed:
        return boxed.group(1).strip()
    for pattern in _EMPHASIS:
        found = [m.strip() for m in pattern.findall(text) if len(m.strip()) > 2 and re.search(r"\w", m)]
        if found:
            return found[0]
    for pattern in _ANSWER_PHRASES:
        match = pattern.search(text)
        if match:
            answer = re.sub(r"^\W+|\W+$", "", match.group(1).strip())
            if len(answer) > 3:
                return answer
    sentences = [s.strip() for s in re.split(r"[.!?]+", text) if len(s.strip()) > 5]
    return sentences[0] if sentences else text[:100].strip()
