"""RAGEN's static env answer checks and row processors, from hand-worked cases (ragen/env/static/utils.py)."""

import pytest

from envs.static import (DATASETS, choice_check, exact_check, extract_answer_from_text, last_boxed,
                         normalize_text, numeric_check, score_answer)
from envs.static.catalog import process_gsm8k, process_math, process_metamathqa, process_mmlu, process_theoremqa
from envs.metamathqa import extract_label


def test_normalize_text_drops_case_whitespace_and_punctuation():
    assert normalize_text("  The Answer: 3.5 m! ") == "theanswer35m"
    assert normalize_text("\\frac{1}{2}") == "frac12"
    assert normalize_text("?!.") == ""


@pytest.mark.parametrize("text,label", [
    ("Work.\nThe answer is: 42", "42"),
    ("The answer is 7\nand then more text", "7"),          # the rest of the line only
    ("Thus, 5 apples\nAnswer: 6", "6"),                   # "Answer" is tried before "Thus,"
    ("so the Final answer: 9", "9"),                      # "Answer:" inside "Final answer:" matches first
    ("Therefore, x = 4.", "x = 4."),
    ("the answer is: 3\n", "the answer is: 3"),           # case-sensitive: no pattern, so the last line
    ("line one\nline two  ", "line two"),
])
def test_extract_answer_from_text_follows_ragens_pattern_order(text, label):
    assert extract_answer_from_text(text) == label


def test_static_label_differs_from_the_metamathqa_envs_on_a_multi_line_tail():
    response = "Steps.\nThe answer is: 5\nCheck: ok"
    assert extract_answer_from_text(response) == "5"        # RAGEN's static env: to the end of the line
    assert extract_label(response) == "5\nCheck: ok"        # RAGEN's MetamathQA env: to the end of the text


@pytest.mark.parametrize("answer,label,correct,valid", [
    ("1/2", "1/2", True, True),
    ("12", "1.2", True, True),           # punctuation removed: RAGEN reads 1.2 as "12"
    ("Forty Two", "fortytwo", True, True),
    ("\\boxed{5}", "5", False, True),
    ("", "5", False, False),
    ("...", "5", False, False),
])
def test_exact_check(answer, label, correct, valid):
    assert exact_check(answer, label) == (correct, valid)


@pytest.mark.parametrize("answer,label,correct,valid", [
    ("The total is 18 dollars", "18", True, True),
    ("18.0", "18", True, True),
    ("3 and 4", "3", True, True),        # the first number decides
    ("-5", "5", True, True),             # no sign is read
    ("1,250", "1250", True, True),       # the numbers differ (1, 1250); the normalised texts agree
    ("1,250 apples", "1250", False, True),  # "1,250" reads as 1
    ("17", "18", False, True),
    ("True", "True", True, False),       # no number: text equality (TheoremQA's booleans)
    ("no idea", "5", False, False),
])
def test_numeric_check(answer, label, correct, valid):
    assert numeric_check(answer, label) == (correct, valid)


@pytest.mark.parametrize("answer,label,correct,valid", [
    ("B", "B", True, True),
    ("b", "B", True, True),
    ("(C)", "C", True, True),
    ("The answer is B", "B", False, True),   # the first A-D of "THE ANSWER IS B" is the A of ANSWER
    ("The answer is B", "A", True, True),
    ("E", "A", False, False),                # no letter A-D: text equality, invalid
])
def test_choice_check(answer, label, correct, valid):
    assert choice_check(answer, label) == (correct, valid)


@pytest.mark.parametrize("check,answer,label,ragen,lenient", [
    ("exact", "\\boxed{5}", "5", False, True),
    ("exact", "0.5", "\\frac{1}{2}", False, True),
    ("exact", "12", "1.2", True, False),
    ("numeric", "1,250 apples", "1250", False, True),
    ("numeric", "-5", "5", True, False),
    ("choice", "The answer is B", "B", False, True),
    ("choice", "The answer is B", "A", True, False),
    ("choice", "b", "B", True, True),        # no standalone capital: RAGEN's scan
])
def test_lenient_rule_judges_correctness_its_own_way_and_keeps_ragens_validity(check, answer, label, ragen, lenient):
    correct, valid = score_answer(check, answer, label, "ragen")
    assert correct is ragen
    correct_lenient, valid_lenient = score_answer(check, answer, label, "lenient")
    assert correct_lenient is lenient and valid_lenient == valid


def test_last_boxed_balances_braces_and_takes_the_last():
    assert last_boxed("so \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1} then \\boxed{ 2 }") == "2"
    assert last_boxed("\\boxed{3} and \\boxed{open") == "3"
    assert last_boxed("no box") is None


def test_processors_build_question_and_label_as_ragen_does():
    assert process_metamathqa({"query": "Q?", "response": "a\nThe answer is: 9"}) == ("Q?", "9")
    assert process_gsm8k({"question": "Q?", "answer": "work\n#### 1,080 Apples"}) == ("Q?", "1,080 apples")
    assert process_theoremqa({"Question": "Q?", "Answer": 3.5}) == ("Q?", "3.5")
    assert process_theoremqa({"Question": "Q?", "Answer": [1, 2]}) == ("Q?", "[1, 2]")
    assert process_theoremqa({"Question": "Q?", "Answer": True}) == ("Q?", "True")
    row = {"question": "Which?", "choices": ["x", "y", "z", "w"], "answer": 2}
    assert process_mmlu(row) == ("Which?\nA. x\nB. y\nC. z\nD. w", "C")
    assert process_mmlu({**row, "answer": "d"})[1] == "D"
    assert process_math({"problem": "P", "solution": "so \\boxed{\\sqrt{2}}"}) == ("P", "\\sqrt{2}")
    assert process_math({"problem": "P", "solution": "\\boxed{1}", "answer": "2"}) == ("P", "2")
    with pytest.raises(ValueError, match="####"):
        process_gsm8k({"question": "Q", "answer": "42"})
    with pytest.raises(ValueError, match="boxed"):
        process_math({"problem": "P", "solution": "none"})


def test_each_dataset_uses_ragens_check_for_it():
    checks = {name: spec.check for name, spec in DATASETS.items()}
    assert checks == {"metamathqa": "exact", "gsm8k": "numeric", "theoremqa": "numeric", "math": "exact",
                      "mmlu": "choice", "mmlu_stem": "choice"}
