"""RAGEN-2's collapse diagnostics of finished runs, step by step, next to their success (from the event files).

  python experiments/studies/mi_table.py runs/reasoning_ablation/* [--prefix collapse_first_turn_sample]

For every diagnostics step of each run: the MI estimate (and its log N bound), H(Z|X) per token, retrieval
accuracy against its chance level, the regime, the training success of that step and the latest validation
success. Then, per run, whether MI fell while H(Z|X) held (template collapse) and which moved first (MI by more than
10% of log N, or validation success by more than 5 points). `--markdown` prints one table row per run instead:

  python experiments/studies/mi_table.py runs/reasoning_sokoban/*_seed* --markdown

The regime is the one the run logged (with the thresholds of its config) unless `--thresholds FILE` (a JSON of
thresholds, or calibrate_regimes.py's --json) re-classifies every step's (H(Z|X), MI, log N).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/plot.py
import plot  # noqa: E402

from ragen_jax.diagnostics.regimes import REGIMES, classify  # noqa: E402


def _series(scalars: dict, pattern: str) -> dict[int, float]:
    tag = next((t for t in sorted(scalars) if fnmatch.fnmatch(t, pattern)), None)
    return dict(scalars[tag]) if tag else {}


def _latest(series: dict[int, float], step: int) -> float:
    known = [s for s in series if s <= step]
    return series[max(known)] if known else float("nan")


def run_table(run_dir: str, prefix: str, thresholds: dict | None = None) -> list[dict]:
    """One row per diagnostics step: step, mi, bound, h, retrieval, chance, regime (index into REGIMES: as logged,
    or classified with `thresholds` when given), train/val success."""
    s = plot.read_scalars(run_dir)
    mi = _series(s, f"{prefix}/mi_estimate")
    if not mi:
        raise ValueError(f"{run_dir}: no {prefix}/mi_estimate scalars (turn on the diagnostics: "
                         "--config.diagnostics.every=N, on a policy that reasons)")
    cols = {name: _series(s, f"{prefix}/{tag}") for name, tag in (
        ("bound", "mi_upper_bound"), ("h", "conditional_entropy_est"), ("retrieval", "retrieval_accuracy"),
        ("chance", "retrieval_chance_level"), ("regime", "regime"))}
    train, val = _series(s, "train/*/success"), _series(s, "val/*/success")
    rows = []
    for step in sorted(mi):
        row = dict(step=step, mi=mi[step], train=train.get(step, float("nan")), val=_latest(val, step))
        row.update({name: series.get(step, float("nan")) for name, series in cols.items()})
        if thresholds is not None and math.isfinite(row["h"]) and math.isfinite(row["mi"]) and row["bound"] > 0:
            row["regime"] = REGIMES.index(classify(row["h"], row["mi"], thresholds, row["bound"]))
        rows.append(row)
    return rows


def template_collapse(rows: list[dict]) -> bool:
    """MI fell by more than 10% (and more than 5% of log N: a fall from near zero, a policy that never depended on
    its input, is not a collapse) while H(Z|X) held, from the first row to the last."""
    first, last = rows[0], rows[-1]
    return (last["mi"] - first["mi"] < -max(0.1 * first["mi"], 0.05 * first["bound"])
            and last["h"] - first["h"] > -0.1 * max(first["h"], 1e-6))


def summary(rows: list[dict]) -> str:
    """How MI, H(Z|X) and validation success moved, and whether that is template collapse."""
    first, last = rows[0], rows[-1]
    d_mi, d_h, d_val = last["mi"] - first["mi"], last["h"] - first["h"], last["val"] - first["val"]
    return (f"MI {first['mi']:.3f} -> {last['mi']:.3f} ({d_mi:+.3f}), H(Z|X) {first['h']:.3f} -> {last['h']:.3f} "
            f"({d_h:+.3f}), validation success {first['val']:.3f} -> {last['val']:.3f} ({d_val:+.3f}); "
            f"template collapse (MI down >10% and >5% of log N, H(Z|X) held): "
            f"{'yes' if template_collapse(rows) else 'no'}")


def first_move(rows: list[dict], key: str, margin: float) -> int | None:
    """The first step whose `key` is more than `margin` away from the first row's, or None."""
    return next((r["step"] for r in rows if abs(r[key] - rows[0][key]) > margin), None)


def lead_lag(rows: list[dict], success_margin: float = 0.05) -> str:
    """Which moved first: MI (by more than 10% of log N) or validation success (by more than `success_margin`, about
    2.5 standard deviations of a 512-episode figure)? RAGEN-2 reads MI as an early signal."""
    mi_step = first_move(rows, "mi", 0.1 * rows[0]["bound"])
    val_step = first_move(rows, "val", success_margin)
    moved = f"MI moved first at step {mi_step}, success at step {val_step}"
    if mi_step is None and val_step is None:
        return "neither MI nor validation success moved beyond its margin"
    if mi_step is None:
        return f"validation success moved (step {val_step}); MI never did"
    if val_step is None:
        return f"MI moved (step {mi_step}); validation success never did"
    if mi_step == val_step:
        return f"MI and validation success moved at the same diagnostics step ({mi_step})"
    return moved if mi_step < val_step else f"success moved first at step {val_step}, MI at step {mi_step}"


MARKDOWN_HEADER = ("| run | validation success (warm start -> after RL, best) | MI nats (first -> last; range) "
                   "| log N | H(Z|X) nats/token (range) | retrieval (range; chance) | regimes | template collapse | "
                   "which moved first | updates, kept groups |\n" + "| --- " * 10 + "|")


def _span(rows: list[dict], key: str, fmt: str = ".2f") -> str:
    values = [r[key] for r in rows if r[key] == r[key]]
    return f"{min(values):{fmt}}-{max(values):{fmt}}" if values else "-"


def markdown_row(run_dir: str, rows: list[dict]) -> str:
    """One markdown row for a run: its diagnostics' ranges beside its summary.json (when the run wrote one)."""
    path = os.path.join(run_dir, "summary.json")
    info = {}
    if os.path.exists(path):
        with open(path) as f:
            info = json.load(f)
    pct = lambda key: f"{100 * info[key]:.1f}%" if key in info else "?"  # noqa: E731
    kept = f"{100 * info['mean_kept_ratio']:.0f}%" if "mean_kept_ratio" in info else "?"
    regimes = sorted({REGIMES[int(r["regime"])] for r in rows if r["regime"] == r["regime"]})
    first, last = rows[0], rows[-1]
    return (f"| {os.path.basename(os.path.normpath(run_dir))} | {pct('val_success_after_warmstart')} -> "
            f"{pct('val_success_final')} ({pct('val_success_best')}) | {first['mi']:.2f} -> {last['mi']:.2f}; "
            f"{_span(rows, 'mi')} | {_span(rows, 'bound')} | {_span(rows, 'h', '.3f')} | "
            f"{_span(rows, 'retrieval')}; {_span(rows, 'chance', '.3f')} | {', '.join(regimes) or '?'} | "
            f"{'yes' if template_collapse(rows) else 'no'} | {lead_lag(rows)} | "
            f"{info.get('updates_applied', '?')}, {kept} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--prefix", default="collapse_first_turn_sample")
    parser.add_argument("--markdown", action="store_true", help="one markdown table row per run")
    parser.add_argument("--thresholds", default="", help="re-classify the regimes with this JSON's thresholds")
    args = parser.parse_args(argv)
    try:
        thresholds = plot.load_thresholds(args.thresholds) if args.thresholds else None
    except ValueError as e:
        parser.exit(2, f"mi_table.py: error: {e}\n")
    if args.markdown:
        print(MARKDOWN_HEADER)
    for run in args.runs:
        try:
            rows = run_table(run, args.prefix, thresholds)
        except ValueError as e:
            parser.exit(2, f"mi_table.py: error: {e}\n")
        if args.markdown:
            print(markdown_row(run, rows))
            continue
        print(f"\n{run}")
        print(f"  {'step':>4} {'MI':>6} {'logN':>5} {'H(Z|X)':>7} {'retr':>5} {'chance':>6} {'regime':<20} "
              f"{'train':>5} {'val':>5}")
        for r in rows:
            regime = REGIMES[int(r["regime"])] if r["regime"] == r["regime"] else "?"
            print(f"  {r['step']:>4} {r['mi']:6.3f} {r['bound']:5.2f} {r['h']:7.3f} {r['retrieval']:5.2f} "
                  f"{r['chance']:6.3f} {regime:<20} {r['train']:5.2f} {r['val']:5.2f}")
        print("  " + summary(rows))
        print("  " + lead_lag(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
