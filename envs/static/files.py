"""Rows of a static-env dataset from local files only (never a download).

`data_path` may be:
1. one .jsonl / .json / .parquet file (the split is that file);
2. a folder of such files: `{split}.jsonl` (or .json, .parquet), or the hub's shards `{split}-00000-of-00001.parquet`
   in any subfolder (a snapshot of the dataset's hub repo), or files in a subfolder named `{split}`; a folder with
   a single data file and none named for the split uses that file (MetaMathQA-395K.json);
3. a folder written by `datasets`' `save_to_disk` (a Dataset or a DatasetDict), read with `datasets.load_from_disk`
   (needs the optional `datasets` package).
"""

from __future__ import annotations

import os
from typing import Any

from envs.records import SUPPORTED_SUFFIXES, read_records
from envs.static.catalog import DatasetSpec, row_problem

_SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes (DatasetDict, Dataset)


def expected_layout(spec: DatasetSpec, split: str) -> str:
    """The layouts `data_path` may have for dataset `spec`, its columns, and how to make a copy once."""
    columns = ", ".join(spec.columns) + (f" and {' or '.join(spec.one_of)}" if spec.one_of else "")
    return (f"data_path must be a local copy of {spec.name}: a {'/'.join(SUPPORTED_SUFFIXES)} file; or a folder with "
            f"{split}.jsonl ({split}.json, {split}.parquet), or the hub's shards {split}-*.parquet in any subfolder; or "
            f"a folder written by datasets' save_to_disk. Rows need the columns {columns}. To make one (once, with "
            f"network): python -c \"import datasets; datasets.load_dataset({spec.hub}).save_to_disk('DIR')\" and pass "
            "data_path=DIR (ragen-jax never downloads a dataset).")


def load_rows(spec: DatasetSpec, data_path: str, split: str | None = None,
              max_instances: int | None = None) -> list[dict[str, Any]]:
    """The rows of `split` (None: the dataset's default split) found at `data_path`, each checked for the columns
    of `spec`; a clear error naming the expected layout when nothing usable is there."""
    split_name = split or spec.split
    path = os.path.expanduser(data_path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"static env ({spec.name}): data_path {data_path!r} does not exist. "
                                f"{expected_layout(spec, split_name)}")
    if os.path.isfile(path):
        rows = read_records(path, limit=max_instances)
    elif any(os.path.isfile(os.path.join(path, m)) for m in _SAVED_MARKERS):
        rows = _load_saved(path, split, spec, max_instances)
    else:
        files = split_files(path, split_name)
        if not files:
            found = _data_files(path)
            listing = ", ".join(os.path.relpath(f, path) for f in found[:8]) or "no data files"
            raise FileNotFoundError(f"static env ({spec.name}): no file for split {split_name!r} in folder {data_path!r} "
                                    f"(it holds {listing}). {expected_layout(spec, split_name)}")
        rows = []
        for file in files:
            rows += read_records(file, limit=None if max_instances is None else max_instances - len(rows))
            if max_instances is not None and len(rows) >= max_instances:
                break
    if not rows:
        raise ValueError(f"static env ({spec.name}): {data_path!r} (split {split_name!r}) has no rows.")
    for i, row in enumerate(rows):
        problem = row_problem(spec, row, f"{data_path} row {i}")
        if problem:
            raise ValueError(f"static env: {problem} {expected_layout(spec, split_name)}")
    return rows


def _data_files(root: str) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, f) for f in sorted(files) if f.lower().endswith(SUPPORTED_SUFFIXES)]
    return found


def split_files(root: str, split: str) -> list[str]:
    """Data files of `split` under folder `root`, in name order: `{split}.<ext>`, shards `{split}-*.<ext>`, or any file
    in a subfolder named `split`; the folder's only data file when none is named for the split."""
    found = _data_files(root)
    named = [f for f in found if _is_split_file(f, split)]
    return named if named else (found if len(found) == 1 else [])


def _is_split_file(file: str, split: str) -> bool:
    name = os.path.basename(file)
    stem = name[:name.rfind(".")] if "." in name else name
    return stem == split or stem.startswith(split + "-") or os.path.basename(os.path.dirname(file)) == split


def _load_saved(path: str, split: str | None, spec: DatasetSpec, limit: int | None) -> list[dict[str, Any]]:
    """Rows of a `save_to_disk` folder: a Dataset, or one split of a DatasetDict (`split`, else the dataset's
    default split, else its only split)."""
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"static env ({spec.name}): {path!r} is a folder written by datasets' save_to_disk; reading "
                          "it needs the optional `datasets` package: pip install datasets==5.2.0 (or export the split "
                          "to .jsonl/.parquet and pass that file).") from e
    loaded = datasets.load_from_disk(path)
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded.keys())
        chosen = split or (spec.split if spec.split in names else names[0] if len(names) == 1 else None)
        if chosen not in names:
            raise ValueError(f"static env ({spec.name}): {path!r} holds splits {names}; pass split= one of them"
                             f"{'' if split is None else f' (got {split!r})'}.")
        loaded = loaded[chosen]
    if limit is not None:
        loaded = loaded.select(range(min(limit, len(loaded))))
    return loaded.to_list()
