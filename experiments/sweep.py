"""Run a grid of flag overrides, one workdir per run, comparable in one TensorBoard and one table.

  python experiments/sweep.py --config configs/sokoban.py:tiny --root runs/sweep \
      --grid filter.value=1.0,0.9 --grid trainer.seed=0,1,2 --parallel 2 \
      -- --config.trainer.total_steps=20

Each run is `python run.py --config CONFIG --config.KEY=VALUE ... --workdir ROOT/KEY=VALUE,...`;
then `tensorboard --logdir ROOT` shows them side by side (its HPARAMS tab: each run's config, the keys that
differ first). A run's log is ROOT/<name>/log.txt (a later attempt appends to it). At the end a table compares
the runs' summary.json figures (also written to ROOT/results.csv), and a failed run's error (its log's FATAL line,
else its last line) says why it failed. A --grid key the config lacks stops the sweep before any run starts.
Running the same sweep again skips the runs it finished with the same command and retries the others (one
interrupted after a checkpoint: add `-- --config.trainer.resume=True`).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
import time

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")
RECORD = "sweep.json"  # per run folder: the run's command line and exit code, what a rerun of the sweep checks
COLUMNS = (  # (column, summary.json key): the figures a sweep compares
    ("val start", "val_success_start"), ("val warm", "val_success_after_warmstart"),
    ("val final", "val_success_final"), ("val best", "val_success_best"), ("steps", "steps_run"),
    ("kept", "mean_kept_ratio"), ("wall s", "wall_time_s"))


def split_values(text: str) -> list[str]:
    """"1,(6,6),[1, 2],'a,b'" -> ["1", "(6,6)", "[1, 2]", "a,b"]: commas inside brackets or quotes stay (a
    value wholly in quotes loses them: it is passed to run.py as one argument, not through a shell)."""
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    if depth or quote:
        raise SystemExit(f"--grid values {text!r} have an unclosed bracket or quote")
    values.append(text[start:].strip())
    return [v[1:-1] if len(v) > 1 and v[0] == v[-1] and v[0] in "'\"" else v for v in values]


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """["a.b=1,2", "c=(6,6),(8,8)"] -> [("a.b", ["1", "2"]), ("c", ["(6,6)", "(8,8)"])]."""
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise SystemExit(f"--grid takes KEY=V1,V2,...; got {item!r}")
        split = split_values(values)
        if "" in split:
            raise SystemExit(f"--grid {item!r} has an empty value (a stray comma?)")
        grid.append((key.strip(), split))
    return grid


def unknown_grid_keys(config: str, keys: list[str]) -> list[str]:
    """What is wrong with each --grid key that `config` ("path.py[:variants]") does not have, said once before any
    run starts (every run would fail on it a few seconds in); [] when the config itself does not load (run.py
    then says why, for each run)."""
    import difflib
    import importlib.util

    sys.path.insert(0, os.path.dirname(RUN_PY))
    from ragen_jax.config.schema import FREE_FORM

    path, _, variants = config.partition(":")
    try:
        spec = importlib.util.spec_from_file_location("_sweep_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cfg = module.get_config(variants) if variants else module.get_config()
    except Exception:  # the config's own error: run.py reports it
        return []
    errors = []
    for key in keys:
        node, done = cfg, []
        for part in key.split("."):
            if ".".join(done) in FREE_FORM:
                break
            if not hasattr(node, "keys") or part not in node:
                close = difflib.get_close_matches(part, list(node.keys()) if hasattr(node, "keys") else [], n=1)
                hint = f" (did you mean {'.'.join(done + close)}?)" if close else ""
                errors.append(f"--grid {key}: {config} has no config key {'.'.join(done + [part])}{hint}")
                break
            node, done = node[part], done + [part]
    return errors


def run_commands(config: str, root: str, grid, extra: list[str]) -> list[tuple[str, list[str]]]:
    """(run name, argv) for every point of the grid."""
    keys = [k for k, _ in grid]
    runs = []
    for values in itertools.product(*[v for _, v in grid]):
        name = ",".join(f"{k}={v}" for k, v in zip(keys, values)) or "default"
        argv = [sys.executable, RUN_PY, f"--config={config}", f"--workdir={os.path.join(root, name)}"]
        argv += [f"--config.{k}={v}" for k, v in zip(keys, values)] + list(extra)
        runs.append((name, argv))
    return runs


def _record(folder: str) -> dict:
    try:
        with open(os.path.join(folder, RECORD)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def finished_before(folder: str, argv: list[str]) -> bool:
    """Whether an earlier sweep ran this exact command (the interpreter aside) into `folder` to a successful end."""
    record = _record(folder)
    return (record.get("returncode") == 0 and record.get("args") == argv[2:]
            and os.path.isfile(os.path.join(folder, "summary.json")))


def failure_reason(path: str) -> str:
    """Why the last attempt in the log `path` failed: its last FATAL line with the "- " lines under it (an invalid
    config lists every error there), else its last non-empty line (a traceback's exception); "" if none.
    Progress bars' carriage returns are cut; an earlier attempt's lines (above the last "=== " header) are not read."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.rsplit("\r", 1)[-1].strip() for line in f.read().splitlines()]
    except OSError:
        return ""
    start = max((i for i, line in enumerate(lines) if line.startswith("=== ")), default=-1) + 1
    lines = [line for line in lines[start:] if line]
    fatal = max((i for i, line in enumerate(lines) if line.startswith("FATAL")), default=None)
    if fatal is None:
        return lines[-1] if lines else ""
    return " ".join([lines[fatal], *itertools.takewhile(lambda line: line.startswith("- "), lines[fatal + 1:])])


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key.startswith("val_success") or key == "mean_kept_ratio":
        return f"{100 * value:.1f}%"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def results(root: str, names: list[str], status: dict[str, str],
            earlier: dict[str, int | None]) -> list[dict[str, str]]:
    """One row per run: its name, status and the COLUMNS of its summary.json ("-" where it has none, or where a run
    started in this sweep left the summary.json of an earlier run, whose time was `earlier[name]`, as it was)."""
    rows = []
    for name in names:
        path = os.path.join(root, name, "summary.json")
        try:
            if name in earlier and _mtime(path) == earlier[name]:
                raise OSError("not this run's summary")
            with open(path) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            summary = {}
        row = {"run": name, "status": status[name]}
        row.update({column: _cell(key, summary.get(key)) for column, key in COLUMNS})
        row["stop"] = summary.get("stop_reason") or ""
        rows.append(row)
    return rows


def table(rows: list[dict[str, str]]) -> str:
    """The rows as aligned text columns (the last column, the early-stop reason, left unpadded)."""
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--root", default="runs/sweep")
    parser.add_argument("--grid", action="append", default=[],
                        help="KEY=V1,V2,... (repeatable; a value holds commas inside quotes or brackets: "
                             "model.lora.target_modules='\"q_proj,v_proj\",\"q_proj,k_proj,v_proj,o_proj\"')")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--dry-run", action="store_true")
    args, extra = parser.parse_known_args(argv)
    extra = [e for e in extra if e != "--"]
    grid = parse_grid(args.grid)
    if problems := unknown_grid_keys(args.config, [key for key, _ in grid]):
        raise SystemExit("\n".join(problems))
    runs = run_commands(args.config, args.root, grid, extra)
    if args.dry_run:
        for name, argv in runs:
            print(name, " ".join(argv))
        return 0
    status: dict[str, str] = {}
    earlier: dict[str, int | None] = {}  # the summary.json time of each run started here, from before it
    pending, active = [], []
    for name, argv in runs:
        if finished_before(os.path.join(args.root, name), argv):
            status[name] = "done before"
            print(f"skipped {name}: finished by an earlier sweep with the same command", flush=True)
        else:
            pending.append((name, argv))
    while pending or active:
        while pending and len(active) < max(args.parallel, 1):
            name, argv = pending.pop(0)
            folder = os.path.join(args.root, name)
            os.makedirs(folder, exist_ok=True)
            earlier[name] = _mtime(os.path.join(folder, "summary.json"))
            log = open(os.path.join(folder, "log.txt"), "a")  # an earlier attempt's log stays above
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n")
            log.flush()
            active.append((name, argv, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
            print(f"started {name}", flush=True)
        time.sleep(1.0)
        for entry in list(active):
            name, argv, proc, log = entry
            if proc.poll() is None:
                continue
            log.close()
            active.remove(entry)
            folder = os.path.join(args.root, name)
            with open(os.path.join(folder, RECORD), "w") as f:
                json.dump({"args": argv[2:], "returncode": proc.returncode}, f, indent=2)
            status[name] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
            why = "" if proc.returncode == 0 else f" ({failure_reason(os.path.join(folder, 'log.txt'))})"
            print(f"finished {name}: exit {proc.returncode}{why}", flush=True)
    rows = results(args.root, [name for name, _ in runs], status, earlier)
    print("\n" + table(rows))
    with open(os.path.join(args.root, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    failed = [name for name, s in status.items() if s not in ("ok", "done before")]
    print(f"\n{len(runs) - len(failed)}/{len(runs)} runs succeeded; results.csv and tensorboard --logdir {args.root}")
    for name in failed:
        print(f"failed: {name} (log: {os.path.join(args.root, name, 'log.txt')})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
