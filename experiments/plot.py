"""Learning curves from TensorBoard event files, several runs side by side, as one PNG.

  python experiments/plot.py runs/a runs/b --out curves.png
  python experiments/plot.py runs/sweep/* --metrics val/SimpleSokoban/success,rollout/in_group_reward_std
  python experiments/plot.py runs/ablation/* --regime collapse_first_turn_sample --out docs/img/regimes.png

Each run folder is searched recursively for event files (its `eval/` outputs of `run.py --mode=eval` aside),
which are read with TensorBoard's own reader (EventAccumulator). `--metrics` takes tags or fnmatch patterns
(`val/*/success`), one panel each; one that matches no scalar of any run is an error that lists the known tags.
`--regime PREFIX` draws instead each run's path on RAGEN-2's (H(Z|X), MI) regime plane from its logged
`PREFIX/conditional_entropy_est` and `PREFIX/mi_estimate` (the run's own thresholds from its config.json when
it has one), `--columns` runs a row (3) in one PNG. `--zscore PREFIX` draws each run's RAGEN-2 MI z-scores
(per token, sequence, and their EMA variants) with retrieval above chance; `--gradients` each run's gradient
analysis over the steps (task / entropy / KL norm per reward-variance bucket, `grad_norm/*`; `--gradients
grad_norm_prefilter` for the pre-filter batch).

  python experiments/plot.py runs/a --zscore collapse_first_turn_sample --out zscores.png
  python experiments/plot.py runs/a runs/b --gradients --out gradients.png
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import sys
from collections import defaultdict

import matplotlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Metric families: the first key present in a run is plotted (names differ per env tag).
DEFAULT_PANELS = {
    "validation success": ["val/*/success"],
    "train reward": ["train/*/reward"],
    "in-group reward std": ["rollout/in_group_reward_std", "rollout/in_group_std"],
    "policy entropy": ["actor/entropy"],
    "MI estimate": ["collapse_first_turn_sample/mi_estimate", "collapse_trajectory_sample/mi_estimate"],
}


def event_dirs(run_dir: str) -> list[str]:
    """Every folder under run_dir (itself included) that holds TensorBoard event files, except the
    `eval/` outputs of `run.py --mode=eval` (their validation scalars would join the run's own curves;
    pass `RUN/eval/step_N` to plot one)."""
    files = glob.glob(os.path.join(run_dir, "**", "events.out.tfevents.*"), recursive=True)
    folders = {os.path.dirname(f) for f in files}
    return sorted(f for f in folders if os.path.relpath(f, run_dir).split(os.sep)[0] != "eval")


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} (sorted by step) from every event file under run_dir."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for folder in event_dirs(run_dir):
        acc = EventAccumulator(folder, size_guidance={SCALARS: 0})  # 0 = keep every point
        acc.Reload()
        for tag in acc.Tags()[SCALARS]:
            scalars[tag].extend((e.step, e.value) for e in acc.Scalars(tag))
    return {k: sorted(v) for k, v in scalars.items()}


def _match(tags, pattern: str) -> str | None:
    hits = sorted(t for t in tags if fnmatch.fnmatch(t, pattern))
    return hits[0] if hits else None


def check_metrics(runs: dict[str, dict], patterns: list[str]) -> None:
    """Raise ValueError for a tag or pattern that matches no scalar of any run, listing the known tags."""
    known = sorted({tag for scalars in runs.values() for tag in scalars})
    unknown = [p for p in patterns if not any(_match(scalars, p) for scalars in runs.values())]
    if unknown:
        listing = "\n  ".join(known) if known else "(none: no scalars in these runs)"
        raise ValueError(f"--metrics {', '.join(map(repr, unknown))}: no such scalar in "
                         f"{', '.join(runs)}. Known tags:\n  {listing}")


def run_names(run_dirs: list[str]) -> list[str]:
    """A label per run folder: its name, or as many parent folders as make the labels distinct
    (runs/a/seed0 and runs/b/seed0 -> a/seed0, b/seed0)."""
    parts = [os.path.normpath(os.path.abspath(d)).split(os.sep) for d in run_dirs]
    if len({tuple(p) for p in parts}) < len(parts):
        raise ValueError(f"A run folder is given twice: {', '.join(run_dirs)}.")
    depth = [1] * len(parts)
    while True:
        names = ["/".join(p[-k:]) for p, k in zip(parts, depth)]
        clashing = [i for i, n in enumerate(names) if names.count(n) > 1]
        if not clashing:
            return names
        for i in clashing:
            depth[i] += 1


def plot_runs(run_dirs: list[str], out: str, panels: dict[str, list[str]] | None = None) -> str:
    """One panel per metric family, one line per run -> the PNG path. Explicit panels must all exist."""
    runs = {name: read_scalars(d) for name, d in zip(run_names(run_dirs), run_dirs)}
    if not any(runs.values()):
        raise ValueError(f"No TensorBoard scalars under {', '.join(run_dirs)} (looked for events.out.tfevents.*).")
    if panels is not None:
        check_metrics(runs, [p for patterns in panels.values() for p in patterns])
    panels = panels or DEFAULT_PANELS
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, patterns) in zip(axes[0], panels.items()):
        for name, scalars in runs.items():
            tag = next((t for p in patterns if (t := _match(scalars, p))), None)
            if tag is None:
                continue
            steps, values = zip(*scalars[tag])
            ax.plot(steps, values, "-o", ms=2.5, label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    handles, labels = next(((h, l) for h, l in (ax.get_legend_handles_labels() for ax in axes[0]) if h), ([], []))
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    else:
        fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def plot_regimes(run_dirs: list[str], out: str, prefix: str, thresholds: dict | None = None,
                 columns: int = 3) -> str:
    """Each run's (H(Z|X), MI) path on the regime plane, `columns` runs a row -> the PNG path. thresholds (the
    regime thresholds' keys) replaces each run's own from its config.json."""
    from ragen_jax.diagnostics.offline import run_settings
    from ragen_jax.diagnostics.plots import regime_plane_image

    tags = [f"{prefix}/conditional_entropy_est", f"{prefix}/mi_estimate"]
    runs = {name: (d, read_scalars(d)) for name, d in zip(run_names(run_dirs), run_dirs)}
    if not any(all(t in scalars for t in tags) for _, scalars in runs.values()):
        raise ValueError(f"--regime {prefix}: no run of {', '.join(runs)} logged both {tags[0]} and {tags[1]}; "
                         "turn on the diagnostics (--config.diagnostics.every=N) on a policy that reasons "
                         "(docs/diagnostics.md).")
    images = []
    for name, (folder, scalars) in runs.items():
        if not all(t in scalars for t in tags):
            continue
        h, mi = (dict(scalars[t]) for t in tags)
        steps = sorted(set(h) & set(mi))
        bound = dict(scalars.get(f"{prefix}/mi_upper_bound", []))
        if not steps:
            continue
        images.append(regime_plane_image([h[s] for s in steps], [mi[s] for s in steps], steps=steps,
                                         thresholds=thresholds or run_settings(folder).get("thresholds"),
                                         mi_upper_bound=bound.get(steps[-1]), title=name))
    if not images:
        raise ValueError(f"No run of {', '.join(runs)} logged both {tags[0]} and {tags[1]} at the same step: "
                         "nothing to draw (the diagnostics log them every `diagnostics.every` steps).")
    return save_tiles(images, out, columns)


def save_tiles(images: list, out: str, columns: int) -> str:
    """RGB images [H, W, 3] side by side, `columns` a row, padded white -> the PNG path."""
    import numpy as np

    height, width = max(i.shape[0] for i in images), max(i.shape[1] for i in images)
    tiles = [np.pad(i, ((0, height - i.shape[0]), (0, width - i.shape[1]), (0, 0)), constant_values=255)
             for i in images]
    tiles += [np.full_like(tiles[0], 255)] * (-len(tiles) % columns)
    grid = np.concatenate([np.concatenate(tiles[r:r + columns], axis=1) for r in range(0, len(tiles), columns)])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    plt.imsave(out, grid)
    return out


def plot_per_run(run_dirs: list[str], out: str, figure, prefix: str, columns: int = 1) -> str:
    """One figure per run, `figure(scalars, prefix, title=run)` (plots.zscore_figure, gradient_curves_figure), tiled
    -> the PNG path; a run that logged none of its scalars is skipped, and none at all is an error."""
    from ragen_jax.diagnostics.plots import figure_rgb

    images, problems = [], []
    for name, folder in zip(run_names(run_dirs), run_dirs):
        try:
            fig = figure(read_scalars(folder), prefix, title=f"{name}: {prefix}")
        except ValueError as e:
            problems.append(f"{name}: {e}")
            continue
        images.append(figure_rgb(fig))
    if not images:
        raise ValueError("; ".join(problems))
    return save_tiles(images, out, columns)


def load_thresholds(path: str) -> dict:
    """The regime thresholds of a JSON file: {"thresholds": {...}} (calibrate_regimes.py's) or the mapping itself."""
    from ragen_jax.diagnostics.regimes import thresholds_from

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--thresholds {path}: cannot read it as JSON ({e}).") from None
    thresholds = data.get("thresholds", data) if isinstance(data, dict) else None
    if not isinstance(thresholds, dict):
        raise ValueError(f"--thresholds {path}: expected a JSON object of regime thresholds (or one under "
                         "\"thresholds\", as experiments/studies/calibrate_regimes.py --json writes).")
    return thresholds_from(thresholds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders (workdirs)")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--metrics", default="", help="comma-separated tags/patterns, one panel each")
    parser.add_argument("--regime", metavar="PREFIX", default="",
                        help="draw the regime plane of PREFIX (e.g. collapse_first_turn_sample) instead")
    parser.add_argument("--thresholds", default="", metavar="JSON",
                        help="with --regime: the thresholds of this file (experiments/studies/calibrate_regimes.py --json "
                             "writes one) instead of each run's own")
    parser.add_argument("--columns", type=int, default=None,
                        help="runs per row (--regime: 3, --zscore / --gradients: 1)")
    parser.add_argument("--zscore", metavar="PREFIX", default="",
                        help="draw the MI z-score curves of PREFIX (e.g. collapse_first_turn_sample) instead")
    parser.add_argument("--gradients", metavar="PREFIX", nargs="?", const="grad_norm", default="",
                        help="draw the gradient analysis (grad_norm, or grad_norm_prefilter) over the steps instead")
    args = parser.parse_args(argv)
    if args.columns is not None and args.columns < 1:
        parser.error("--columns must be >= 1")
    if sum(map(bool, (args.regime, args.zscore, args.gradients))) > 1:
        parser.error("draw one of --regime, --zscore, --gradients at a time")
    panels = {m: [m] for m in args.metrics.split(",") if m} or None
    try:
        from ragen_jax.diagnostics.plots import gradient_curves_figure, zscore_figure

        thresholds = load_thresholds(args.thresholds) if args.thresholds else None
        if args.regime:
            print(plot_regimes(args.runs, args.out, args.regime, thresholds, args.columns or 3))
        elif args.zscore or args.gradients:
            figure = zscore_figure if args.zscore else gradient_curves_figure
            print(plot_per_run(args.runs, args.out, figure, args.zscore or args.gradients, args.columns or 1))
        else:
            print(plot_runs(args.runs, args.out, panels))
    except ValueError as e:
        parser.exit(2, f"plot.py: error: {e}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
