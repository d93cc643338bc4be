"""Pictures a person can read in TensorBoard: the (H(Z|X), MI) plane with the run's path through
the four regimes, and the MI and conditional-entropy curves on one chart. Images are uint8
RGB arrays [H, W, 3] (TensorBoard's add_image with dataformats="HWC") or PNG files.
"""

from __future__ import annotations

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


def _to_rgb(fig: Any) -> np.ndarray:
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
    return _to_rgb(regime_plane_figure(*args, **kwargs))


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
    return _to_rgb(curves_figure(*args, **kwargs))


def save_png(image: np.ndarray, path: str) -> None:
    """Writes an RGB image [H, W, 3] uint8 as PNG."""
    import matplotlib.image

    matplotlib.image.imsave(path, image)


def tensorboard_layout(prefixes: Sequence[str] = ("collapse_first_turn_sample",)) -> dict:
    """Custom-scalars layout (tensorboardX add_custom_scalars) putting MI and H(Z|X) on one chart."""
    charts = {}
    for prefix in prefixes:
        charts[f"{prefix}: MI vs H(Z|X)"] = [
            "Multiline",
            [f"{prefix}/mi_estimate", f"{prefix}/mi_upper_bound", f"{prefix}/conditional_entropy_est"],
        ]
        charts[f"{prefix}: retrieval"] = [
            "Multiline", [f"{prefix}/retrieval_accuracy", f"{prefix}/retrieval_chance_level"],
        ]
    return {"collapse diagnostics": charts}
