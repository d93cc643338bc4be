"""Learning curves from TensorBoard event files, several runs side by side, as one PNG.

  python experiments/plot.py runs/a runs/b --out curves.png
  python experiments/plot.py runs/sweep/* --metrics val/SimpleSokoban/success,rollout/in_group_reward_std

Each run folder is searched recursively for event files (tensorboardX format); no TensorFlow or
TensorBoard install is needed: the TFRecord framing is read directly.
"""

from __future__ import annotations

import argparse
import glob
import os
import struct
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboardX.proto import event_pb2  # noqa: E402

# Metric families: the first key present in a run is plotted (names differ per env tag).
DEFAULT_PANELS = {
    "validation success": ["val/*/success"],
    "train reward": ["train/*/reward"],
    "in-group reward std": ["rollout/in_group_reward_std", "rollout/in_group_std"],
    "policy entropy": ["actor/entropy"],
    "MI estimate": ["collapse_first_turn_sample/mi_estimate", "collapse_trajectory_sample/mi_estimate"],
}


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from every event file under run_dir."""
    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(run_dir, "**", "events.out.tfevents.*"), recursive=True)):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            start = pos + 12
            record = data[start:start + length]
            pos = start + length + 4
            if len(record) < length:
                break  # a file still being written
            event = event_pb2.Event()
            event.ParseFromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars[value.tag].append((event.step, value.simple_value))
    return {k: sorted(v) for k, v in scalars.items()}


def _match(tags, pattern: str) -> str | None:
    import fnmatch

    hits = sorted(t for t in tags if fnmatch.fnmatch(t, pattern))
    return hits[0] if hits else None


def plot_runs(run_dirs: list[str], out: str, panels: dict[str, list[str]] | None = None) -> str:
    panels = panels or DEFAULT_PANELS
    runs = {os.path.basename(os.path.normpath(d)) or d: read_scalars(d) for d in run_dirs}
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
    handles, labels = axes[0][0].get_legend_handles_labels()
    if not handles:
        for ax in axes[0]:
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                break
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    else:
        fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders (workdirs)")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--metrics", default="", help="comma-separated tags/patterns, one panel each")
    args = parser.parse_args()
    panels = {m: [m] for m in args.metrics.split(",") if m} or None
    print(plot_runs(args.runs, args.out, panels))


if __name__ == "__main__":
    main()
