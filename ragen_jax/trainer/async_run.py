"""Asynchronous StarPO: the synchronous step's stages in two roles that overlap, a rollout worker and a learner.

The rollout worker (a thread) plays the rollout of step k (its seeds and sampling keys, as the synchronous run's)
with the newest weights it has, and puts the finished batch, whole groups only, on a queue; the learner takes
batch k, runs the stages after collect (select, score, advantages, update, report) and publishes its new weights
(version k + 1) on a channel. The worker reads the channel between decode chunks, so a rollout in flight goes on
under new weights (partial rollouts) and every token records the version that drew it.

Staleness: the learner at step k trains a batch whose oldest token is at most `trainer.max_staleness` versions
behind (k - its version). `staleness_policy="wait"` holds the worker back until that holds for what it starts
(no batch is ever too stale); "drop" lets it run ahead and the learner drops (and counts) batches too stale. With
max_staleness 0 the worker waits for every update: the run is the synchronous one, bit for bit.

The loss reads the sampler's log-probs (the behaviour policy) through the rollout corrections (algo.
rollout_correction: tis, icepop, seq_geo_mask, or decoupled: AReaL's decoupled PPO, where the proximal policy is
the learner's at the update's start). Checkpoints keep the learner's state; batches in flight at a checkpoint are
dropped and played again on resume.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax.errors import RagenError
from ragen_jax.rollout.continuous import WeightSource

logger = logging.getLogger(__name__)
POLICIES = ("wait", "drop")
POLL_S = 0.05  # how often blocked waits look at the stop flag


class RolloutStopped(Exception):
    """The run is stopping: a rollout in flight ends at its next decode chunk."""


class RolloutWorkerError(RagenError, RuntimeError):
    """The rollout worker crashed; its error ends the run."""


class WeightChannel(WeightSource):
    """The learner's newest weights for the rollout worker: `publish` a version's params, `latest` / `poll` read,
    `wait_for` blocks the worker until a version arrives. `close` makes every read raise RolloutStopped."""

    def __init__(self, placement=None):
        """placement: params -> params on the rollout's devices (a copy either way: the learner's update donates
        its buffers)."""
        self._cond = threading.Condition()
        self._version, self._params, self._closed = -1, None, False
        self._place = placement or (lambda params: jax.tree.map(jnp.copy, params))
        self.sync_seconds = 0.0  # time spent copying weights to the rollout (the learner's)

    def publish(self, version: int, params: Any) -> None:
        t0 = time.perf_counter()
        placed = jax.block_until_ready(self._place(params))
        self.sync_seconds += time.perf_counter() - t0
        with self._cond:
            self._version, self._params = version, placed
            self._cond.notify_all()

    @property
    def version(self) -> int:
        return self._version

    def latest(self) -> tuple[int, Any]:
        with self._cond:
            if self._closed:
                raise RolloutStopped()
            return self._version, self._params

    def poll(self, version: int) -> tuple[int, Any] | None:
        with self._cond:
            if self._closed:
                raise RolloutStopped()
            return (self._version, self._params) if self._version > version else None

    def wait_for(self, version: int) -> None:
        """Block until `version` or a newer one is published (RolloutStopped once closed)."""
        with self._cond:
            while self._version < version:
                if self._closed:
                    raise RolloutStopped()
                self._cond.wait(POLL_S)
            if self._closed:
                raise RolloutStopped()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


@dataclasses.dataclass
class Produced:
    """A finished rollout of step `index`: its stages.Collected, the versions of its oldest and newest tokens, and
    the seconds the worker waited before starting it."""

    index: int
    collected: Any
    oldest_version: int
    newest_version: int
    waited_s: float


@dataclasses.dataclass
class Failure:
    error: BaseException


def versions_of(collected) -> tuple[int, int]:
    """(oldest, newest) policy version of a rollout's response tokens."""
    batch = collected.result.batch
    sampled = batch.token_versions[batch.attention_mask & (batch.turn_ids >= 0)]
    if sampled.size == 0:
        return 0, 0
    return int(sampled.min()), int(sampled.max())


class RolloutWorker(threading.Thread):
    """Plays the rollouts of steps first, first + 1, ... into `out` (a bounded queue) with the channel's weights."""

    def __init__(self, trainer, channel: WeightChannel, out: queue.Queue, first: int, max_staleness: int,
                 policy: str):
        super().__init__(name="rollout-worker", daemon=True)
        self.trainer, self.channel, self.out = trainer, channel, out
        self.next_index, self.max_staleness, self.policy = first, max_staleness, policy
        self.waited_s = 0.0  # seconds spent waiting for weights or for queue room

    def run(self) -> None:
        try:
            with jax.set_mesh(self.trainer.rollout_mesh):
                self._play()
        except RolloutStopped:
            return
        except BaseException as e:  # noqa: BLE001 - any crash of the worker ends the run, with its error
            self.out.put(Failure(e))

    def _play(self) -> None:
        while True:
            t0 = time.perf_counter()
            if self.policy == "wait":
                self.channel.wait_for(self.next_index - self.max_staleness)
            waited = time.perf_counter() - t0
            collected = self.trainer.collect(self.next_index, weights=self.channel)
            oldest, newest = versions_of(collected)
            item = Produced(self.next_index, collected, oldest, newest, waited)
            t0 = time.perf_counter()
            while True:  # a full queue: the learner is behind; keep looking at the stop flag
                try:
                    self.out.put(item, timeout=POLL_S)
                    break
                except queue.Full:
                    self.channel.poll(self.channel.version)  # raises once the run stops
            self.waited_s += waited + time.perf_counter() - t0
            self.next_index += 1


def gather_hosts(trainer, item: Produced) -> Produced:
    """Every host's share of a step's rollout joined into the whole batch, the same on every host (one process:
    `item` itself). The learner's thread calls it, so the collectives of every host come in one order."""
    if jax.process_count() == 1:
        return item
    from ragen_jax.rollout.episodes import finish_rollout
    from ragen_jax.sharding import allgather_objects
    from ragen_jax.trainer.stages import Collected

    res = item.collected.result
    parts = allgather_objects((trainer.rollout_rows().start, res.episodes, res.extras["logprobs"],
                               res.extras["versions"], res.timing, item.oldest_version, item.newest_version))
    episodes, logprobs, versions = [], {}, {}
    for _, eps, lps, vs, *_ in sorted(parts, key=lambda part: part[0]):
        offset = len(episodes)
        episodes += eps
        logprobs.update({(b + offset, turn): v for (b, turn), v in lps.items()})
        versions.update({(b + offset, turn): v for (b, turn), v in vs.items()})
    engine = trainer.engine
    result = finish_rollout(engine.builder, trainer.rollout, engine.tokenizer, episodes, logprobs, trainer.tag,
                            res.timing, trainer.run.trainer.mini_batch_size, versions=versions)
    collected = Collected(result, {f"train/{k}": v for k, v in result.metrics.items()}, item.collected.timing)
    return Produced(item.index, collected, min(p[5] for p in parts), max(p[6] for p in parts), item.waited_s)


def staleness_metrics(batch, step: int, max_staleness: int) -> dict[str, float]:
    """async/staleness_* over a batch's trained tokens at learner version `step`: the mean and max of (step -
    token version), and the share of tokens at each staleness 0..max_staleness (the histogram)."""
    on = batch.loss_mask > 0
    stale = step - batch.token_versions[on]
    if stale.size == 0:
        return {}
    out = {"async/staleness_mean": float(stale.mean()), "async/staleness_max": float(stale.max())}
    for s in range(max_staleness + 1):
        out[f"async/staleness_hist_{s}"] = float(np.mean(stale == s))
    return out


class AsyncSchedule:
    """The learner's side of an asynchronous run on a Trainer: start the worker, hand out batches by step, publish
    weights after each update, stop the worker. Used by run_loop.rl_steps through `batch_for(step)`."""

    def __init__(self, trainer, first_step: int):
        t = trainer.run.trainer
        if t.staleness_policy not in POLICIES:
            raise ValueError(f"trainer.staleness_policy={t.staleness_policy!r} is not one of {POLICIES}")
        self.trainer, self.max_staleness, self.policy = trainer, int(t.max_staleness), t.staleness_policy
        self.channel = WeightChannel(getattr(trainer, "rollout_placement", None))
        self.queue: queue.Queue = queue.Queue(maxsize=self.max_staleness + 1)
        self.channel.publish(first_step, trainer.models.sampling_params())
        first = trainer.state.rollout_index if trainer.state.rollout_index is not None else first_step
        self.worker = RolloutWorker(trainer, self.channel, self.queue, first, self.max_staleness, self.policy)
        self.dropped_tokens = 0.0
        self.learner_wait_s = 0.0
        self.wall0 = time.perf_counter()
        self.worker.start()

    def batch_for(self, step: int) -> tuple[Any, dict[str, float]]:
        """The next batch the learner at `step` may train (dropping too stale ones under "drop") -> (its
        stages.Collected, the async/* metrics of taking it)."""
        while True:
            t0 = time.perf_counter()
            depth = self.queue.qsize()
            item = gather_hosts(self.trainer, self._get())
            self.learner_wait_s += time.perf_counter() - t0
            self.trainer.state.rollout_index = item.index + 1
            staleness = step - item.oldest_version
            if staleness <= self.max_staleness:
                break
            batch = item.collected.result.batch
            self.dropped_tokens += float((batch.loss_mask > 0).sum())
            logger.info("Async: the rollout of step %d is %d versions behind the learner at step %d (more than "
                        "trainer.max_staleness=%d): dropped.", item.index + 1, staleness, step + 1, self.max_staleness)
        wall = max(time.perf_counter() - self.wall0, 1e-9)
        metrics = {"async/queue_depth": float(depth), "async/dropped_tokens": self.dropped_tokens,
                   "async/rollout_index": float(item.index), "async/weight_sync_s": self.channel.sync_seconds,
                   "async/learner_idle_frac": self.learner_wait_s / wall,
                   "async/rollout_idle_frac": self.worker.waited_s / wall,
                   "async/weight_swaps": float(item.collected.result.extras.get("stats", {}).get("weight_swaps", 0)),
                   **staleness_metrics(item.collected.result.batch, step, self.max_staleness)}
        return item.collected, metrics

    def _get(self) -> Produced:
        while True:
            try:
                item = self.queue.get(timeout=1.0)
            except queue.Empty:
                if not self.worker.is_alive():
                    raise RolloutWorkerError("The rollout worker stopped without a word (no batch and no error).")
                continue
            if isinstance(item, Failure):
                error = item.error
                raise RolloutWorkerError(f"The rollout worker crashed: {type(error).__name__}: {error}") from error
            return item

    def published(self, step: int) -> None:
        """After the learner's step `step`: version step + 1 to the worker."""
        self.channel.publish(step + 1, self.trainer.models.sampling_params())

    def close(self) -> None:
        """Stop the worker (a rollout in flight ends at its next chunk) and wait for it."""
        self.channel.close()
        while self.worker.is_alive():
            try:  # make room, so a worker blocked on a full queue sees the stop
                self.queue.get_nowait()
            except queue.Empty:
                pass
            self.worker.join(POLL_S)
