"""Pictures a person can read in TensorBoard: the (H(Z|X), MI) plane with the run's path through
the four regimes, the MI and conditional-entropy curves on one chart, the MI z-score curves, and RAGEN-2's
gradient analysis (each part's norm per reward-variance bucket at one step, and over the steps). Images are
uint8 RGB arrays [H, W, 3] (TensorBoard's add_image with dataformats="HWC") or PNG files. `scalars` arguments
are {tag: [(step, value), ...]}, as experiments/plot.py's read_scalars gives them.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

from ragen_jax.diagnostics.regimes import thresholds_from

_REGIME_STYLE = {  # (label, colour) per quadrant
    "diverse": ("diverse reasoning", "#d9f0d3"),
    "template_collapse": ("template collapse", "#fde0dd"),
    "compressed": ("compressed reasoning", "#deebf7"),
    "low_entropy_collapse": ("low-entropy collapse", "#f0f0f0"),
}


def _figure(width: float = 6.0, height: float = 4.5):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def figure_rgb(fig: Any) -> np.ndarray:
    """A matplotlib figure as a uint8 RGB image [H, W, 3]."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def regime_plane_figure(
    conditional_entropy: Sequence[float],
    mi: Sequence[float],
    steps: Sequence[int] | None = None,
    thresholds: Mapping[str, Any] | None = None,
    mi_upper_bound: float | None = None,
    title: str = "reasoning regimes",
):
    """Matplotlib figure of the (H(Z|X), MI) path over training, quadrants shaded by regime. Non-finite points
    (a step whose log-probs were NaN) are left out: an infinite one set infinite axis limits, an error."""
    h = np.asarray(conditional_entropy, dtype=float)
    m = np.asarray(mi, dtype=float)
    if h.shape != m.shape or h.ndim != 1:
        raise ValueError("conditional_entropy and mi must be 1-D histories of equal length.")
    finite = np.isfinite(h) & np.isfinite(m)
    if steps is not None and len(steps) == h.size:
        steps = [s for s, keep in zip(steps, finite) if keep]
    h, m = h[finite], m[finite]
    th = thresholds_from(thresholds)
    mi_cut = th["mi"] * (mi_upper_bound or 1.0) if th["mi_relative"] else th["mi"]
    h_cut = th["conditional_entropy"]
    x_hi = max(h_cut * 2, float(h.max(initial=0)) * 1.1, 1e-3)
    y_lo = min(0.0, float(m.min(initial=0)) * 1.1)
    y_hi = max(mi_cut * 2, float(m.max(initial=0)) * 1.1, 1e-3)
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    quads = {
        "diverse": (h_cut, x_hi, mi_cut, y_hi), "template_collapse": (h_cut, x_hi, y_lo, mi_cut),
        "compressed": (0, h_cut, mi_cut, y_hi), "low_entropy_collapse": (0, h_cut, y_lo, mi_cut),
    }
    for name, (x0, x1, y0, y1) in quads.items():
        label, colour = _REGIME_STYLE[name]
        ax.axvspan(x0, x1, ymin=(y0 - y_lo) / (y_hi - y_lo), ymax=(y1 - y_lo) / (y_hi - y_lo),
                   color=colour, zorder=0)
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, label, ha="center", va="center", fontsize=9,
                color="#555555", zorder=1)
    if h.size:
        ax.plot(h, m, "-", color="#444444", lw=1, zorder=2)
        colours = np.linspace(0, 1, h.size)
        pts = ax.scatter(h, m, c=colours, cmap="viridis", s=22, zorder=3)
        _label_ends(ax, h, m)
        if steps is not None and len(steps) == h.size:
            bar = fig.colorbar(pts, ax=ax)
            bar.set_label("step")
            ticks = np.linspace(0, 1, min(5, h.size))
            bar.set_ticks(ticks)
            bar.set_ticklabels([str(steps[int(round(t * (h.size - 1)))]) for t in ticks])
    ax.set_xlim(0, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("H(Z|X) estimate (nats/token)")
    ax.set_ylabel("MI estimate I(X;Z) (nats)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _label_ends(ax, h: np.ndarray, m: np.ndarray) -> None:
    """"start" below-left of the first point and "now" above-right of the last, offset in screen points, so
    they never cover each other even when the path returns to where it began (one point: "start = now")."""
    style = dict(fontsize=8, zorder=4, textcoords="offset points",
                 bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.7))
    if h.size == 1:
        ax.annotate("start = now", (h[0], m[0]), xytext=(6, 6), ha="left", va="bottom", **style)
        return
    ax.annotate("start", (h[0], m[0]), xytext=(-6, -6), ha="right", va="top", **style)
    ax.annotate("now", (h[-1], m[-1]), xytext=(6, 6), ha="left", va="bottom", **style)


def regime_plane_image(*args: Any, **kwargs: Any) -> np.ndarray:
    """The regime-plane figure as a uint8 RGB image [H, W, 3]."""
    return figure_rgb(regime_plane_figure(*args, **kwargs))


def curves_figure(
    steps: Sequence[int],
    mi: Sequence[float],
    conditional_entropy: Sequence[float],
    mi_upper_bound: Sequence[float] | None = None,
    title: str = "MI and conditional entropy",
):
    """MI (left axis, with its log N bound) and H(Z|X) (right axis) over training steps."""
    fig = _figure(6.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(steps, mi, "-o", ms=3, color="#1f77b4", label="MI estimate")
    if mi_upper_bound is not None:
        ax.plot(steps, mi_upper_bound, "--", color="#1f77b4", alpha=0.5, label="log N bound")
    ax.set_xlabel("step")
    ax.set_ylabel("MI (nats)", color="#1f77b4")
    ax2 = ax.twinx()
    ax2.plot(steps, conditional_entropy, "-s", ms=3, color="#d62728", label="H(Z|X)")
    ax2.set_ylabel("H(Z|X) (nats/token)", color="#d62728")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="best", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def curves_image(*args: Any, **kwargs: Any) -> np.ndarray:
    """The curves figure as a uint8 RGB image [H, W, 3]."""
    return figure_rgb(curves_figure(*args, **kwargs))


def save_png(image: np.ndarray, path: str) -> None:
    """Writes an RGB image [H, W, 3] uint8 as PNG."""
    import matplotlib.image

    matplotlib.image.imsave(path, image)


GRAD_PARTS = ("task", "entropy", "kl")
_PART_STYLE = {"task": "#e67e22", "entropy": "#27ae60", "kl": "#2980b9", "regularizer": "#16a085",
               "total": "#444444"}
ZSCORES = ("mi_zscore", "mi_zscore_seq", "mi_zscore_ema", "mi_zscore_ema_seq")


def bucket_names(tags: Any, prefix: str = "grad_norm") -> list[str]:
    """The variance buckets named in metric tags (a dict's keys or a list), bucket_1, bucket_2, ... in order."""
    found = {m.group(1) for t in tags if (m := re.match(rf"{re.escape(prefix)}/(bucket_(\d+))/", t))}
    return sorted(found, key=lambda b: int(b.split("_")[1]))


def gradient_buckets_figure(metrics: Mapping[str, float], prefix: str = "grad_norm",
                            title: str = "gradient norm by reward-variance bucket"):
    """One analysis step as RAGEN's plotting script draws it: per part (task, entropy, KL), a bar per bucket (low
    to high reward variance, each labelled with its mean in-group reward std) and the whole batch ("all") as a
    dashed line; last, the task and regularizer (entropy + KL) norms against the buckets' reward std."""
    buckets = bucket_names(metrics, prefix)
    if not buckets:
        raise ValueError(f"No {prefix}/bucket_N/* metrics to draw: run the gradient analysis first.")
    parts = [c for c in GRAD_PARTS if f"{prefix}/{buckets[0]}/{c}" in metrics]
    rv = [metrics.get(f"{prefix}/{b}/reward_std_mean", float("nan")) for b in buckets]
    labels = [f"{b.split('_')[1]}\nRV {v:.2g}" for b, v in zip(buckets, rv)]
    fig = _figure(3.4 * (len(parts) + 1), 3.6)
    for i, part in enumerate(parts):
        ax = fig.add_subplot(1, len(parts) + 1, i + 1)
        ax.bar(labels, [metrics[f"{prefix}/{b}/{part}"] for b in buckets], color=_PART_STYLE[part], alpha=0.85)
        if f"{prefix}/all/{part}" in metrics:
            ax.axhline(metrics[f"{prefix}/all/{part}"], ls="--", color="#333333", lw=1, label="all")
            ax.legend(fontsize=7, loc="best")
        ax.set_title(f"{part} grad norm", fontsize=10)
        ax.set_xlabel("bucket (mean in-group reward std)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    ax = fig.add_subplot(1, len(parts) + 1, len(parts) + 1)
    for name in ("task", "regularizer", "total"):
        ys = [metrics.get(f"{prefix}/{b}/{name}") for b in buckets]
        if all(y is not None for y in ys):
            ax.plot(rv, ys, "-o", ms=4, color=_PART_STYLE[name], label=name)
    for k, (x, b) in enumerate(zip(rv, buckets), start=1):
        ax.annotate(f"Q{k}", (x, metrics[f"{prefix}/{b}/task"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("bucket mean in-group reward std", fontsize=8)
    ax.set_title("norms vs reward variance", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def gradient_buckets_image(*args: Any, **kwargs: Any) -> np.ndarray:
    """The per-step gradient figure as a uint8 RGB image [H, W, 3]."""
    return figure_rgb(gradient_buckets_figure(*args, **kwargs))


def gradient_curves_figure(scalars: Mapping[str, Sequence[tuple[int, float]]], prefix: str = "grad_norm",
                           title: str = "gradient norm parts over training"):
    """Each part's norm over the analysis steps: a panel per part, a line per bucket (dark = low reward variance,
    light = high) and the whole batch dashed."""
    buckets = bucket_names(scalars, prefix)
    parts = [c for c in GRAD_PARTS if any(f"{prefix}/{b}/{c}" in scalars for b in buckets + ["all"])]
    if not parts:
        raise ValueError(f"No {prefix}/<bucket>/task scalars to draw: the run logged no gradient analysis.")
    import matplotlib

    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, max(len(buckets), 1)))
    fig = _figure(4.0 * len(parts), 3.4)
    for i, part in enumerate(parts):
        ax = fig.add_subplot(1, len(parts), i + 1)
        for b, colour in zip(buckets, colours):
            points = scalars.get(f"{prefix}/{b}/{part}", [])
            if points:
                ax.plot(*zip(*points), "-o", ms=3, color=colour, label=b.replace("_", " "))
        if scalars.get(f"{prefix}/all/{part}"):
            ax.plot(*zip(*scalars[f"{prefix}/all/{part}"]), "--", color="black", lw=1, label="all")
        ax.set_title(f"{part} grad norm", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def zscore_figure(scalars: Mapping[str, Sequence[tuple[int, float]]], prefix: str = "collapse_first_turn_sample",
                  title: str | None = None):
    """RAGEN-2's MI z-scores over training (per-token and sequence-sum, each against this step's and the EMA of
    the marginals' std; left axis) and retrieval accuracy above chance (right axis)."""
    fig = _figure(6.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    styles = {"mi_zscore": "-o", "mi_zscore_seq": "-s", "mi_zscore_ema": "--o", "mi_zscore_ema_seq": "--s"}
    drawn = 0
    for name in ZSCORES:
        points = scalars.get(f"{prefix}/{name}", [])
        if points:
            ax.plot(*zip(*points), styles[name], ms=3, label=name)
            drawn += 1
    if not drawn:
        raise ValueError(f"No {prefix}/mi_zscore* scalars to draw: the run logged no MI diagnostics.")
    ax.axhline(0.0, color="#999999", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("MI z-score")
    above = scalars.get(f"{prefix}/retrieval_above_chance", [])
    lines = ax.get_lines()[:drawn]
    if above:
        ax2 = ax.twinx()
        lines += ax2.plot(*zip(*above), ":^", ms=3, color="#d62728", label="retrieval above chance")
        ax2.set_ylabel("retrieval accuracy - chance", color="#d62728")
    ax.legend(lines, [ln.get_label() for ln in lines], loc="best", fontsize=8)
    ax.set_title(title or f"{prefix}: MI z-scores", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def tensorboard_layout(prefixes: Sequence[str] = ("collapse_first_turn_sample",),
                       gradient_prefix: str | None = "grad_norm") -> dict:
    """Custom-scalars layout (tensorboardX add_custom_scalars) putting MI and H(Z|X) on one chart, the z-scores
    on another, and (gradient_prefix) each gradient part's buckets on one chart (tags are regular expressions)."""
    charts = {}
    for prefix in prefixes:
        charts[f"{prefix}: MI vs H(Z|X)"] = [
            "Multiline",
            [f"{prefix}/mi_estimate", f"{prefix}/mi_upper_bound", f"{prefix}/conditional_entropy_est"],
        ]
        charts[f"{prefix}: retrieval"] = [
            "Multiline", [f"{prefix}/retrieval_accuracy", f"{prefix}/retrieval_chance_level"],
        ]
        charts[f"{prefix}: MI z-scores"] = ["Multiline", [f"{prefix}/{name}" for name in ZSCORES]]
    layout = {"collapse diagnostics": charts}
    if gradient_prefix:
        p = re.escape(gradient_prefix)
        layout["gradient analysis"] = {f"{part} grad norm by bucket": ["Multiline", [rf"{p}/(all|bucket_\d+)/{part}$"]]
                                       for part in GRAD_PARTS}
    return layout
