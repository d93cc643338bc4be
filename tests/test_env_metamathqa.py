"""MetaMathQA: answer matching, attempts and rewards, offline generator, file loaders."""

import json
import random
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.metamathqa import (MetaMathQAEnv, TEMPLATES, answers_match, extract_label,
                             generate_problem, load_problems, parse_number)
from envs.registry import make
from timing_testlib import CPU_BUDGET_S, cpu_seconds


@pytest.mark.parametrize("answer,label", [
    ("18", "18"), (" 18 ", "18"), ("The answer is: 18", "18"),
    ("0.5", "\\frac{1}{2}"), ("1/2", "0.5"), (".50", "1/2"), ("\\dfrac{1}{2}", ".5"),
    ("\\frac12", "0.5"), ("-\\frac{3}{4}", "-0.75"),
    ("1,000", "1000"), ("$1,250.50", "1250.5"), ("\\$5", "5"),
    ("18 dollars", "18"), ("12 cm^2", "12"), ("18.", "18"), ("$18$", "18"),
    ("\\boxed{42}", "42"), ("\\text{(A)}", "(a)"), ("x = 7", "7"),
    ("50%", "50"), ("50\\%", "50"), ("(3, 4)", "(3,4)"), ("2 \\sqrt{3}", "2\\sqrt{3}"),
    ("ABC", "abc"),
])
def test_answers_that_match(answer, label):
    assert answers_match(answer, label)


@pytest.mark.parametrize("answer,label", [
    ("17", "18"), ("0.33", "1/3"), ("3pi", "3"), ("3\\pi", "3"), ("5x", "5"),
    ("5 apples and 3", "5"), ("", "5"), ("12", None), ("50%", "0.5"), ("1,2", "12"),
    ("\\frac{1}{0}", "0"), ("1e1", "10"),
])
def test_answers_that_do_not_match(answer, label):
    assert not answers_match(answer, label)


def test_extract_label_takes_text_after_marker():
    assert extract_label("Work...\nThe answer is: 42") == "42"
    assert extract_label("The answer is: \\frac{1}{2}\n") == "\\frac{1}{2}"
    assert extract_label("no marker") is None
    assert parse_number("1,000") == 1000 and parse_number("\\frac{-1}{4}") == Fraction(-1, 4)


_FORMULAS = {
    "change": lambda n: n[2] - n[0] * n[1],
    "sharing": lambda n: n[0] - n[1] * n[2],
    "distance": lambda n: n[0] * n[1],
    "equal_split": lambda n: Fraction(n[0], n[1]),
    "savings": lambda n: n[0] * n[1] - n[2],
    "boxes": lambda n: n[0] * n[1] - n[2],
    "discount": lambda n: Fraction(n[0] * (100 - n[1]), 100),
    "average": lambda n: Fraction(n[0] + n[1] + n[2], 3),
    "production": lambda n: n[0] * n[1] * n[2],
    "fraction_of": lambda n: n[0] - Fraction(n[0] * n[1], n[2]),
}


def test_offline_answers_verified_by_recomputation():
    seen = set()
    for seed in range(400):
        record = generate_problem(seed)
        kind = record["type"].removeprefix("offline/")
        seen.add(kind)
        numbers = [int(x) for x in re.findall(r"\d+", record["query"])]
        expected = _FORMULAS[kind](numbers)
        label = extract_label(record["response"])
        assert parse_number(label) == expected, (record, expected)
        assert expected > 0 and Fraction(expected).denominator in (1, 2, 4, 5, 10, 20, 25, 50, 100)
        for line in record["response"].splitlines()[:-1]:   # every shown step is true arithmetic
            for a, op, b, c in re.findall(r"(\d+) ([-+*/]) (\d+) = ([\d.]+)", line):
                exact = {"+": Fraction(int(a) + int(b)), "-": Fraction(int(a) - int(b)),
                         "*": Fraction(int(a) * int(b)), "/": Fraction(int(a), int(b))}[op]
                assert exact == Fraction(c), line
    assert seen == set(TEMPLATES)


def test_offline_generator_deterministic():
    assert [generate_problem(s) for s in range(20)] == [generate_problem(s) for s in range(20)]
    assert len({generate_problem(s)["query"] for s in range(200)}) > 190


def test_env_one_attempt_by_default():
    env = make("MetamathQA")
    question, info = env.reset(5)
    assert question == generate_problem(5)["query"]
    obs, reward, term, trunc, info = env.step("not a number")
    assert (obs, reward, term, trunc) == ("Incorrect. Please think again.", 0.0, False, True)
    assert info == {"action_is_valid": True, "success": False}
    env.reset(5)
    obs, reward, term, trunc, info = env.step(env.label)
    assert (obs, reward, term, trunc, info["success"]) == ("Correct!", 1.0, True, False, True)
    assert env.instruction() == "You are solving Math problems. "


def test_env_attempt_rewards_halve():
    for wrong_first in range(4):
        env = MetaMathQAEnv(max_attempts=None)
        env.reset(11)
        for _ in range(wrong_first):
            assert env.step("-1")[1:4] == (0.0, False, False)
        obs, reward, term, trunc, _ = env.step(f"  {env.label} ")
        assert reward == pytest.approx(1.0 / 2 ** wrong_first) and term and not trunc
    env = MetaMathQAEnv(max_attempts=3)
    env.reset(1)
    assert [env.step("")[3] for _ in range(3)] == [False, False, True]
    assert env.step("   ")[4]["action_is_valid"] is False


ADVERSARIAL = [
    "", "9" * 100_000, "1" * 5000 + "/" + "0", "\\frac{" * 5000, "$" * 10_000, "1e999999999",
    "__import__('os').system('ls')", "😀" * 5000, "\x00", "\ud800", "٣٤", "(" * 10_000,
    "5 " + "ab " * 5000, "1," * 10_000, "\\boxed{" * 99 + "5",
]


@pytest.mark.parametrize("answer", ADVERSARIAL)
def test_adversarial_answers_never_raise_and_are_fast(answer):
    env = MetaMathQAEnv(max_attempts=None)
    env.reset(3)
    (obs, reward, term, trunc, info), cpu = cpu_seconds(env.step, answer)
    assert cpu < CPU_BUDGET_S
    assert reward == 0.0 and not term and obs == "Incorrect. Please think again."


def _records():
    return [{"query": f"What is {i} + {i}?", "response": f"{i} + {i} = {2 * i}\nThe answer is: {2 * i}",
             "type": "GSM_Rephrased"} for i in range(1, 8)]


def test_loaders_and_seed_choice_match_original(tmp_path):
    rows = _records()
    paths = [tmp_path / "mm.json", tmp_path / "mm.jsonl"]
    paths[0].write_text(json.dumps(rows))
    paths[1].write_text("\n".join(json.dumps(r) for r in rows))
    for path in paths:
        assert load_problems(str(path)) == rows
        env = MetaMathQAEnv(data_path=str(path))
        for seed in (0, 10000, 123):
            random.seed(seed)                       # the original: all_seed(seed) + randint
            index = random.randint(0, len(rows) - 1)
            question, info = env.reset(seed)
            assert question == rows[index]["query"] and info["label"] == str(2 * (index + 1))
            assert env.step(str(2 * (index + 1)))[1] == 1.0


def test_parquet_loader(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in requirements-test.txt: make install-test")
    import pyarrow.parquet as pq

    path = tmp_path / "mm.parquet"
    pq.write_table(pa.Table.from_pylist(_records()), str(path))
    assert load_problems(str(path))[2]["query"] == "What is 3 + 3?"


def test_loader_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="'query'"):
        load_problems(str(path))
    with pytest.raises(ValueError, match="max_attempts"):
        MetaMathQAEnv(max_attempts=0)


_NUMBERS = st.from_regex(r"[-$]?[0-9]{0,4}(\.[0-9]{1,3})?( ?/ ?[1-9][0-9]?)?( cm| dollars|%)?\.?",
                         fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), _NUMBERS), st.one_of(st.text(max_size=50), _NUMBERS))
def test_matching_never_raises_and_is_symmetric_for_numbers(answer, label):
    result = answers_match(answer, label)
    assert isinstance(result, bool)
    if parse_number(answer) is not None and parse_number(label) is not None:
        assert result == answers_match(label, answer)


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=-1000, max_value=1000, max_denominator=50))
def test_fraction_and_latex_forms_agree(value):
    plain = f"{value.numerator}/{value.denominator}"
    sign = "-" if value < 0 else ""
    latex = f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    assert answers_match(plain, latex) and parse_number(plain) == value


def test_original_rule_on_a_data_row_and_a_row_without_label(tmp_path):
    """RAGEN's label is everything after "The answer is: "; case and whitespace never matter; a response without the
    marker has no label, so no answer is correct (but a non-empty one is still a valid action)."""
    path = tmp_path / "mm.jsonl"
    rows = [{"query": "Name the set.", "response": "Work.\nThe answer is: \\{1, 2\\}\n"},
            {"query": "No label here.", "response": "It is 3."}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = MetaMathQAEnv(data_path=str(path), max_attempts=2)
    seed = next(s for s in range(100) if random.Random(s).randint(0, 1) == 0)
    assert env.reset(seed) == ("Name the set.", {"label": "\\{1, 2\\}"})
    assert env.step("  \\{1,2\\} ")[:3] == ("Correct!", 1.0, True)
    seed = next(s for s in range(100) if random.Random(s).randint(0, 1) == 1)
    assert env.reset(seed) == ("No label here.", {"label": None})
    obs, reward, terminated, truncated, info = env.step("3")
    assert (obs, reward, terminated, truncated) == ("Incorrect. Please think again.", 0.0, False, False)
    assert info == {"action_is_valid": True, "success": False}


@pytest.mark.parametrize("answer,label,ragen", [
    ("18", "18", True), (" 1 8 ", "18", True), ("ABC", "abc", True), ("(3, 4)", "(3,4)", True),
    ("\\boxed{42}", "42", False), ("1/2", "0.5", False), ("$18$", "18", False), ("18 dollars", "18", False),
    ("The answer is: 18", "18", False),
])
def test_the_ragen_rule_scores_only_what_the_original_scores(answer, label, ragen):
    """answer_match='ragen' is the original's match alone (lower-case, no whitespace), for comparing with RAGEN's
    published MetaMathQA figures; the default also takes LaTeX-wrapped and numerically equal answers."""
    assert answers_match(answer, label, "ragen") is ragen
    assert answers_match(answer, label)
    env = make("MetamathQA", answer_match="ragen")
    env.reset(3)
    env.label = label
    assert env.step(answer)[1] == (1.0 if ragen else 0.0)


def test_an_unknown_answer_rule_is_refused_when_the_env_is_built():
    with pytest.raises(ValueError, match="answer_match 'strict'.*'lenient'.*'ragen'"):
        MetaMathQAEnv(answer_match="strict")
