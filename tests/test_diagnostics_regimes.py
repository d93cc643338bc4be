"""Regimes, Echo-Trap warnings, token entropy, plots and the collapse pass with a fake scorer."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.diagnostics import (
    FIRST_TURN,
    TRAJECTORY,
    CollapseConfig,
    RolloutPairs,
    classify,
    collapse_metrics,
    echo_trap_warnings,
    regime_metrics,
    should_compute,
    token_entropy,
)
from ragen_jax.diagnostics.plots import curves_image, regime_plane_image, save_png, tensorboard_layout
from ragen_jax.diagnostics.warnings import entropy_collapse, falling_reward_std, grad_norm_spike


def test_classify_four_quadrants_and_relative_mi():
    th = {"conditional_entropy": 1.0, "mi": 0.1, "mi_relative": False}
    assert classify(2.0, 0.5, th) == "diverse"
    assert classify(2.0, 0.0, th) == "template_collapse"
    assert classify(0.2, 0.5, th) == "compressed"
    assert classify(0.2, 0.0, th) == "low_entropy_collapse"
    rel = {"conditional_entropy": 1.0, "mi": 0.5, "mi_relative": True}
    assert classify(2.0, 1.0, rel, mi_upper_bound=math.log(4)) == "diverse"  # 1.0 / 1.386 > 0.5
    assert classify(2.0, 0.5, rel, mi_upper_bound=math.log(4)) == "template_collapse"
    with pytest.raises(ValueError, match="Unknown regime threshold"):
        classify(1.0, 1.0, {"entropy": 1.0})


def test_default_thresholds_separate_the_calibration_arms():
    """The defaults put the corners of each calibration arm's measured range (docs/diagnostics.md: H(Z|X)
    nats/token, MI / log N; Sokoban's and FrozenLake's arms) in the regime the arm was built for, and
    configs/base.py uses them."""
    from configs.base import get_base_config
    from ragen_jax.diagnostics.regimes import DEFAULT_THRESHOLDS

    ranges = {  # regime: [(H min, H max), (MI min, MI max)] per environment
        "low_entropy_collapse": [((0.001, 0.001), (-0.000, 0.000)), ((0.003, 0.032), (-0.000, 0.000))],
        "compressed": [((0.003, 0.054), (0.347, 0.563)), ((0.111, 0.386), (0.175, 0.317))],
        "template_collapse": [((2.133, 2.264), (-0.000, 0.004)), ((2.145, 2.227), (-0.002, 0.000))],
        "diverse": [((0.962, 1.025), (0.231, 0.383)), ((1.431, 1.667), (0.044, 0.112))],
    }
    for regime, envs in ranges.items():
        for h_range, mi_range in envs:
            for h in h_range:
                for mi_rel in mi_range:
                    got = classify(h, mi_rel * math.log(64), mi_upper_bound=math.log(64))
                    assert got == regime, (regime, h, mi_rel)
    d = get_base_config().diagnostics
    assert (d.entropy_threshold, d.mi_threshold, d.mi_relative) == tuple(
        DEFAULT_THRESHOLDS[k] for k in ("conditional_entropy", "mi", "mi_relative"))


def test_regime_metrics_one_hot():
    m = {f"{FIRST_TURN}/conditional_entropy_est": 2.0, f"{FIRST_TURN}/mi_estimate": 0.0}
    out = regime_metrics(m, FIRST_TURN, {"conditional_entropy": 1.0, "mi": 0.1, "mi_relative": False})
    assert out[f"{FIRST_TURN}/regime"] == 1.0
    assert out[f"{FIRST_TURN}/regime_template_collapse"] == 1.0
    assert sum(v for k, v in out.items() if "/regime_" in k) == 1.0
    assert regime_metrics({}, FIRST_TURN) == {}


def test_best_cut_hand_cases():
    from ragen_jax.diagnostics.regimes import best_cut

    cut, acc, gap = best_cut([0.01, 0.05, 1.0, 2.0], [False, False, True, True], log_scale=True)
    assert cut == pytest.approx(math.sqrt(0.05 * 1.0)) and acc == 1.0 and gap == pytest.approx(math.log(20.0))
    cut, acc, gap = best_cut([0.6, 0.0, 0.5, 0.02], [True, False, True, False])  # order does not matter
    assert cut == pytest.approx(0.26) and acc == 1.0 and gap == pytest.approx(0.48)
    cut, acc, _ = best_cut([0.1, 0.2, 0.3, 0.4], [False, True, False, True])  # overlapping: 3 of 4 at best
    assert acc == 0.75 and cut in (pytest.approx(0.15), pytest.approx(0.35))
    cut, acc, _ = best_cut([0.01, 0.4], [False, True], log_scale=True)
    assert cut == pytest.approx(math.sqrt(0.004)) and acc == 1.0
    cut, acc, _ = best_cut([-0.02, 0.4], [False, True], log_scale=True)  # a side <= 0: the arithmetic middle
    assert cut == pytest.approx(0.19) and acc == 1.0
    with pytest.raises(ValueError, match="both kinds"):
        best_cut([0.1, 0.2], [True, True])


def test_calibrate_separates_four_labelled_clusters():
    from ragen_jax.diagnostics.regimes import calibrate

    rng = np.random.default_rng(0)
    centres = {"compressed": (0.02, 0.6), "low_entropy_collapse": (0.01, 0.0), "template_collapse": (1.5, 0.01),
               "diverse": (0.8, 0.45)}
    points = [(h * math.exp(rng.normal(0, 0.2)), mi + rng.normal(0, 0.03), name)
              for name, (h, mi) in centres.items() for _ in range(10)]
    th, report = calibrate(points)
    assert report["accuracy"] == 1.0 and th["mi_relative"] and report["points"] == 40
    assert 0.05 < th["conditional_entropy"] < 0.6 and 0.08 < th["mi"] < 0.4
    assert all(classify(h, mi, th, 1.0) == name for h, mi, name in points)
    with pytest.raises(ValueError, match="Unknown regime"):
        calibrate(points + [(0.1, 0.1, "healthy")])


def test_warnings_fire_only_on_the_pattern():
    steady = [1.0] * 30
    falling = [1.0] * 15 + list(np.linspace(1.0, 0.1, 15))
    assert falling_reward_std(steady) is None
    assert "reward std" in falling_reward_std(falling)
    assert falling_reward_std(falling[:12]) is None  # too short to judge
    assert entropy_collapse([1.0] * 20 + [0.3] * 10) is not None
    assert entropy_collapse([0.01] * 10) is not None  # below the floor
    assert entropy_collapse([1.0] * 30) is None
    assert grad_norm_spike([1.0] * 10 + [6.0]) is not None
    assert grad_norm_spike([1.0] * 10 + [2.0]) is None
    msgs, flags = echo_trap_warnings(
        {"rollout/in_group_reward_std": falling, "actor/entropy": [1.0] * 30,
         "actor/grad_norm": [1.0] * 10 + [9.0]}
    )
    assert len(msgs) == 2 and flags["warnings/count"] == 2.0
    assert flags["warnings/falling_reward_std"] == 1.0 and flags["warnings/entropy_collapse"] == 0.0
    with pytest.raises(ValueError, match="Unknown warning option"):
        echo_trap_warnings({}, {"windw": 3})


def test_token_entropy():
    logits = jnp.stack([jnp.zeros((3, 4)), jnp.array([[50.0, 0, 0, 0]] * 3)])  # uniform, peaked
    mask = jnp.array([[1, 1, 0], [1, 1, 1]], bool)
    per_row, overall = token_entropy(logits, mask)
    np.testing.assert_allclose(per_row, [math.log(4), 0.0], atol=1e-5)
    assert float(overall) == pytest.approx(2 * math.log(4) / 5, abs=1e-5)


def test_should_compute_schedule():
    cfg = CollapseConfig(compute_freq=5)
    assert [s for s in range(12) if should_compute(s, cfg)] == [1, 5, 10]
    assert not should_compute(5, CollapseConfig(first_turn_enabled=False, multi_turn_enabled=False))


def _copying_scorer(prompts, reasonings):
    """A policy whose reasoning copies the prompt: high likelihood only under its own prompt."""
    L = np.array([[-0.2 if z[: len(x)] == x else -20.0 for x in prompts] for z in reasonings])
    lengths = np.array([len(z) for z in reasonings])[:, None]
    return L, L * lengths


def test_collapse_metrics_end_to_end_with_fake_scorer():
    groups, size = 8, 4
    prompts = [[g + 1, g + 2] for g in range(groups) for _ in range(size)]
    reasonings = [p + [0] for p in prompts]
    pairs = RolloutPairs(
        prompts, reasonings, [n // size for n in range(groups * size)],
        turn_prompts=[[p] for p in prompts], turn_reasonings=[[z] for z in reasonings],
    )
    cfg = CollapseConfig(num_samples=16, thresholds={"conditional_entropy": 0.1, "mi": 0.1, "mi_relative": False})
    m, ema = collapse_metrics(pairs, _copying_scorer, cfg, np.random.default_rng(0))
    assert m[f"{FIRST_TURN}/retrieval_accuracy"] == 1.0
    assert m[f"{FIRST_TURN}/mi_estimate"] == pytest.approx(m[f"{FIRST_TURN}/mi_upper_bound"], abs=1e-6)
    assert m[f"{FIRST_TURN}/regime_diverse"] == 1.0
    assert m["collapse/first_turn_valid_rate"] == 1.0 and m["collapse/valid_thinking_rate"] == 1.0
    # Trajectory sampling: duplicate draws are identical columns, merged for retrieval.
    assert m[f"{TRAJECTORY}/retrieval_accuracy"] == 1.0
    assert m[f"{TRAJECTORY}/num_prompts"] == 16
    assert "timing_s/collapse_first_turn_step" in m and "timing_s/collapse_multi_turn_step" in m
    assert set(ema) == {FIRST_TURN, TRAJECTORY}


def test_plots_are_rgb_images(tmp_path):
    img = regime_plane_image([1.5, 1.0, 0.3], [0.4, 0.02, 0.01], steps=[1, 5, 10])
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.std() > 10  # not blank
    curves = curves_image([1, 5, 10], [0.4, 0.02, 0.01], [1.5, 1.0, 0.3], [2.0, 2.0, 2.0])
    assert curves.shape[2] == 3 and curves.std() > 10
    save_png(img, str(tmp_path / "plane.png"))
    assert (tmp_path / "plane.png").stat().st_size > 1000
    layout = tensorboard_layout([FIRST_TURN])
    (chart,) = [v for k, v in layout["collapse diagnostics"].items() if "MI vs" in k]
    assert f"{FIRST_TURN}/conditional_entropy_est" in chart[1]


@pytest.mark.parametrize("h,mi", [([1.0, 0.6, 1.0001], [0.2, 0.05, 0.2001]), ([0.7, 0.7], [0.1, 0.1]), ([0.5], [0.1])])
def test_start_and_now_labels_never_overlap(h, mi):
    """A path that ends where it began (or a single point) must still show readable labels."""
    from ragen_jax.diagnostics.plots import regime_plane_figure

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = regime_plane_figure(h, mi, steps=list(range(len(h))))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    labels = [t for t in fig.axes[0].texts if t.get_text() in ("start", "now", "start = now")]
    assert [t.get_text() for t in labels] == (["start = now"] if len(h) == 1 else ["start", "now"])
    if len(labels) == 2:
        a, b = (t.get_window_extent(renderer) for t in labels)
        assert not a.overlaps(b)


@pytest.mark.parametrize("h, mi", [(math.nan, 0.5), (1.0, math.nan), (math.inf, 0.0), (math.nan, math.nan)])
def test_a_non_finite_point_has_no_regime(h, mi):
    """NaN log-probs (a broken policy) compared below every threshold and were logged and printed as a confident
    regime (NaN H(Z|X) with MI 0.5 read as "compressed"); now the regime is NaN, no one-hot is set, and the
    printed report says why."""
    from ragen_jax.diagnostics.__main__ import summary

    with pytest.raises(ValueError, match="non-finite"):
        classify(h, mi, mi_upper_bound=math.log(8))
    p = FIRST_TURN
    metrics = {f"{p}/conditional_entropy_est": h, f"{p}/mi_estimate": mi, f"{p}/mi_upper_bound": math.log(8)}
    out = regime_metrics(metrics, p)
    assert math.isnan(out[f"{p}/regime"]) and not any(v for k, v in out.items() if "/regime_" in k)
    full = {**metrics, **out, **{f"{p}/{k}": 0.0 for k in (
        "num_samples", "num_prompts", "reasoning_entropy_est", "retrieval_accuracy", "retrieval_chance_level",
        "retrieval_accuracy_at_8", "retrieval_chance_level_at_8", "mi_zscore", "mi_seq_estimate")}}
    assert "regime             undefined" in summary(full)


def test_the_regime_plane_leaves_out_non_finite_points():
    """One step of data, NaN and infinite steps: an image (an infinite point set infinite axis limits, a
    ValueError inside the training step's diagnostics)."""
    from ragen_jax.diagnostics.plots import regime_plane_figure

    for h, mi in (([0.5], [0.02]), ([0.5, math.inf, 0.7], [0.02, 0.01, math.nan]), ([math.nan], [0.1]),
                  ([0.4, 0.6], [-math.inf, 0.05])):
        img = regime_plane_image(h, mi, steps=list(range(1, len(h) + 1)), mi_upper_bound=math.log(8))
        assert img.ndim == 3 and img.std() > 10
    fig = regime_plane_figure([0.5, math.inf, 0.7], [0.02, 0.01, 0.03], steps=[1, 5, 10])
    (points,) = fig.axes[0].collections[-1:]
    assert len(points.get_offsets()) == 2 and np.isfinite(fig.axes[0].get_xlim()).all()
