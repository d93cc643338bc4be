"""Read a local dataset file (JSON array, JSON Lines or parquet) into a list of row dicts.

Shared by the dataset-backed host envs (Countdown, MetaMathQA) so that a user's local copy of
the original data works with no hub download. Parquet needs pyarrow (or pandas with an engine).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

SUPPORTED_SUFFIXES = (".json", ".jsonl", ".parquet")


def read_records(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of the file at `path` as dicts (first `limit` rows when given); format from the suffix."""
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        raise FileNotFoundError(f"Dataset file {path!r} {what}; pass the path of a local "
                                f"{'/'.join(SUPPORTED_SUFFIXES)} file.")
    lower = path.lower()
    if lower.endswith(".jsonl"):
        rows = _read_jsonl(path, limit)
    elif lower.endswith(".json"):
        rows = _read_json(path)
    elif lower.endswith(".parquet"):
        rows = _read_parquet(path)
    else:
        raise ValueError(f"Unsupported dataset file {path!r}: the name must end with one of "
                         f"{', '.join(SUPPORTED_SUFFIXES)}.")
    return rows if limit is None else rows[:limit]


def seeded_index(seed: int, count: int) -> int:
    """The row RAGEN's dataset envs show for `seed` out of `count`: `random.seed(seed); random.randint(0, count - 1)`
    (their `all_seed` context), drawn from a private generator so the global one is left alone."""
    return random.Random(int(seed)).randint(0, count - 1)


def _read_jsonl(path: str, limit: int | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no} is not valid JSON ({e}); each line of a .jsonl "
                                 f"file must be one JSON object.") from e
            rows.append(_as_row(row, f"{path}:{line_no}"))
    return rows


def _read_json(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a JSON array of objects (or {{'data': [...]}}); "
                         f"got {type(data).__name__}. Use .jsonl for one object per line.")
    return [_as_row(row, f"{path}[{i}]") for i, row in enumerate(data)]


def _read_parquet(path: str) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        return [_plain(row) for row in pq.read_table(path).to_pylist()]
    try:
        import pandas as pd

        frame = pd.read_parquet(path)
    except ImportError as e:
        raise ImportError(f"Reading {path!r} needs a parquet engine: `pip install pyarrow` "
                          f"(or convert the file to .jsonl). ({e})") from e
    return [_plain(row) for row in frame.to_dict(orient="records")]


def _as_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ValueError(f"{where} must be a JSON object with named fields, got {type(row).__name__}.")
    return row


def _plain(value: Any) -> Any:
    """numpy arrays / scalars (from parquet) -> plain Python lists / numbers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
