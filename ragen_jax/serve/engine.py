"""Continuous batching of generation requests through one `Sampler`: a fixed number of decode slots, one thread
that owns the model.

Requests wait in a queue; between decode chunks the engine thread ends the rows that finished (an end-of-turn token,
their max_tokens, a stop string), answers the requests whose choices all ended, and begins waiting requests in the
free slots (one prefill per request, shared by its `n` choices), while the other rows keep decoding. Every compiled
program has the batch shape of the slots, so a few programs serve any mix of requests. Rows decoded together share
one temperature and top-p (the programs' arguments), so a request asking for others waits until the rows in flight
end (first come, first served).

Token i of a choice is drawn with the choice's own key folded with i (`Sampler`), so a request with a seed gets the
same tokens whether it runs alone or beside others.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import queue
import threading
from typing import Sequence

import jax
import numpy as np

from ragen_jax.rollout.continuous import finished_rows
from ragen_jax.sampling import EOS, Sampler, SamplingConfig, end_rows
from ragen_jax.shapes import pad_rows

log = logging.getLogger(__name__)
STOP, LENGTH = "stop", "length"  # OpenAI's finish reasons


@dataclasses.dataclass(frozen=True)
class Sampling:
    """What the rows decoded together share: greedy, or a temperature, top-p and top-k; and whether an end-of-turn
    token ends a choice (`ignore_eos`, vLLM's extension, for benchmarks)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    ignore_eos: bool = False

    @classmethod
    def of(cls, temperature: float, top_p: float = 1.0, top_k: int = 0, ignore_eos: bool = False) -> "Sampling":
        """Temperature 0 is greedy (then top-p and top-k do not matter, so every greedy request shares its rows)."""
        if temperature == 0:
            return cls(greedy=True, ignore_eos=ignore_eos)
        return cls(float(temperature), float(top_p), int(top_k), ignore_eos=ignore_eos)


@dataclasses.dataclass(frozen=True)
class Completion:
    """One choice: its tokens (without the end-of-turn token), text and OpenAI finish reason ("stop" or "length")."""

    tokens: tuple[int, ...]
    text: str
    finish_reason: str


@dataclasses.dataclass
class Job:
    """A request for `n` choices of at most `budget` tokens after `prompt` [P]; keys [n, k]: each choice's raw key."""

    prompt: np.ndarray
    n: int
    budget: int
    sampling: Sampling
    keys: np.ndarray
    stop: tuple[str, ...] = ()
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)
    results: list[Completion | None] = dataclasses.field(default_factory=list)


@jax.jit
def _choice_keys(high, low, choices):
    base = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), high), low)
    return jax.random.key_data(jax.vmap(lambda i: jax.random.fold_in(base, i))(choices))


def choice_keys(seed: int, n: int) -> np.ndarray:
    """Raw keys [n, k] of a request's choices: key(seed) folded with each choice index. The 64-bit seed enters in two
    32-bit halves, so seeds that differ above bit 32 draw differently."""
    seed %= 2**64
    high, low = (np.uint32(x) for x in (seed >> 32, seed & 0xFFFFFFFF))
    return np.asarray(_choice_keys(high, low, pad_rows(np.arange(n))))[:n]


class EngineStopped(RuntimeError):
    """The engine stopped before the request was answered."""


class Engine:
    """Serves `Job`s on `slots` decode slots of `cache_size` tokens each (prompt + completion); every completion has
    at most `max_tokens` tokens. `chunk`: decode steps between two looks at the rows; `lanes`: the sampler's."""

    def __init__(self, graphdef, params, tokenizer, *, slots: int = 8, cache_size: int = 2048,
                 max_tokens: int = 512, chunk: int = 8, lanes: int | None = None):
        if not 1 <= max_tokens < cache_size:
            raise ValueError(f"max_tokens={max_tokens} must be in [1, cache_size={cache_size}): a prompt needs room.")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1 decode steps, got {chunk}.")
        self.params, self.tokenizer = params, tokenizer
        self.sampler = Sampler(graphdef, cache_size=cache_size, pad_id=tokenizer.pad_token_id, batch_size=slots,
                               lanes=lanes)
        self.slots, self.cache_size, self.max_tokens, self.chunk = slots, cache_size, max_tokens, chunk
        self.eos_ids = tuple(tokenizer.eos_token_ids)
        self.stats = collections.Counter()
        self._queue: queue.Queue[list[Job]] = queue.Queue()
        self._pending: collections.deque[Job] = collections.deque()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset_rows()

    # ---- public
    def start(self) -> "Engine":
        self._thread = threading.Thread(target=self._loop, name="serve-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the engine thread; requests not yet answered fail with EngineStopped."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._fail_all(EngineStopped("The server is shutting down; the request was not answered."))

    def submit(self, job: Job) -> concurrent.futures.Future:
        """Queue a job; its future gets the n Completions (or the exception that failed them)."""
        return self.submit_many([job])[0]

    def submit_many(self, jobs: Sequence[Job]) -> list[concurrent.futures.Future]:
        """Queue jobs together: the engine sees them at once, so those that fit the free slots begin in one prefill
        (a benchmark's batch, a test's fixed schedule)."""
        for job in jobs:
            if not 1 <= job.n <= self.slots:
                raise ValueError(f"n={job.n} must be in [1, {self.slots}] (the server's decode slots).")
            if not 1 <= job.budget <= self.max_tokens or len(job.prompt) + job.budget > self.cache_size:
                raise ValueError(f"A prompt of {len(job.prompt)} tokens and max_tokens={job.budget} do not fit: "
                                 f"max_tokens <= {self.max_tokens}, prompt + max_tokens <= {self.cache_size}.")
            if len(job.prompt) < 1:
                raise ValueError("The prompt has no tokens.")
        if self._stopping.is_set():
            raise EngineStopped("The server is shutting down.")
        for job in jobs:
            job.results = [None] * job.n
        self._queue.put(list(jobs))
        return [job.future for job in jobs]

    def generate(self, jobs: Sequence[Job], timeout_s: float | None = None) -> list[list[Completion]]:
        """Submit `jobs` together and wait for all of them (scripts and tests)."""
        return [f.result(timeout_s) for f in self.submit_many(jobs)]

    def warm_up(self, prompt: Sequence[int], sampling: Sampling = Sampling()) -> int:
        """Compile, before the first client waits for them, the programs requests like `prompt` (its length bucket)
        with `sampling` run: a begin for each power-of-two count of rows starting together, and a decode for each
        chunk length. -> the number of programs compiled."""
        before = self.sampler.num_programs
        prompt = np.asarray(prompt, np.int32)
        rows, steps = 1, 1
        while rows <= self.slots:
            self.generate([Job(prompt, 1, 1, sampling, choice_keys(i, 1)) for i in range(rows)])
            rows *= 2
        while steps <= min(self.chunk, self.max_tokens - 1):
            self.generate([Job(prompt, 1, 1 + steps, sampling, choice_keys(0, 1))])
            steps *= 2
        return self.sampler.num_programs - before

    # ---- the engine thread
    def _reset_rows(self) -> None:
        """Empty slots, a fresh cache and an idle state."""
        s = self.slots
        self.job_of: list[Job | None] = [None] * s
        self.choice_of = np.zeros(s, np.int64)
        self.budget = np.zeros(s, np.int64)
        self.end = np.zeros(s, np.int64)  # the last cache slot a row's turn can reach
        self.lengths = np.zeros(s, np.int64)  # tokens each decoding row has, as last read
        self.checked = np.zeros(s, np.int64)  # tokens whose text holds none of the row's stop strings
        self.decoding = np.zeros(s, bool)
        self.active: Sampling | None = None
        self.config = self._config(Sampling())
        self.cache, _ = self.sampler.init_cache()
        self.state = self.sampler.idle_state(self.config)  # depends on max_new_tokens only: shared by every config

    def _config(self, sampling: Sampling) -> SamplingConfig:
        return SamplingConfig(max_new_tokens=self.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k, greedy=sampling.greedy,
                              eos_ids=() if sampling.ignore_eos else self.eos_ids)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._take_new(block=not self.decoding.any())
                if self._admit():
                    self._settle()
                if self.decoding.any():
                    self._decode()
                    self._settle()
            except Exception as e:  # noqa: BLE001 - fail the requests in flight, never the server
                log.exception("serve engine: generation failed; the requests in flight get the error")
                self._fail_rows(e)

    def _take_new(self, block: bool) -> None:
        try:
            self._pending.extend(self._queue.get(timeout=0.05) if block and not self._pending else
                                 self._queue.get_nowait())
            while True:
                self._pending.extend(self._queue.get_nowait())
        except queue.Empty:
            pass

    def _admit(self) -> bool:
        """Begin waiting jobs, oldest first, while their choices fit the free slots and share the rows' sampling."""
        free = [s for s in range(self.slots) if self.job_of[s] is None]
        starting: list[tuple[Job, list[int]]] = []
        while self._pending and len(free) >= self._pending[0].n:
            job = self._pending[0]
            sharing = starting[0][0].sampling if starting else (self.active if self.decoding.any() else None)
            if sharing is not None and job.sampling != sharing:
                break
            self._pending.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue
            taken, free = free[:job.n], free[job.n:]
            starting.append((job, taken))
        if not starting:
            return False
        self.active = starting[0][0].sampling
        self.config = self._config(self.active)
        rows, tokens, keys, budgets, source = [], [], [], [], []
        for job, taken in starting:
            first = len(rows)
            for choice, slot in enumerate(taken):
                self.job_of[slot], self.choice_of[slot], self.budget[slot] = job, choice, job.budget
                self.end[slot] = len(job.prompt) + job.budget
                rows.append(slot)
                tokens.append(job.prompt)
                keys.append(job.keys[choice])
                budgets.append(job.budget)
                source.append(first)
        lens = np.array([len(t) for t in tokens], np.int32)
        padded = np.full((len(rows), int(lens.max())), self.tokenizer.pad_token_id, np.int32)
        for i, t in enumerate(tokens):
            padded[i, :len(t)] = t
        self.cache, self.state = self.sampler.begin(
            self.params, self.cache, self.state, np.asarray(rows), padded, lens, np.zeros(len(rows), np.int32),
            np.stack(keys), self.config, source=np.asarray(source), budgets=np.asarray(budgets))
        self.decoding[rows] = True
        self.lengths[rows], self.checked[rows] = 1, 0
        self.stats["requests_begun"] += len(starting)
        self.stats["prompt_tokens"] += int(sum(len(job.prompt) for job, _ in starting))
        return True

    def _decode(self) -> None:
        """One chunk: as many steps as the chunk allows without any row passing its budget (a power of two, so
        a few programs serve every chunk)."""
        left = int((self.budget - self.lengths)[self.decoding].min())
        steps = 1 << (max(1, min(self.chunk, left)).bit_length() - 1)
        self.cache, self.state = self.sampler.decode(self.params, self.cache, self.state, self.config, steps,
                                                     end=int(self.end[self.decoding].max()))

    def _settle(self) -> None:
        """Read the rows; end those done (in the program, at their budget, at a stop string) and answer their jobs."""
        done, lengths, reason = (np.array(x) for x in (self.state.done, self.state.lengths, self.state.reason))
        rows = np.flatnonzero(self.decoding)
        self.lengths[rows] = lengths[rows]
        watched = [r for r in rows if self.job_of[r].stop]
        tokens = np.array(self.state.tokens) if watched else None
        finished: dict[int, tuple[int, str, str | None]] = {}  # slot -> (tokens kept, finish reason, cut text)
        for r in rows:
            n = int(lengths[r])
            if tokens is not None and self.job_of[r].stop:
                hit = self._stop_hit(r, tokens[r, :n - int(bool(done[r]) and reason[r] == EOS)])
                if hit is not None:
                    finished[r] = (hit[0], STOP, hit[1])
                    continue
            if done[r]:
                finished[r] = (n - int(reason[r] == EOS), STOP if reason[r] == EOS else LENGTH, None)
            elif n >= self.budget[r]:
                finished[r] = (n, LENGTH, None)
        if not finished:
            return
        slots = np.array(sorted(finished))
        host_ended = np.zeros(self.slots, bool)
        host_ended[[s for s in slots if not done[s]]] = True
        if host_ended.any():
            self.state = end_rows(self.state, host_ended)
        out_tokens = finished_rows(self.state, slots)[0]
        for i, slot in enumerate(slots):
            kept, why, text = finished[slot]
            ids = tuple(int(t) for t in out_tokens[i, :kept])
            if text is None:
                text = self.tokenizer.decode(ids)
            self._finish(int(slot), Completion(ids, text, why))

    def _stop_hit(self, slot: int, ids: np.ndarray) -> tuple[int, str] | None:
        """(tokens up to the first stop string, the text before it) when the row's text holds one of its stop
        strings, else None. Only the tokens since the last look can complete one, so only their prefixes are read."""
        stops = self.job_of[slot].stop
        if not any(s in self.tokenizer.decode(ids) for s in stops):
            self.checked[slot] = len(ids)
            return None
        for k in range(int(self.checked[slot]) + 1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k])
            at = [text.find(s) for s in stops if s in text]
            if at:
                return k, text[:min(at)]
        return None  # unreachable: the whole text holds a stop string

    def _finish(self, slot: int, completion: Completion) -> None:
        job = self.job_of[slot]
        job.results[int(self.choice_of[slot])] = completion
        self.job_of[slot] = None
        self.decoding[slot] = False
        self.stats["completion_tokens"] += len(completion.tokens)
        if all(r is not None for r in job.results):
            self.stats["requests_done"] += 1
            if not job.future.done():
                job.future.set_result(list(job.results))

    def _fail_rows(self, error: BaseException) -> None:
        """Fail the jobs in the slots and start from empty rows (the cache may hold a half-written turn)."""
        for job in {id(j): j for j in self.job_of if j is not None}.values():
            if not job.future.done():
                job.future.set_exception(error)
        self._reset_rows()

    def _fail_all(self, error: BaseException) -> None:
        self._take_new(block=False)
        jobs = [j for j in self.job_of if j is not None] + list(self._pending)
        self._pending.clear()
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)

