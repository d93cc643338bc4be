"""The continuous rollout engine: episodes advance on their own through a fixed number of decode slots.

Each slot holds one episode (its KV cache stays in the slot across turns). Decoding runs in jitted chunks of
K steps over every slot; between chunks the host takes the slots whose turn ended, books the responses, steps
those episodes' envs, and begins their next turns (prefilling only the new tokens, into those slots only)
while the other slots keep decoding in the next chunk. An episode that ends frees its slot for the next
waiting one, so a rollout can hold more episodes than slots. The episodes of a group start from the same
prompt: it is prefilled once and its KV copied into the members' slots.

Token n of an episode's turn t is drawn with the key of (episode, t) folded with n, as the lockstep engine
(`LockstepEngine`) draws it: both give the same trajectories, whatever the slot count, chunk size or finishing
order. One process (the lockstep engine plays across hosts).
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs.protocols import EnvBatch
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.episodes import EpisodeBook, finish_rollout
from ragen_jax.rollout.types import RolloutResult
from ragen_jax.sampling import Sampler, episode_turn_keys
from ragen_jax.shapes import pad_rows, round_up


@jax.jit
def _rows_of(state, rows):
    """The finished rows' tokens, log-probs and lengths [R, ...] (a small transfer instead of the whole state)."""
    return (jnp.take(state.tokens, rows, axis=0), jnp.take(state.logprobs, rows, axis=0),
            jnp.take(state.raw_logprobs, rows, axis=0), jnp.take(state.lengths, rows), jnp.take(state.cache_lens, rows))


def finished_rows(state, slots) -> tuple[np.ndarray, ...]:
    """(tokens [R, N], sample log-probs [R, N], raw log-probs [R, N], lengths [R], cache lengths [R]) of the slots
    [R], on the host. The slots are padded to a power of two, so a run compiles a few programs, not one per R."""
    return tuple(np.asarray(x)[:len(slots)] for x in _rows_of(state, pad_rows(slots)))


def default_slots(batch_size: int, response_length: int, devices: int = 1, platform: str | None = None) -> int:
    """The decode slots for `rollout.slots=0`. On an accelerator, one per episode: a decode step reads the weights
    once for every row, so rows are nearly free. On a CPU a step's cost grows with its rows, and slots whose episode
    ended idle while the longest ones play on, the more so the longer and more spread the responses: queue the
    episodes through max(32 per device, batch x 64 / response_length) slots (RAGEN-shaped rollouts, 128 x 400
    tokens: 32; the tiny quickstart, 128 x 24: one per episode; experiments/bench/bench_rollout.py measures both).
    A multiple of `devices`, so every device decodes as many slots."""
    platform = platform or jax.default_backend()
    if platform != "cpu":
        return batch_size
    wanted = max(32 * devices, -(-batch_size * 64 // max(response_length, 1)))
    return min(batch_size, round_up(wanted, devices))


class ContinuousEngine:
    """Plays `batch_size` episodes through `slots` decode slots (default: `default_slots`), K steps a chunk."""

    def __init__(self, graphdef, tokenizer, config: RolloutConfig, batch_size: int, *, slots: int = 0,
                 chunk: int = 8, share_prompts: bool = True, lanes: int = 0, mesh=None):
        local = mesh is not None and all(d.process_index == jax.process_index() for d in mesh.devices.flat)
        if jax.process_count() > 1 and not local:
            raise ValueError("The continuous rollout engine plays on one process (or on one host's own devices, as "
                             "an asynchronous run's rollout worker); across hosts use rollout.engine='lockstep'.")
        if chunk < 1:
            raise ValueError(f"rollout.chunk must be >= 1 decode steps, got {chunk}.")
        self.config, self.tokenizer = config, tokenizer
        self.batch_size = self.local_batch_size = batch_size
        self.rows = slice(0, batch_size)
        devices = 1 if mesh is None else mesh.devices.size
        self.slots = min(slots or default_slots(batch_size, config.response_length, devices), batch_size)
        self.chunk, self.share_prompts = int(chunk), share_prompts
        self.builder = ContextBuilder(tokenizer, enable_think=config.enable_think, action_format=config.action_format)
        self.stop_sequences = config.stop_sequences(tokenizer)
        self.stop_after = config.stop_gates(tokenizer)
        self.sampler = Sampler(graphdef, cache_size=config.max_model_len, pad_id=tokenizer.pad_token_id,
                               batch_size=self.slots, mesh=mesh, lanes=lanes or None)

    def run(self, params: Any, env: EnvBatch, seeds: Sequence[int], group_ids: Sequence[int],
            key: jax.Array, *, tag: str, temperature: float | None = None, greedy: bool = False,
            top_p: float | None = None, top_k: int | None = None, row_multiple: int = 1,
            weights: WeightSource | None = None, first_episode: int = 0) -> RolloutResult:
        """Play one episode per seed (episodes of a group share a seed) and build the batch (as LockstepEngine.run).

        weights: where newer policy weights come from while the rollout runs (asynchronous training): read between
        decode chunks, they replace `params` at once, and episodes in the middle of a turn go on under them
        (partial rollouts; the KV cache the old weights wrote is kept). Every response token records the policy
        version that drew it. first_episode: the global index of this rollout's first episode (its sampling keys'
        episode ids), when it plays a share of a larger batch."""
        cfg = self.config
        play = EpisodeBook.start(self, env, seeds, group_ids, tag, first_episode=first_episode, local=True)
        sampling = cfg.sampling(self.tokenizer, self.stop_sequences, temperature=temperature, greedy=greedy,
                                top_p=top_p, top_k=top_k, stop_after=self.stop_after)
        version = 0
        if weights is not None:
            version, params = weights.latest()
        cache, _ = self.sampler.init_cache()
        state = self.sampler.idle_state(sampling)
        episode_of = np.full(self.slots, -1)  # the episode each slot holds
        cache_len = np.zeros(self.slots, np.int32)  # that episode's tokens in the slot's cache
        end = np.zeros(self.slots, np.int64)  # the last cache slot its current turn can reach
        decoding = np.zeros(self.slots, bool)
        lengths = np.zeros(self.slots, np.int32)  # each slot's tokens in its turn, as the last decode left them
        marks: list[list[tuple[int, int]]] = [[] for _ in range(self.slots)]  # (tokens so far, version) per turn
        waiting = collections.deque(np.flatnonzero(play.opened).tolist())  # (an episode may end at its reset)
        starting = list(range(self.slots))  # slots whose episode's next turn begins before the next chunk
        active = play.opened.copy()
        stats = collections.Counter()
        stepping: dict[concurrent.futures.Future, tuple] = {}  # env steps in flight: future -> (slots, actions)
        pool = concurrent.futures.ThreadPoolExecutor(self.slots) if env.concurrent_steps else None

        try:
            while True:
                if stepping:  # env steps that finished while the other slots decoded
                    starting += self._booked(play, stepping, episode_of, active, wait=False)
                for slot in starting:
                    if episode_of[slot] < 0 and waiting:
                        episode_of[slot], cache_len[slot] = waiting.popleft(), 0
                starting = [s for s in starting if episode_of[s] >= 0]
                if starting:
                    cache, state = self._begin_turns(params, cache, state, play, starting, episode_of, cache_len,
                                                     end, key, sampling, stats)
                    decoding[starting] = True
                    lengths[starting] = 1  # begin samples each turn's first token
                    for slot in starting:
                        marks[slot] = [(0, version)]
                if not decoding.any():
                    if not stepping:
                        break
                    starting = self._booked(play, stepping, episode_of, active, wait=True)
                    continue
                if weights is not None and (newer := weights.poll(version)) is not None:
                    version, params = newer
                    stats["weight_swaps"] += 1
                    for slot in np.flatnonzero(decoding):
                        marks[slot].append((int(lengths[slot]), version))
                t0 = time.perf_counter()
                before = lengths  # known here: reading state.lengths would wait for begin before decode is dispatched
                cache, state = self.sampler.decode(params, cache, state, sampling, self.chunk,
                                                   end=int(end[decoding].max()))
                done, lengths = (np.array(x) for x in (state.done, state.lengths))
                play.timing["generate"] += time.perf_counter() - t0
                grown = np.where(decoding, lengths - before, 0)
                stats["decode_steps"] += int(grown.max(initial=0)) * self.slots
                stats["tokens"] += int(grown.sum())
                finished = np.flatnonzero(decoding & done)
                decoding[finished] = False
                starting = self._end_turns(play, state, finished, episode_of, cache_len, active, marks, pool,
                                           stepping) if finished.size else []
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

        t0 = time.perf_counter()
        result = finish_rollout(self.builder, cfg, self.tokenizer, play.episodes, play.logprobs, tag, play.timing,
                                row_multiple, versions=play.versions)
        result.timing["glue"] += time.perf_counter() - t0
        generated = stats["tokens"] + stats["first_tokens"]
        result.extras["decode_steps_per_token"] = (stats["decode_steps"] + stats["first_tokens"]) / max(generated, 1)
        result.extras["stats"] = dict(stats)
        result.extras["logprobs"], result.extras["versions"] = play.logprobs, play.versions  # to join hosts' shares
        return result

    def _begin_turns(self, params, cache, state, play: EpisodeBook, slots: list[int], episode_of, cache_len, end,
                     key, sampling, stats):
        """Begin the current turn of the episodes in `slots`: feed their new tokens and sample each first token.
        Episodes that start from the same prompt with an empty cache share one prefill."""
        t0 = time.perf_counter()
        episodes = [int(episode_of[s]) for s in slots]
        feeds = []
        for slot, ep in zip(slots, episodes):
            cache_len[slot], new = play.next_context(ep, int(cache_len[slot]))
            feeds.append(new)
        source = list(range(len(slots)))
        if self.share_prompts:
            first = {}
            for i, (slot, new) in enumerate(zip(slots, feeds)):
                if cache_len[slot] == 0:
                    source[i] = first.setdefault(tuple(new.tolist()), i)
        lens = np.array([len(f) for f in feeds], np.int32)
        tokens = np.full((len(slots), int(lens.max())), self.tokenizer.pad_token_id, np.int32)
        for i, f in enumerate(feeds):
            tokens[i, :len(f)] = f
        keys = episode_turn_keys(key, episodes, play.turns(episodes))
        play.timing["glue"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        cache, state = self.sampler.begin(params, cache, state, np.asarray(slots), tokens, lens, cache_len[slots],
                                          keys, sampling, source=np.asarray(source))
        play.timing["generate"] += time.perf_counter() - t0
        end[slots] = cache_len[slots] + lens + sampling.max_new_tokens
        stats["first_tokens"] += len(slots)
        prefilled = self.sampler.prefilled_rows(np.asarray(slots), np.asarray(source))
        stats["prefills"] += len(prefilled)
        stats["prefill_tokens"] += int(lens[prefilled].sum())
        return cache, state

    def _end_turns(self, play: EpisodeBook, state, slots: np.ndarray, episode_of, cache_len, active, marks,
                   pool, stepping: dict) -> list[int]:
        """Book the responses of the turns that ended in `slots` and step their envs: at once (-> the slots to
        begin next: continuing episodes, and freed slots a waiting episode can take), or, for an env batch that
        steps concurrently, in the background (-> [] now; `_booked` returns their slots once stepped)."""
        t0 = time.perf_counter()
        tokens, sample_lp, raw_lp, lengths, kept = finished_rows(state, slots)
        episodes = [int(episode_of[s]) for s in slots]
        actions = [[] for _ in range(self.batch_size)]
        for i, (slot, ep) in enumerate(zip(slots, episodes)):
            n = lengths[i]
            actions[ep] = play.record_response(ep, tokens[i, :n], sample_lp[i, :n], raw_lp[i, :n],
                                               versions=token_versions(marks[slot], int(n)))
            cache_len[slot] = kept[i]
        play.timing["glue"] += time.perf_counter() - t0
        rows = np.asarray(episodes)
        if pool is None:
            return self._free_ended(play.step_envs(rows, actions, active), slots, episode_of)
        for slot, row in zip(slots, rows):  # one call each: a slow env holds back only its own episode
            stepping[pool.submit(play.env_step, row[None], actions)] = ([slot], row[None], actions)
        return []

    def _booked(self, play: EpisodeBook, stepping: dict, episode_of, active, wait: bool) -> list[int]:
        """Book the env steps of `stepping` that finished (with `wait`, at least one) -> their slots."""
        if wait:
            t0 = time.perf_counter()
            concurrent.futures.wait(stepping, return_when=concurrent.futures.FIRST_COMPLETED)
            play.timing["env_wait"] = play.timing.get("env_wait", 0.0) + time.perf_counter() - t0
        slots_out = []
        for future in [f for f in stepping if f.done()]:
            slots, rows, actions = stepping.pop(future)
            slots_out += self._free_ended(play.book_step(rows, actions, future.result(), active), slots, episode_of)
        return slots_out

    @staticmethod
    def _free_ended(ended: list[int], slots, episode_of) -> list[int]:
        """Free the slots whose episode ended -> every slot of `slots`, each to begin a turn or take a new episode."""
        ended = set(ended)
        for slot in slots:
            if episode_of[slot] in ended:
                episode_of[slot] = -1
        return [int(s) for s in slots]


def token_versions(marks: list[tuple[int, int]], n: int) -> np.ndarray:
    """[n] int32: the policy version that drew each of a turn's n tokens, from its marks [(tokens drawn before the
    version took over, version), ...] in order."""
    out = np.zeros(n, np.int32)
    for start, version in marks:
        out[min(start, n):] = version
    return out


class WeightSource:
    """Where a rollout reads the newest policy weights (asynchronous training's weight channel implements it).
    Versions are ints that grow with every update."""

    def latest(self) -> tuple[int, Any]:
        """(version, params) of the newest weights."""
        raise NotImplementedError

    def poll(self, version: int) -> tuple[int, Any] | None:
        """The newest (version, params) when newer than `version`, else None; called between decode chunks, so
        it may also raise to end the rollout (the run is stopping)."""
        raise NotImplementedError
