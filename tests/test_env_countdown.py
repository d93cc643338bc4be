"""Countdown: safe checker under adversarial answers, generator, loaders, env protocol."""

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.countdown import (CountdownEnv, CountdownTask, evaluate, generate_task,
                            has_signed_sum_solution, score_answer, solve)
from envs.countdown.data import load_tasks
from envs.registry import make
from timing_testlib import CPU_BUDGET_S, cpu_seconds

NUMS = [3, 5, 2]


@pytest.mark.parametrize("answer,expected", [
    ("2 + 5 - 3", 1.0),             # correct
    ("(5 - 3) * 2", 1.0),           # correct with parentheses
    ("5 - 3 + 2 ", 1.0),            # trailing space
    ("-3 + 5 + 2", 1.0),            # unary minus
    ("2 * 5 - 3", 0.1),             # right numbers, wrong value
    ("3 5 2", 0.1),                 # right numbers, not an expression (original: 0.1 too)
    ("2 + 5 - 3 = 4", 0.0),         # extra number 4
    ("2 + 5 - 3 + 1", 0.0),         # extra number
    ("2 + 2", 0.0),                 # reused number, missing ones
    ("5 + 5 - 3 - 3", 0.0),         # reused numbers
    ("2 + 5", 0.0),                 # missing number
    ("3 / (5 - 5) + 2", 0.0),       # reuses 5
    ("3 / (2 - 2) + 5", 0.0),       # reuses 2
    ("", 0.0),
])
def test_score_answer_rules(answer, expected):
    assert score_answer(answer, 4, NUMS) == pytest.approx(expected)


def test_division_by_zero_is_wrong_not_error():
    assert evaluate("5 / (3 - 3)") is None
    assert score_answer("5 / (3 - 3)", 1, [5, 3, 3]) == pytest.approx(0.1)
    assert score_answer("2 / 0", 4, [2, 0]) == pytest.approx(0.1)


def test_exact_fraction_arithmetic():
    assert evaluate("6 / 4") == Fraction(3, 2)
    assert evaluate("(1 / 3) * 3") == 1
    assert score_answer("8 / (3 - 8 / 3)", 24, [8, 3, 8, 3]) == 1.0


def test_bounded_power_and_magnitude():
    assert evaluate("2 ** 3") == 8
    assert score_answer("2 ** 3", 8, [2, 3]) == 1.0
    assert evaluate("2 ** 0.5") is None            # non-integer exponent
    assert evaluate("9 ** 9 ** 9") is None          # huge exponent, rejected before computing
    assert evaluate("99999999 ** 32") is None       # result too large
    assert evaluate("10 ** 20") is None
    assert evaluate("0 ** -1") is None


ADVERSARIAL = [
    "__import__('os').system('echo hi')",
    "open('/etc/passwd').read()",
    "(lambda: 4)()",
    "[3, 5, 2]",
    "3 if 5 else 2",
    "3 < 5 < 2",
    "True + 3",
    "3 + 5j - 2",
    "a + b",
    "5 % 3 + 2",
    "5 // 3 + 2",
    "3 << 5 >> 2",
    "9" * 100_000,
    "(" * 5000 + "1" + ")" * 5000,
    "-" * 299 + "4",
    "+" * 10_000 + "4",
    "1e999 - 1e999",
    "3 ** 5 ** 2 ** 9 ** 9",
    "٣ + ٥ - ٢",                       # Arabic-Indic digits
    "３ + ５ - ２",                     # full-width digits
    "3 + 5 − 2",                        # unicode minus
    "2 + 5 - 3\x00",
    "2 + 5 - 3" + " " * 10_000 + "x",
    "\ud800",
    "😀" * 1000,
    "2 + 5 - 3 || 2 + 5 - 3",
]


@pytest.mark.parametrize("answer", ADVERSARIAL)
def test_adversarial_answers_never_raise_and_are_fast(answer):
    env = CountdownEnv()
    env.reset(7)
    (obs, reward, terminated, truncated, info), cpu = cpu_seconds(env.step, answer)
    assert cpu < CPU_BUDGET_S
    assert reward in (0.0, 0.1)
    assert terminated and not truncated and not info["success"]
    assert obs == f"Your answer get {reward:g} points."


def test_adversarial_rewards_on_fixed_task():
    target, nums = 4, [3, 5, 2]
    assert score_answer("__import__('os')", target, nums) == 0.0
    assert score_answer("5 % 3 + 2", target, nums) == pytest.approx(0.1)  # not allowed -> wrong
    assert score_answer("3 < 5 < 2", target, nums) == pytest.approx(0.1)
    assert score_answer("2 + 5 - 3" + " " * 400, target, nums) == 0.0   # over the length cap
    assert score_answer("2 + 5 - 3\n", target, nums) == 1.0


@pytest.mark.parametrize("ops", ["+-", "+-*/"])
def test_generator_deterministic_and_solvable(ops):
    for seed in range(60):
        task = generate_task(seed, ops=ops)
        assert task == generate_task(seed, ops=ops)
        assert 3 <= len(task.nums) <= 4 and 1 <= task.target <= 100
        assert all(1 <= n <= 99 for n in task.nums)
        expr = solve(task.nums, task.target, ops)
        assert expr is not None
        assert score_answer(expr, task.target, task.nums) == 1.0
        if ops == "+-":
            assert has_signed_sum_solution(task.nums, task.target)
    assert len({generate_task(s, ops=ops) for s in range(60)}) > 50


def test_solver_reports_unsolvable():
    assert solve([1, 1, 1], 100) is None
    assert not has_signed_sum_solution([1, 1, 1], 2)
    assert has_signed_sum_solution([3, 5, 2], 4)


def test_env_protocol_and_observation():
    env = make("Countdown")
    obs, info = env.reset(3)
    task = generate_task(3, ops="+-")
    assert obs == f"Target: {task.target}, nums: {list(task.nums)}"
    assert env.reset(3)[0] == obs
    assert CountdownTask(4, (3, 5, 2)).render() == "Target: 4, nums: [3, 5, 2]"
    obs2, reward, terminated, truncated, info = env.step(solve(task.nums, task.target, "+-"))
    assert (obs2, reward, terminated, truncated) == ("Your answer get 1 points.", 1.0, True, False)
    assert info == {"action_is_effective": True, "action_is_valid": True, "success": True}
    _, reward, _, _, info = env.step(" + ".join(map(str, task.nums)) + " * 0")
    assert reward == 0.0 and info["action_is_effective"] is False
    assert "Countdown" in env.instruction() and "<answer>2 + 5 - 3</answer>" in env.instruction()


def _rows():
    return [{"target": 4, "nums": [3, 5, 2]},      # signed-sum solvable
            {"target": 24, "nums": [4, 6, 1]},     # needs *: dropped by the "+-" filter
            {"target": 100, "nums": [1, 1, 1]},    # unsolvable
            {"target": 10, "nums": [7, 2, 1]}]


def test_jsonl_and_json_loaders(tmp_path):
    jsonl = tmp_path / "cd.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in _rows()) + "\n")
    js = tmp_path / "cd.json"
    js.write_text(json.dumps(_rows()))
    for path in (jsonl, js):
        assert load_tasks(str(path)) == [CountdownTask(4, (3, 5, 2)), CountdownTask(10, (7, 2, 1))]
        assert len(load_tasks(str(path), solvable_ops="+-*/")) == 3
        assert len(load_tasks(str(path), solvable_ops=None)) == 4
        assert len(load_tasks(str(path), max_instances=1)) == 1
    env = CountdownEnv(data_path=str(jsonl))
    assert env.reset(0)[0] == "Target: 4, nums: [3, 5, 2]"
    assert env.reset(3)[0] == "Target: 10, nums: [7, 2, 1]"   # seed % len(data), as the original


def test_parquet_loader(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in requirements-test.txt: make install-test")
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(_rows()), str(path))
    assert load_tasks(str(path))[0] == CountdownTask(4, (3, 5, 2))


def test_parquet_without_engine_says_what_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_parquet(name, *args, **kwargs):
        if name.split(".")[0] in ("pyarrow", "pandas", "fastparquet"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setattr(builtins, "__import__", no_parquet)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_tasks(str(path))


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tasks(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"goal": 4, "nums": [1]}) + "\n")
    with pytest.raises(ValueError, match="'target'"):
        load_tasks(str(bad))
    csv = tmp_path / "x.csv"
    csv.write_text("target,nums\n")
    with pytest.raises(ValueError, match="must end with"):
        load_tasks(str(csv))


_ARITH = st.from_regex(r"[-+(]{0,2}[0-9]{1,3}( ?[-+*/] ?\(?[0-9]{1,3}\)?){0,5}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=400), _ARITH))
def test_any_text_scores_without_error(text):
    reward = score_answer(text, 24, [4, 6, 1, 1])
    assert reward in (0.0, 0.1, 1.0)
    if reward == 1.0:
        assert evaluate(text) == 24


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9))
def test_generator_any_seed_gives_solvable_task(seed):
    task = generate_task(seed, ops="+-*/")
    assert score_answer(solve(task.nums, task.target), task.target, task.nums) == 1.0


def test_step_texts_and_info_for_partial_and_wrong_answers():
    """RAGEN: "Your answer get {reward} points."; effective when reward > 0, success only at the full score."""
    env = CountdownEnv(data_path=None)
    assert env.reset(0)[0] == "Target: 84, nums: [46, 75, 28, 65]"
    cases = [("46 + 75 + 28 + 65 + 0", "Your answer get 0 points.", 0.0),  # an extra number
             ("46 + 75 + 28 + 65", "Your answer get 0.1 points.", 0.1),  # 214: numbers right, value wrong
             ("75 - 65 + 28 + 46", "Your answer get 1 points.", 1.0)]  # 10 + 28 + 46 = 84
    for answer, text, expected in cases:
        env.reset(0)
        obs, reward, terminated, truncated, info = env.step(answer)
        assert (obs, reward, terminated, truncated) == (text, expected, True, False)
        assert info == {"action_is_effective": expected > 0, "action_is_valid": True, "success": expected == 1.0}
