"""TensorBoard logging (tensorboardX): scalars, text, images and the run's config as hparams; optionally
mirrored to a Weights & Biases run (`--config.logging.wandb=True`, `pip install wandb`)."""

from __future__ import annotations

import html
import json
import logging
import os
import re
import time
from typing import Any, Mapping

import numpy as np

logger = logging.getLogger(__name__)

# The characters TensorBoard keeps in a tag; tensorboardX replaces any other with "_" (and says so).
_TAG = re.compile(r"[-/\w.]+")


def is_valid_tag(name: str) -> bool:
    """Whether TensorBoard stores `name` unchanged (letters, digits, `_ - . /`, no leading `/`)."""
    return bool(_TAG.fullmatch(name)) and not name.startswith("/")


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model.lora.rank": 0, ...} from a nested mapping (e.g. a ConfigDict's `to_dict()`)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _hparam(value: Any) -> str | bool | float:
    """A value TensorBoard's hparams table can hold: numbers and bools as they are, anything else as text."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return json.dumps(value, default=str) if isinstance(value, (list, tuple)) else str(value)


def _markdown_table(flat: Mapping[str, Any]) -> str:
    rows = [f"| {k} | {str(v).replace('|', '&#124;')} |" for k, v in sorted(flat.items())]
    return "\n".join(["| key | value |", "|---|---|", *rows])


def wandb_settings(logging_cfg: Mapping[str, Any], workdir: str) -> dict[str, Any] | None:
    """Monitor's `wandb` argument from the config's `logging` section (None when wandb is off)."""
    if not logging_cfg.get("wandb"):
        return None
    mode = logging_cfg.get("wandb_mode") or ""
    if mode not in ("", "online", "offline", "disabled"):
        raise ValueError(f"config.logging.wandb_mode={mode!r} is not one of '', 'online', 'offline', 'disabled'.")
    return {"project": logging_cfg.get("wandb_project") or "ragen-jax",
            "entity": logging_cfg.get("wandb_entity") or None,
            "mode": mode or None,
            "name": os.path.basename(os.path.normpath(workdir)), "dir": workdir}


def _start_wandb(settings: Mapping[str, Any]):
    try:
        import wandb
    except ImportError as e:
        raise ImportError("config.logging.wandb=True needs the wandb package: `pip install wandb` (or set "
                          "--config.logging.wandb=False).") from e
    settings = dict(settings)
    if settings.get("dir"):
        os.makedirs(settings["dir"], exist_ok=True)
    run = wandb.init(reinit="create_new", **settings)
    run.define_metric("trainer/step")
    run.define_metric("*", step_metric="trainer/step")  # our step, not wandb's call counter: SFT and RL overlap
    return wandb, run


class EventFile:
    """One TensorBoard event file, written in the calling thread and flushed every `flush_secs`.

    tensorboardX's SummaryWriter writes from a thread of its own: when a write failed there (a full disk),
    that thread died with a traceback and the next few scalars filled its queue, where the trainer then waited
    forever. Here a failed write raises OSError to the caller.
    """

    def __init__(self, logdir: str, flush_secs: float = 10.0):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self._event, self._session_log = Event, SessionLog
        self._writer = EventsWriter(os.path.join(logdir, "events"))
        self._flush_secs = flush_secs
        self._flushed_at = time.monotonic()

    def add(self, summary: Any, step: int) -> None:
        """Append a tensorboardX `Summary` proto at `step`."""
        self._writer.write_event(self._event(summary=summary, step=int(step), wall_time=time.time()))
        if time.monotonic() - self._flushed_at > self._flush_secs:
            self.flush()

    def restart_at(self, step: int) -> None:
        """A session START at `step`: TensorBoard drops every event of this folder's earlier files at `step` or
        later (what a killed run logged past the checkpoint a resume starts from)."""
        start = self._session_log(status=self._session_log.START)
        self._writer.write_event(self._event(step=int(step), session_log=start, wall_time=time.time()))
        self.flush()

    def flush(self) -> None:
        self._writer.flush()
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        self._writer.close()


class Monitor:
    """Scalars, text, images and the config to TensorBoard event files under `logdir` (process 0 only),
    and to a Weights & Biases run when `wandb` (keyword arguments of `wandb.init`) is given. An event file
    that cannot be written (a full disk) is reported once and TensorBoard logging stops; the run goes on."""

    def __init__(self, logdir: str, *, enabled: bool = True, wandb: Mapping[str, Any] | None = None):
        self.logdir = logdir
        self.enabled = enabled
        self.events: EventFile | None = None
        self._wandb = self._wandb_run = None
        self._renamed: set[str] = set()
        self._non_finite: set[str] = set()  # metrics already reported for a NaN/inf value
        # event files of an earlier process in this folder (a run stopped before its first checkpoint, or resumed)
        self.earlier_events = enabled and os.path.isdir(logdir) and any(
            name.startswith("events") for name in os.listdir(logdir))
        if enabled:
            os.makedirs(logdir, exist_ok=True)
            self.events = EventFile(logdir)
            if wandb is not None:
                self._wandb, self._wandb_run = _start_wandb(wandb)

    def _guard(self, write) -> None:
        """Run `write()` on the event file; the first OSError turns TensorBoard logging off, with one error."""
        if self.events is None:
            return
        try:
            write()
        except OSError as e:
            events, self.events = self.events, None
            logger.error("TensorBoard events could not be written to %s (%s: %s); TensorBoard logging stops "
                         "for the rest of this run, which goes on (checkpoints and summary.json are written "
                         "apart).", self.logdir, type(e).__name__, e)
            try:
                events.close()
            except OSError:
                pass

    def _add(self, summary: Any, step: int) -> None:
        self._guard(lambda: self.events.add(summary, step))

    def resumed_at(self, step: int) -> None:
        """The run goes on from a checkpoint: what an earlier process logged at `step` or later is dropped from
        TensorBoard (it would draw each of those steps twice, the killed run's points beside the resumed ones)."""
        self._guard(lambda: self.events.restart_at(step))

    def _tag(self, name: str) -> str:
        """`name` as TensorBoard will store it; an invalid one is reported once (fix it where it is made)."""
        if is_valid_tag(name):
            return name
        clean = re.sub(r"[^-/\w.]", "_", name).lstrip("/")
        if name not in self._renamed:
            self._renamed.add(name)
            logger.warning("Metric name %r is not a valid TensorBoard tag; logged as %r.", name, clean)
        return clean

    def scalars(self, metrics: Mapping[str, float], step: int) -> None:
        if not self.enabled:
            return
        from tensorboardX.summary import scalar

        finite = {}
        for name, value in metrics.items():
            value = float(np.asarray(value))
            if np.isfinite(value):
                finite[self._tag(name)] = value
            elif name not in self._non_finite:
                self._non_finite.add(name)
                logger.warning("Metric %r is %s at step %d: TensorBoard cannot draw it, so that point is left out "
                               "(reported once per metric).", name, value, step)
        for name, value in finite.items():
            self._add(scalar(name, value), step)
        if self._wandb_run is not None and finite:
            self._wandb_run.log({**finite, "trainer/step": step})

    def text(self, tag: str, text: str, step: int) -> None:
        if not self.enabled:
            return
        from tensorboardX.summary import text as text_summary

        self._add(text_summary(self._tag(tag), text), step)
        if self._wandb_run is not None:
            page = self._wandb.Html(f"<pre>{html.escape(text)}</pre>")
            self._wandb_run.log({self._tag(tag): page, "trainer/step": step})

    def image(self, tag: str, image_hwc: np.ndarray, step: int) -> None:
        """image_hwc [H, W, C] uint8."""
        if not self.enabled:
            return
        from tensorboardX.summary import image

        self._add(image(self._tag(tag), image_hwc, dataformats="HWC"), step)
        if self._wandb_run is not None:
            self._wandb_run.log({self._tag(tag): self._wandb.Image(np.asarray(image_hwc)), "trainer/step": step})

    def config(self, flat_config: Mapping[str, Any], metrics: Mapping[str, float] | None = None,
               step: int = 0) -> None:
        """The run's config as TensorBoard hparams (one value per flat key, e.g. "algo.kl_loss_coef") and as
        the text summary "config" (a table of every key); to wandb as the run's config.

        TensorBoard's HPARAMS table then offers every scalar a run logs as a column. `metrics`
        ({tag: value}), when given, is logged as scalars at `step` (e.g. final numbers to compare).
        No experiment summary is written: TensorBoard would take one run's for the whole logdir.
        """
        if not self.enabled:
            return
        from tensorboardX.summary import hparams, text

        _, session_start, _ = hparams({k: _hparam(v) for k, v in flat_config.items()}, {})
        self._add(session_start, step)
        self._add(text("config", _markdown_table(flat_config)), step)
        if self._wandb_run is not None:
            self._wandb_run.config.update(
                {k: v if isinstance(v, (bool, int, float, str)) else _hparam(v) for k, v in flat_config.items()},
                allow_val_change=True)
        if metrics:
            self.scalars(metrics, step)

    def flush(self) -> None:
        self._guard(lambda: self.events.flush())

    def close(self) -> None:
        self._guard(lambda: self.events.close())
        self.events = None
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None
