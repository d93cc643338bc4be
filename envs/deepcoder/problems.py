"""Coding problems with tests: the data types, DeepCoder dataset loading, prompt text.

Test formats (as in DeepCoder / LiveCodeBench):
- stdin tests: `input` is the program's standard input, `output` its expected standard output.
- functional tests: the answer defines `func_name` (a function, or a method of `class Solution`);
  `input` holds one JSON value per line (the positional arguments) and `output` the JSON of the
  expected return value.

DeepCoder dataset files (agentica-org/DeepCoder-Preview-Dataset, saved locally as JSON / JSONL /
parquet), one problem per row:
- `problem` (or `question` / `prompt`): the statement.
- `tests` (or RAGEN's preprocessed `ground_truth`): a list (or its JSON string) of
  {"input", "output", "testtype": "stdin" | "functional"} (LiveCodeBench, lcbv5), or a dict
  {"inputs": [...], "outputs": [...], "fn_name"?: str} (TACO, PrimeIntellect, Codeforces).
- `starter_code` (optional): code the answer must complete (functional problems).
- `metadata` (optional, dict or JSON string): `func_name` for functional tests.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable

STDIN = "stdin"
FUNCTIONAL = "functional"
_TESTTYPE_ALIASES = {"stdin": STDIN, "stdin_stdout": STDIN, "stdio": STDIN, "functional": FUNCTIONAL,
                     "call": FUNCTIONAL, "call_based": FUNCTIONAL}


@dataclasses.dataclass(frozen=True)
class TestCase:
    """One test. `unwrap_output`: TACO-style expected values may be wrapped in a 1-element list."""

    input: str
    output: str
    testtype: str = STDIN
    unwrap_output: bool = False

    __test__ = False  # not a pytest class


@dataclasses.dataclass(frozen=True)
class Problem:
    """A coding problem; `func_name` is set for functional tests; `solution` is a reference answer."""

    problem_id: str
    question: str
    tests: tuple[TestCase, ...]
    starter_code: str = ""
    func_name: str | None = None
    solution: str = ""


def format_prompt(problem: Problem) -> str:
    """LiveCodeBench-style task text for one problem."""
    head = ("You will be given a programming problem. Write a correct Python 3 program that meets the "
            "specification and passes all tests.\n\n"
            f"Question:\n{problem.question.strip()}\n\n")
    if problem.starter_code.strip():
        return head + ("Complete the following starter code and put the whole solution in one fenced "
                       f"block:\n```python\n{problem.starter_code.rstrip()}\n```")
    return head + ("Read the input from standard input and write the answer to standard output. Put "
                   "your code in one fenced block:\n```python\n# your code\n```")


def _as_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _join_lines(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def parse_tests(raw: Any, func_name: str | None = None) -> tuple[TestCase, ...]:
    """Tests in any DeepCoder format (list of dicts, inputs/outputs dict, or their JSON string)."""
    raw = _as_json(raw)
    if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:
        fn = raw.get("fn_name") or func_name
        if fn:
            return tuple(TestCase("\n".join(json.dumps(a) for a in (args if isinstance(args, list) else [args])),
                                  json.dumps(out), FUNCTIONAL, unwrap_output=True)
                         for args, out in zip(raw["inputs"], raw["outputs"]))
        return tuple(TestCase(_join_lines(i), _join_lines(o), STDIN) for i, o in zip(raw["inputs"], raw["outputs"]))
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ValueError(f"unrecognised tests field of type {type(raw).__name__}; expected a list of "
                         "{input, output, testtype} or a dict with inputs/outputs")
    tests = []
    for t in raw:
        kind = _TESTTYPE_ALIASES.get(str(t.get("testtype", STDIN)).lower())
        if kind is None:
            raise ValueError(f"unknown testtype {t.get('testtype')!r}; expected 'stdin' or 'functional'")
        tests.append(TestCase(str(t["input"]), str(t["output"]), kind))
    return tuple(tests)


def problem_from_record(record: dict[str, Any], index: int) -> Problem:
    """One dataset row (DeepCoder or RAGEN-preprocessed fields) -> Problem."""
    question = record.get("problem") or record.get("question") or record.get("prompt")
    if not question:
        raise ValueError(f"row {index} has no 'problem'/'question'/'prompt' field; keys: {sorted(record)}")
    metadata = _as_json(record.get("metadata") or {})
    func_name = (metadata.get("func_name") if isinstance(metadata, dict) else None) or record.get("func_name")
    raw_tests = record.get("tests", record.get("ground_truth"))
    if raw_tests is None:
        raise ValueError(f"row {index} has no 'tests'/'ground_truth' field")
    tests = parse_tests(raw_tests, func_name)
    if any(t.testtype == FUNCTIONAL for t in tests) and not func_name:
        func_name = _as_json(raw_tests).get("fn_name") if isinstance(_as_json(raw_tests), dict) else None
        if not func_name:
            raise ValueError(f"row {index} has functional tests but no metadata.func_name")
    pid = str(record.get("problem_id") or record.get("uid") or record.get("id") or f"deepcoder_{index}")
    return Problem(pid, str(question), tests, str(record.get("starter_code") or ""), func_name,
                   str(record.get("solution") or record.get("canonical_solution") or ""))


def _read_rows(path: Path) -> Iterable[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            yield from (json.loads(line) for line in f if line.strip())
    elif suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        yield from (data if isinstance(data, list) else data.get("data", [data]))
    elif suffix == ".parquet":
        import pandas as pd  # needs pyarrow or fastparquet

        yield from pd.read_parquet(path).to_dict(orient="records")
    else:
        raise ValueError(f"unsupported dataset file {path}: use .json, .jsonl or .parquet")


def load_problems(path: str | Path, limit: int | None = None) -> list[Problem]:
    """Problems from a local DeepCoder file or a directory of such files (sorted by name)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"DeepCoder dataset path {path} does not exist; download the dataset files "
                                "(JSON/JSONL/parquet) there or use the built-in problems (dataset_path=None)")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".json", ".jsonl", ".parquet")) \
        if path.is_dir() else [path]
    problems: list[Problem] = []
    for file in files:
        for row in _read_rows(file):
            problems.append(problem_from_record(row, len(problems)))
            if limit is not None and len(problems) >= limit:
                return problems
    if not problems:
        raise ValueError(f"no problems found in {path}")
    return problems
