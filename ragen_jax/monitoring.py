"""TensorBoard logging (tensorboardX) and the console progress line."""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np


class Monitor:
    """Scalars, text and images to TensorBoard event files under `logdir` (process 0 only)."""

    def __init__(self, logdir: str, *, enabled: bool = True):
        self.logdir = logdir
        self.enabled = enabled
        self.writer = None
        if enabled:
            from tensorboardX import SummaryWriter

            os.makedirs(logdir, exist_ok=True)
            self.writer = SummaryWriter(logdir=logdir, flush_secs=10)

    def scalars(self, metrics: Mapping[str, float], step: int) -> None:
        if not self.writer:
            return
        for name, value in metrics.items():
            value = float(np.asarray(value))
            if np.isfinite(value):
                self.writer.add_scalar(name, value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        if self.writer:
            self.writer.add_text(tag, text, step)

    def image(self, tag: str, image_hwc: np.ndarray, step: int) -> None:
        if self.writer:
            self.writer.add_image(tag, image_hwc, step, dataformats="HWC")

    def flush(self) -> None:
        if self.writer:
            self.writer.flush()

    def close(self) -> None:
        if self.writer:
            self.writer.close()
