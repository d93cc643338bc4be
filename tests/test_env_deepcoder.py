"""DeepCoder: grading (correct / wrong / partial, stdin and functional), loader, env, batch concurrency."""

import gc
import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from envs import registry
from envs.batch import HostEnvBatch
from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.env import DeepCoderEnv
from envs.deepcoder.grading import extract_code, grade, grade_batch, stdout_matches, values_equal
from envs.deepcoder.problems import FUNCTIONAL, STDIN, load_problems, parse_tests
from envs.deepcoder.interpreter import SandboxError
from envs.deepcoder.sandbox import Sandbox, SandboxConfig
from envs.deepcoder.slots import max_concurrent_sandboxes
from sandbox_testlib import RecordingSandbox, concurrent_sandboxes, peak_overlap, span_program

pytestmark = pytest.mark.timeout(120)
BY_ID = {p.problem_id: p for p in BUILTIN_PROBLEMS}


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(SandboxConfig(cpu_time_s=2, wall_time_s=5), max_concurrency=2)


def fenced(code):
    return f"Here you go:\n```python\n{code}\n```\n"


def test_reference_solutions_pass(sandbox):
    results = grade_batch(sandbox, [(p, fenced(p.solution)) for p in BUILTIN_PROBLEMS])
    assert len(BUILTIN_PROBLEMS) == 10
    assert [r.reward for r in results] == [1.0] * 10
    assert all(r.success for r in results)
    assert {t.testtype for p in BUILTIN_PROBLEMS for t in p.tests} == {STDIN, FUNCTIONAL}


def test_wrong_and_partial_answers(sandbox):
    r = grade(sandbox, BY_ID["sum_two"], fenced("print(0)"))  # right only for "-5 5"
    assert r.num_passed == 1 and r.num_tests == 3 and r.reward == pytest.approx(1 / 3) and not r.success
    r = grade(sandbox, BY_ID["sum_two"], fenced("a, b = map(int, input().split())\nprint(a - b)"))
    assert r.reward == 0.0 and not r.success  # wrong on every test
    partial = "class Solution:\n    def climbStairs(self, n):\n        return n if n <= 3 else 0\n"
    r = grade(sandbox, BY_ID["climb_stairs"], fenced(partial))
    assert r.reward == pytest.approx(3 / 5)
    r = grade(sandbox, BY_ID["two_sum"],
              fenced("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"))
    assert r.reward == pytest.approx(2 / 4)
    r = grade(sandbox, BY_ID["is_palindrome"], fenced("def oops(:\n    pass"))
    assert r.reward == 0.0 and r.verdicts[0].status == "runtime_error"


def test_bare_method_is_put_into_starter_class(sandbox):
    code = "def isPalindrome(self, s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]"
    assert grade(sandbox, BY_ID["is_palindrome"], fenced(code)).success


def test_answer_cannot_forge_functional_result(sandbox):
    # Prints something that looks like a result line; the harness's nonce is secret, so it fails.
    forged = ("print('@@RESULT-0000000000000000@@true')\nclass Solution:\n    def isPalindrome(self, s):\n"
              "        return None")
    assert grade(sandbox, BY_ID["is_palindrome"], fenced(forged)).reward == 0.0


@pytest.mark.parametrize("line", ["'{not json'", "'[' * 100000"])
def test_unreadable_result_line_is_the_answers_failure(sandbox, line):
    """The answer shares the runner's process: it can find the nonce and write a broken result line itself."""
    forged = ("import os, sys\nnonce = sys._getframe(1).f_locals['_payload']['nonce']\n"
              f"sys.__stdout__.write('\\n' + nonce + {line} + '\\n')\nsys.__stdout__.flush()\nos._exit(0)\n")
    r = grade(sandbox, BY_ID["is_palindrome"], fenced(forged))
    assert r.reward == 0.0 and r.verdicts[0].status == "runtime_error"
    env = DeepCoderEnv(problems=[BY_ID["is_palindrome"]], sandbox=sandbox)
    env.reset(0)
    _, reward, _, truncated, info = env.step(fenced(forged))
    assert (reward, truncated, info["success"]) == (0.0, True, False)


def test_a_sandbox_that_cannot_run_programs_errors_the_episode_instead_of_scoring_zero():
    """Strict mode without namespaces refuses every run: that is the host's fault, not a wrong answer."""
    broken = Sandbox(SandboxConfig(use_namespaces=False, drop_privileges=False, strict=True), max_concurrency=1)
    problem = BY_ID["sum_two"]
    with pytest.raises(SandboxError, match="strict sandbox requested"):
        grade(broken, problem, fenced(problem.solution))
    env = DeepCoderEnv(problems=[problem], sandbox=broken)
    batch = HostEnvBatch([env])
    batch.reset([0])
    result = batch.step([[fenced(problem.solution)]], np.ones(1, bool))
    assert "SandboxError" in result.errors[0] and "strict sandbox requested" in result.errors[0]
    assert result.terminated[0] and not result.success[0]


@pytest.mark.parametrize("field", ["cpu_time_s", "wall_time_s", "memory_bytes", "max_output_bytes",
                                   "file_size_bytes", "max_processes", "max_open_files"])
@pytest.mark.parametrize("value", [0, -5, None])
def test_sandbox_limits_must_be_positive(field, value):
    with pytest.raises(ValueError, match=f"SandboxConfig.{field} must be a positive number"):
        SandboxConfig(**{field: value})


def test_env_refuses_a_bad_timeout_or_memory_limit():
    with pytest.raises(ValueError, match="cpu_time_s must be a positive number"):
        DeepCoderEnv(test_timeout_s=0)
    with pytest.raises(ValueError, match="memory_bytes must be a positive number"):
        DeepCoderEnv(memory_bytes=-1)


def test_no_code_is_invalid(sandbox):
    r = grade(sandbox, BY_ID["sum_two"], "   ")
    assert not r.code_found and r.reward == 0.0


def test_extract_code_prefers_last_python_block():
    text = "```text\nnot code\n```\n```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("print(3)") == "print(3)"
    assert extract_code("```\nx = 1\n```") == "x = 1"
    assert extract_code("") is None


def test_output_comparison():
    assert stdout_matches("3\n", "3")
    assert stdout_matches("  1 2 \n3\n\n", "1 2\n3")
    assert stdout_matches("0.3333333", "0.333333")
    assert not stdout_matches("1 2", "1 3")
    assert not stdout_matches("1\n2", "1")
    assert values_equal([1, [2.0000000001]], [1, [2]])
    assert not values_equal(True, 1)


def test_integers_compare_exactly():
    """A relative tolerance is for floats: an answer off by one in a large integer is wrong."""
    assert not stdout_matches("1000000008", "1000000007")
    assert not stdout_matches("3 1000000008\n", "3 1000000007")
    assert not stdout_matches("1" * 5000 + "2", "1" * 5000 + "1")  # past int()'s digit limit: no error
    assert stdout_matches("-0 +7 007", "0 7 7") and stdout_matches("1000000007", "1000000007.0000001")
    assert not values_equal(1000000008, 1000000007)
    assert not values_equal([10**18 + 1], [10**18])
    assert values_equal(2.0000000001, 2) and values_equal(1000000007, 1000000007)


def test_off_by_one_large_integer_answer_fails(sandbox):
    big = BY_ID["sum_two"]  # expects 2000000000 for the third test
    r = grade(sandbox, big, fenced("a, b = map(int, input().split())\nprint(a + b + (a > 10**6))"))
    assert [v.passed for v in r.verdicts] == [True, True, False] and r.reward == pytest.approx(2 / 3)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3)))
def test_values_equal_reflexive_through_json(v):
    assert values_equal(json.loads(json.dumps(v)), v)


def test_loader_reads_deepcoder_formats(tmp_path, sandbox):
    lcb = {"problem": "Return a+b.",
           "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
           "metadata": json.dumps({"func_name": "add"}),
           "tests": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"},
                                {"input": "5\n-5", "output": "0", "testtype": "functional"}])}
    taco = {"problem": "Print the square of n.", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["9\n", "16\n"]}}
    taco_fn = {"question": "Return the maximum.", "ground_truth": json.dumps(
        {"fn_name": "biggest", "inputs": [[[1, 5, 2]], [[7]]], "outputs": [[5], [7]]})}
    path = tmp_path / "deepcoder.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (lcb, taco, taco_fn)) + "\n")
    problems = load_problems(path)
    assert [p.func_name for p in problems] == ["add", None, "biggest"]
    assert grade(sandbox, problems[0],
                 fenced("class Solution:\n    def add(self, a, b):\n        return a + b")).success
    assert grade(sandbox, problems[1], fenced("n = int(input())\nprint(n * n)")).success
    assert grade(sandbox, problems[2], fenced("def biggest(xs):\n    return max(xs)")).success
    (tmp_path / "one.json").write_text(json.dumps([taco]))
    assert len(load_problems(tmp_path)) == 4  # a folder: every json/jsonl file


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_problems(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "x", "tests": [{"input": "", "output": "", "testtype": "functional"}]}))
    with pytest.raises(ValueError, match="func_name"):
        load_problems(bad)
    with pytest.raises(ValueError, match="testtype"):
        parse_tests([{"input": "", "output": "", "testtype": "weird"}])


def test_env_single_turn_rewards(sandbox):
    env = registry.make("DeepCoder", sandbox=sandbox)
    assert isinstance(env, DeepCoderEnv)
    obs, info = env.reset(3)
    assert obs == env.reset(3)[0] and "Question:" in obs
    problem = env.problem
    obs, reward, terminated, truncated, info = env.step(fenced(problem.solution))
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    env.reset(3)
    obs, reward, terminated, truncated, info = env.step("no code here")
    assert reward < 1.0 and not terminated and truncated and not info["success"]
    assert obs.startswith("Incorrect.")


def test_instruction_is_ragens(sandbox):
    """RAGEN's config/envs.yaml DeepCoder env_instruction, verbatim (the system prompt's text)."""
    env = registry.make("DeepCoder", sandbox=sandbox)
    assert env.instruction() == ("You are solving a coding task. Provide a complete Python function solution only. "
                                 "Format: <answer>...</answer>")


def test_env_multi_step_shows_feedback(sandbox):
    env = DeepCoderEnv(problems=[BY_ID["sum_two"]], max_steps=2, sandbox=sandbox)
    env.reset(0)
    obs, reward, terminated, truncated, info = env.step(fenced("print(0)"))
    assert not (terminated or truncated) and "Feedback: Passed 1/3 tests." in obs
    assert info["action_is_valid"] and not info["action_is_effective"]  # runnable code, but wrong
    _, reward, terminated, _, info = env.step(fenced(BY_ID["sum_two"].solution))
    assert reward == 1.0 and terminated
    assert info["action_is_effective"]  # RAGEN's action_is_effective is is_correct (it was "code found" here)


def test_batch_respects_concurrency():
    sb = RecordingSandbox(SandboxConfig(cpu_time_s=2, wall_time_s=5), max_concurrency=2)
    sleeper = span_program("a, b = map(int, input().split())\nprint(a + b)", 0.6)
    problem = BY_ID["sum_two"]  # 3 tests x 2 answers = 6 runs of 0.6 s, 2 at a time
    with concurrent_sandboxes(8):  # the process-wide bound is above the one under test
        results = grade_batch(sb, [(problem, fenced(sleeper))] * 2)
    assert all(r.success for r in results)
    assert len(sb.spans) == 6
    assert peak_overlap([(start, end) for _, start, end in sb.spans]) == 2  # never more, and reached


def play_reference_solutions(num_episodes: int, tests_at_once: int):
    """One turn of `num_episodes` DeepCoder episodes (own sandboxes, as in training) answering with the
    reference solutions, all stepped at once by HostEnvBatch."""
    envs = [DeepCoderEnv(max_concurrency=tests_at_once) for _ in range(num_episodes)]
    batch = HostEnvBatch(envs)
    batch.reset(list(range(num_episodes)))
    return batch.step([[fenced(env.problem.solution)] for env in envs], np.ones(num_episodes, bool))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_32_episodes_at_once_with_reference_solutions_all_pass():
    result = play_reference_solutions(32, tests_at_once=2)
    assert result.errors == [""] * 32
    assert result.success.all() and (result.rewards == 1.0).all()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("tests_at_once", [1, 4])
def test_128_episodes_at_once_with_reference_solutions_all_pass(tests_at_once):
    result = play_reference_solutions(128, tests_at_once)
    assert result.errors == [""] * 128
    assert result.success.all() and (result.rewards == 1.0).all()


def test_every_env_setting_is_a_config_key():
    """`--config.env.kwargs.X` only overrides keys the config file has: each DeepCoderEnv setting must be one."""
    import inspect

    from configs.deepcoder import get_config

    settings = set(inspect.signature(DeepCoderEnv).parameters) - {"problems", "sandbox"}  # objects, not flags
    kwargs = get_config().env.kwargs
    assert settings == set(kwargs)
    env = registry.make("DeepCoder", **{**kwargs.to_dict(), "memory_bytes": 256 << 20})
    assert env.sandbox.config.memory_bytes == 256 << 20


def test_env_sets_the_process_wide_bound():
    with concurrent_sandboxes(max_concurrent_sandboxes()):  # restored afterwards
        DeepCoderEnv(problems=[BY_ID["sum_two"]], max_concurrent_sandboxes=5)
        assert max_concurrent_sandboxes() == 5
        with pytest.raises(ValueError, match="concurrent sandboxes"):
            DeepCoderEnv(problems=[BY_ID["sum_two"]], max_concurrent_sandboxes=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_step_timeout_covers_the_runs_the_whole_batch_queues():
    wall = 5.0
    climb = BY_ID["climb_stairs"]  # 5 tests

    def make():
        return DeepCoderEnv(problems=[climb], test_timeout_s=(wall - 2) / 2, max_concurrency=1)

    with concurrent_sandboxes(4):
        gc.collect()
        env = make()
        alone = env.step_timeout_s
        others = [make() for _ in range(63)]
        assert env.step_timeout_s >= (64 * 5 / 4 + 5) * wall  # all 320 runs, 4 at a time, then its own 5
        del others
        gc.collect()
        assert env.step_timeout_s == alone


def test_seed_picks_ragens_problem(sandbox):
    """RAGEN's reset: `random.seed(seed); random.randint(0, n - 1)` over the split's rows (here 10 problems)."""
    env = DeepCoderEnv(problems=list(BUILTIN_PROBLEMS), sandbox=sandbox)
    picked = []
    for seed in range(6):
        env.reset(seed)
        picked.append(BUILTIN_PROBLEMS.index(env.problem))
    assert picked == [6, 2, 0, 3, 3, 9]  # random.Random(s).randint(0, 9) for s = 0..5
