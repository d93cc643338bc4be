"""The end-of-run summary table on the console."""

from __future__ import annotations


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def print_summary(summary: dict, tb_dir: str) -> None:
    rows = [
        ("validation success at start", _pct(summary.get("val_success_start"))),
    ]
    if summary.get("val_success_after_warmstart") is not None:
        rows.append(("validation success after warm-start", _pct(summary["val_success_after_warmstart"])))
    rows += [
        ("validation success after RL", _pct(summary.get("val_success_final"))),
        ("best validation success", _pct(summary.get("val_success_best"))),
        ("wall time", f"{summary['wall_time_s']:.0f} s"),
        ("trained tokens / s", f"{summary['trained_tokens_per_s']:.0f}"),
    ]
    if summary.get("stop_reason"):
        rows.append(("early stop", summary["stop_reason"]))
    width = max(len(r[0]) for r in rows)
    print("\n" + "=" * (width + 14))
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10}")
    print("=" * (width + 14))
    print(f"TensorBoard: tensorboard --logdir {tb_dir}\n")
