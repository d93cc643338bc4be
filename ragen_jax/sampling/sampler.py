"""Batched generation over a per-row KV cache, in two jitted programs (turn.py) that take the split model state
and donate the cache: `begin` prefills the new tokens of a set of rows and samples their first token, `decode`
advances every unfinished row by up to K tokens (a `lax.while_loop` that stops early once all are done).

`Sampler.generate` is one turn in lockstep (begin every active row, decode until all stop); the continuous
rollout engine calls `begin` and `decode` itself, so rows whose turn ended take new tokens while the others keep
decoding. Token n of a row's turn is sampled with `fold_in(row_key, n)`, where the caller derives each row's key
from (episode, turn): the tokens never depend on the batch row, the schedule or the chunk size.

Given a mesh, the cache and every batch input live on it with rows over (data, fsdp), and each process
feeds and reads only its own rows (`Sampler.rows`): the same code runs on one CPU and across hosts.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models import KVCache, ModelConfig, init_cache, target
from ragen_jax.models.transformer import decode_weights, decode_weights_pay_off
from ragen_jax.models.decode_attention import uses_ragged_decode
from ragen_jax.shapes import bucket_length
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.lanes import LaneCaches, decode_lanes, lane_plan, merge_rows, run_lanes, split_rows
from ragen_jax.sampling.turn import (SampleOutput, TurnState, begin_turn, decode_turn, idle_state, model_config_of,
                                    row_keys, settle_idle, state_output, temperature_arg)
from ragen_jax.sharding.distributed import agree_max
from ragen_jax.sharding.placement import process_rows, row_sharding, rows_to_global
from ragen_jax.sharding.rules import cache_spec, fit_spec

log = logging.getLogger(__name__)
MIN_WINDOW = 256  # smallest attention window over the cache (fewer programs for short contexts)
KEY_WIDTH = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape[-1]  # uint32s per raw key


def _forget_weights(sampler_ref, weights_id: int) -> None:
    """Drops a sampler's decode weights once the parameters they were made from are freed."""
    sampler = sampler_ref()
    if sampler is not None and sampler._laid is not None and id(sampler._laid[1]) == weights_id:
        sampler._laid = None


class Sampler:
    """Compiled batched generation for one model graph, (global) batch size and cache size.

    `generate` consumes (donates) the cache it is given; use the one in its output for the next turn.
    With a `mesh`, row inputs are this process's rows `self.rows` of the batch, and outputs span the batch
    (read this process's rows with `ragen_jax.sharding.global_to_local_rows(x, sampler.rows)`).
    With `kv_window` (default), attention reads only the first `window_length(...)` cache slots, a power
    of two >= the longest row's end, instead of all `cache_size` slots.
    `out_first_weights` decodes with the projections' weights transposed to [out, in] (`decode_weights`; made
    once per parameter version and kept while those parameters live): on a CPU, once the weights stream from
    memory each step, few-row GEMMs read them faster (`experiments/bench/bench_decode_layout.py`), at the cost of one more
    copy of the projection weights in memory. Default: `decode_weights_pay_off` (a CPU and >= 128 MiB of projections); GPUs pick their own GEMM
    layouts.
    `lanes` splits the rows into that many equal parts, each with its own cache (`LaneCaches`), whose begin and
    decode programs run side by side in threads (`sampling.lanes`): a small model's decode step on a CPU does not
    use the cores otherwise. Default: `decode_lanes` (a CPU, a small model, >= 8 rows a lane); 1 with a mesh.
    """

    def __init__(self, graphdef, *, cache_size: int, pad_id: int, batch_size: int, dtype=None,
                 model_config: ModelConfig | None = None, mesh: jax.sharding.Mesh | None = None,
                 kv_window: bool = True, out_first_weights: bool | None = None, lanes: int | None = None):
        if cache_size < 1 or batch_size < 1:
            raise ValueError(f"cache_size and batch_size must be >= 1, got {cache_size} and {batch_size}.")
        platform, _ = target.device_facts(mesh.devices.flat[0] if mesh is not None else None)
        self.graphdef = graphdef
        self.model_config = model_config or model_config_of(graphdef)
        self.cache_size, self.pad_id, self.batch_size, self.dtype = cache_size, int(pad_id), batch_size, dtype
        self.mesh = mesh
        self.kv_window = kv_window
        if out_first_weights is None:
            out_first_weights = decode_weights_pay_off(self.model_config, platform)
        self.out_first_weights = bool(out_first_weights)
        self._laid: tuple[list, Any] | None = None  # (weak references to the params' leaves, their decode_weights)
        self.rows = process_rows(mesh, batch_size)
        if lanes is None:
            lanes = decode_lanes(self.model_config, platform, batch_size, multi_device=mesh is not None)
        if lanes < 1 or batch_size % lanes or (lanes > 1 and mesh is not None):
            raise ValueError(f"lanes={lanes} must be >= 1 and divide batch_size={batch_size}, and be 1 with a mesh "
                             "(a mesh shards the rows instead).")
        self.lanes, self.lane_rows = int(lanes), batch_size // lanes
        self._ran: set = set()  # programs that ran once (a lane's first call compiles them alone)
        self._programs: dict[tuple, Any] = {}
        self._makers: dict[tuple, Any] = {}  # the jitted empty cache and idle state (not counted in num_programs)

    @property
    def local_batch_size(self) -> int:
        """How many rows this process feeds and reads (the whole batch with one process)."""
        return self.rows.stop - self.rows.start

    def to_global(self, local: Any) -> jax.Array:
        """This process's rows [local_batch_size, ...] -> the batch-wide array the programs take."""
        if self.mesh is None:
            return jnp.asarray(local)
        return rows_to_global(local, self.mesh, self.batch_size)

    @property
    def num_programs(self) -> int:
        """How many distinct programs (begin: rows x bucket x window; decode: config x window x steps) it compiled."""
        return len(self._programs)

    def init_cache(self) -> tuple[KVCache | LaneCaches, np.ndarray]:
        """An empty cache (`init_cache`: cache_size slots; rows over the mesh's (data, fsdp), kv heads
        over tensor; one per lane in lanes) and this process's cache_lens, zeros [local_batch_size]."""
        lens = np.zeros((self.local_batch_size,), np.int32)
        if self.lanes > 1:
            return LaneCaches(tuple(init_cache(self.model_config, self.lane_rows, self.cache_size, self.dtype)
                                    for _ in range(self.lanes))), lens
        if self.mesh is None:
            return init_cache(self.model_config, self.batch_size, self.cache_size, self.dtype), lens

        def build():
            make = functools.partial(init_cache, self.model_config, self.batch_size, self.cache_size, self.dtype)
            shardings = jax.tree.map(
                lambda a: jax.sharding.NamedSharding(self.mesh, fit_spec(cache_spec(), a.shape, self.mesh)),
                jax.eval_shape(make))
            return jax.jit(make, out_shardings=shardings)
        return self._maker(("init_cache",), build)(), lens

    def idle_state(self, config: SamplingConfig) -> TurnState:
        """Every row idle: the state `begin` and `decode` carry between calls (rows over the mesh)."""
        def build():  # one program per width: a fresh jit of a fresh partial would compile on every call
            make = functools.partial(idle_state, self.batch_size, config.max_new_tokens, self.pad_id, KEY_WIDTH)
            if self.mesh is None:
                return jax.jit(make)
            shardings = jax.tree.map(lambda a: row_sharding(self.mesh, a.shape), jax.eval_shape(make))
            return jax.jit(make, out_shardings=shardings)
        return self._maker(("idle_state", config.max_new_tokens), build)()

    def _maker(self, key: tuple, build):
        if key not in self._makers:
            self._makers[key] = build()
        return self._makers[key]

    def _program(self, key: tuple, build):
        fn = self._programs.get(key)
        if fn is None:
            log.debug("sampler: compiling %s (batch %d, cache %d); %d programs so far",
                      key, self.batch_size, self.cache_size, len(self._programs) + 1)
            fn = self._programs[key] = build()
        return fn

    def window_length(self, end: int) -> int:
        """Cache slots attention reads when the longest row ends at slot `end`: its bucket_length (>= 256;
        powers of two, multiples of 512 above 1024) capped at cache_size, so a run compiles a few windows;
        cache_size without `kv_window`."""
        return min(self.cache_size, bucket_length(end, minimum=MIN_WINDOW)) if self.kv_window else self.cache_size

    def _begin_fn(self, config: SamplingConfig, rows: int, prefills: int, bucket: int, kv_len: int,
                  in_place: bool = False):
        """The begin program; its last argument is the temperature (`temperature_arg`)."""
        config = config.program_key()  # every temperature shares the program
        build = lambda: jax.jit(functools.partial(begin_turn, self.graphdef, config, self.pad_id, kv_len,  # noqa: E731
                                                  in_place), donate_argnums=(1, 2))
        return self._program(("begin", config, rows, prefills, bucket, in_place, kv_len), build)

    def _decode_fn(self, config: SamplingConfig, kv_len: int, steps: int):
        """The decode program: (params, weights, cache, state, `temperature_arg(config)`) -> (cache, state)."""
        config = config.program_key()
        build = lambda: jax.jit(functools.partial(decode_turn, self.graphdef, config, kv_len, steps),  # noqa: E731
                                donate_argnums=(2, 3))
        return self._program(("decode", config, steps, kv_len), build)  # the window last, as for begin

    def decode_weights(self, params) -> dict[str, jax.Array] | None:
        """The decode loop's weights for `params` (`models.transformer.decode_weights`), or None when
        `out_first_weights` is off. Made once per parameter version: reused while every leaf of `params` is the
        same array (JAX arrays are immutable), dropped once the parameters they came from are freed."""
        if not self.out_first_weights:
            return None
        leaves = jax.tree.leaves(params)
        if self._laid is not None:
            refs, weights = self._laid
            if len(refs) == len(leaves) and all(ref() is leaf for ref, leaf in zip(refs, leaves)):
                return weights
        self._laid = None  # free the old copy before making the new one
        make = self._maker(("decode_weights",),
                           lambda: jax.jit(lambda p: decode_weights(nnx.merge(self.graphdef, p))))
        weights = make(params)
        try:
            refs = [weakref.ref(leaf) for leaf in leaves]
        except TypeError:  # a leaf that takes no weak reference (not a jax or numpy array): made again each call
            return weights
        self._laid = (refs, weights)
        weakref.finalize(leaves[0], _forget_weights, weakref.ref(self), id(weights))
        return weights

    def begin(self, params, cache: KVCache | LaneCaches, state: TurnState, rows, new_tokens, new_lens, cache_lens,
              keys, config: SamplingConfig, *, source=None, budgets=None) -> tuple[KVCache | LaneCaches, TurnState]:
        """Starts a turn for the global rows `rows` [R]: appends new_tokens[r, :new_lens[r]] to row r's cached
        sequence (its first cache_lens[r] slots) and samples the turn's first token with keys[r] (raw key data
        [R, k], e.g. `episode_turn_keys`). One process; the cache and state are donated. -> (cache, state).

        source [R] (optional): row r reuses the prefill of row source[r] (an index into `rows`, whose new tokens
        and cache length it shares), e.g. the episodes of a group starting from one prompt: prefilled once (once
        per lane, in lanes). Rows and prefills are padded to powers of two, so a run compiles a few programs.

        budgets [R] (optional, each in [1, config.max_new_tokens]): row r generates at most budgets[r] tokens, so its
        turn needs only that much room in the cache; the caller ends it there (`end_rows`), deciding each `decode`'s
        steps so that no row passes its budget (an OpenAI request's max_tokens)."""
        rows = np.asarray(rows, np.int32)
        r = len(rows)
        if r == 0:
            return cache, state
        lens = np.asarray(new_lens, np.int32)
        index = np.asarray(cache_lens, np.int32)
        if np.any(lens < 1):
            raise ValueError(f"Every row a turn begins for needs >= 1 new token (at least the last sampled one); "
                             f"got new_lens {lens}.")
        self._check_begin(rows, lens, index, config, budgets)
        source = np.arange(r) if source is None else np.asarray(source, np.int64)
        if source.shape != (r,) or np.any(source[source] != source):
            raise ValueError("source must map each row to a row (of `rows`) that is its own source.")
        tokens, keys = np.asarray(new_tokens, np.int32), np.asarray(keys, np.uint32)
        self._check_cache(cache)
        if self.lanes == 1:
            fn, args = self._begin_call(config, rows, tokens, lens, index, keys, source, self.batch_size)
            return fn(params, cache, state, *args)
        states, caches = list(split_rows(state, self.lanes)), list(cache.lanes)
        plan = [(lane, self._begin_call(config, rows[picks] - lane * self.lane_rows, tokens[picks], lens[picks],
                                        index[picks], keys[picks], local, self.lane_rows))
                for lane, picks, local in lane_plan(rows, source, self.lane_rows)]
        outs = self._run_lanes([(fn, (params, caches[lane], states[lane]) + args) for lane, (fn, args) in plan])
        for (lane, _), (lane_cache, lane_state) in zip(plan, outs):
            caches[lane], states[lane] = lane_cache, lane_state
        return LaneCaches(tuple(caches)), merge_rows(states)

    def _check_begin(self, rows: np.ndarray, lens: np.ndarray, index: np.ndarray, config: SamplingConfig,
                     budgets=None) -> None:
        """`begin`'s rows [R] are distinct rows of the batch whose turns fit the cache: its programs drop a write
        past the last slot or to a row index >= B (padding), so either would sample from a silently wrong cache."""
        if np.any((rows < 0) | (rows >= self.batch_size)) or len(np.unique(rows)) != len(rows):
            raise ValueError(f"rows must be distinct rows of the batch, in [0, {self.batch_size}); got {rows}.")
        if lens.shape != rows.shape or index.shape != rows.shape:
            raise ValueError(f"new_lens {lens.shape} and cache_lens {index.shape} must have one entry per row "
                             f"({len(rows)}).")
        if np.any(index < 0):
            raise ValueError(f"cache_lens must be >= 0, got {index}.")
        budget = np.full(rows.shape, config.max_new_tokens) if budgets is None else np.asarray(budgets, np.int64)
        if budget.shape != rows.shape or np.any((budget < 1) | (budget > config.max_new_tokens)):
            raise ValueError(f"budgets must have one entry per row ({len(rows)}), each in [1, max_new_tokens="
                             f"{config.max_new_tokens}]; got {budget}.")
        need = index + lens + budget
        over = np.flatnonzero(need > self.cache_size)
        if over.size:
            i = over[0]
            raise ValueError(
                f"Row {rows[i]} would overflow the KV cache by {need[i] - self.cache_size} tokens: cache_lens "
                f"{index[i]} + new_lens {lens[i]} + max_new_tokens {budget[i]} > cache_size "
                f"{self.cache_size}. Raise Sampler(cache_size=...) or lower max_new_tokens.")

    def prefilled_rows(self, rows, source) -> np.ndarray:
        """The positions in `rows` of the rows whose new tokens `begin(rows, ..., source=source)` prefills: one per
        distinct source, per lane in lanes."""
        rows, source = np.asarray(rows, np.int64), np.asarray(source, np.int64)
        if self.lanes == 1:
            return np.unique(source)
        return np.sort(np.concatenate([picks[np.unique(local)] for _, picks, local in
                                       lane_plan(rows, source, self.lane_rows)]))

    def _begin_call(self, config: SamplingConfig, rows, tokens, lens, index, keys, source, batch: int):
        """(begin program, its arguments after (params, cache, state)) for rows [R] of a batch of `batch` rows."""
        r = len(rows)
        sources, position = np.unique(source, return_inverse=True)  # the prefills, and which one each row takes
        u = len(sources)
        size, prefills = (min(bucket_length(n, minimum=1), batch) for n in (r, u))
        bucket = bucket_length(int(lens[sources].max()))
        kv_len = self.window_length(int((index + lens)[sources].max()))  # what the prefill reads and writes
        padded = np.full((prefills, bucket), self.pad_id, np.int32)
        given = tokens[sources, :bucket]
        padded[:u, :given.shape[1]] = given
        pad, pad_u = size - r, prefills - u
        args = (np.concatenate([rows, np.full(pad, batch, np.int32)]),
                np.concatenate([position, np.zeros(pad, np.int64)]).astype(np.int32),
                np.concatenate([rows[sources], np.full(pad_u, batch, np.int32)]), padded,
                np.concatenate([index[sources], np.zeros(pad_u, np.int32)]),
                np.concatenate([lens[sources], np.ones(pad_u, np.int32)]),
                np.concatenate([keys, np.zeros((pad, keys.shape[1]), np.uint32)]), temperature_arg(config))
        in_place = r == u == batch and np.array_equal(rows, np.arange(r)) and np.array_equal(sources, np.arange(r))
        return self._begin_fn(config, size, prefills, bucket, kv_len, in_place), tuple(map(jnp.asarray, args))

    def _run_lanes(self, calls: list[tuple[Any, tuple]]) -> list[Any]:
        """Runs (program, arguments) calls, one per lane, side by side; a program's first call runs alone."""
        cold = any(fn not in self._ran for fn, _ in calls)
        results = run_lanes([functools.partial(fn, *args) for fn, args in calls], first_alone=cold)
        self._ran.update(fn for fn, _ in calls)
        return results

    def decode_window(self, end: int) -> int:
        """The cache slots a decode program is compiled for when rows reach slot `end`: its window_length, or the
        whole cache where the model's decode attention is ragged (`uses_ragged_decode`: each row reads only its own
        length there, so one program serves every window)."""
        window = self.window_length(end)
        return self.cache_size if uses_ragged_decode(1 if self.mesh is None else self.mesh.size) else window

    def decode(self, params, cache: KVCache | LaneCaches, state: TurnState, config: SamplingConfig, steps: int, *,
               end: int) -> tuple[KVCache | LaneCaches, TurnState]:
        """Advances unfinished rows by up to `steps` tokens; `end` bounds the slot any row reaches (its window)."""
        self._check_cache(cache)
        fn = self._decode_fn(config, self.decode_window(end), steps)
        weights, temperature = self.decode_weights(params), temperature_arg(config)
        if self.lanes == 1:
            return fn(params, weights, cache, state, temperature)
        outs = self._run_lanes([(fn, (params, weights, lane_cache, lane_state, temperature))
                                for lane_cache, lane_state in zip(cache.lanes, split_rows(state, self.lanes))])
        caches, states = zip(*outs)
        return LaneCaches(tuple(caches)), merge_rows(states)

    def _check_cache(self, cache) -> None:
        laned = isinstance(cache, LaneCaches)
        if (cache.batch_size, cache.max_len) != (self.batch_size, self.cache_size) or laned != (self.lanes > 1) or (
                laned and len(cache.lanes) != self.lanes):
            held = f"{len(cache.lanes)} lanes of " if laned else ""
            raise ValueError(f"cache holds {held}[B, S] = {(cache.batch_size, cache.max_len)}, this sampler expects "
                             f"{self.lanes} lane(s) of {(self.batch_size, self.cache_size)} in all; create it with "
                             "Sampler.init_cache().")

    def _check(self, new_tokens, new_lens, cache_lens, active, config: SamplingConfig) -> None:
        b = self.local_batch_size
        if new_tokens.ndim != 2 or new_tokens.shape[0] != b:
            rows = f"batch_size={b}" if b == self.batch_size else f"local_batch_size={b} (this process's rows)"
            raise ValueError(f"new_tokens must be [{rows}, T] int32, got shape {new_tokens.shape}.")
        for name, x in (("new_lens", new_lens), ("cache_lens", cache_lens), ("active", active)):
            if x.shape != (b,):
                raise ValueError(f"{name} must have shape [{b}], got {x.shape}.")
        if np.any(new_lens < 0) or np.any(new_lens > new_tokens.shape[1]):
            raise ValueError(f"new_lens must lie in [0, {new_tokens.shape[1]}] (new_tokens' width), got {new_lens}.")
        if np.any(cache_lens < 0):
            raise ValueError(f"cache_lens must be >= 0, got {cache_lens}.")
        empty = np.flatnonzero(active & (new_lens == 0))
        if empty.size:
            raise ValueError(
                f"Row {empty[0]} is active but has new_lens 0: feed at least one token (the last sampled "
                "token of the previous call) or mark the row inactive."
            )
        need = cache_lens + new_lens + config.max_new_tokens
        over = np.flatnonzero(active & (need > self.cache_size))
        if over.size:
            r = over[0]
            raise ValueError(
                f"Row {r} would overflow the KV cache by {need[r] - self.cache_size} tokens: cache_lens "
                f"{cache_lens[r]} + new_lens {new_lens[r]} + max_new_tokens {config.max_new_tokens} > "
                f"cache_size {self.cache_size}. Raise Sampler(cache_size=...) or lower max_new_tokens."
            )

    def generate(self, params, new_tokens, new_lens, key, config: SamplingConfig, *,
                 cache: KVCache | None = None, cache_lens=None, active=None) -> SampleOutput:
        """Appends new_tokens[b, :new_lens[b]] to row b's cached sequence and samples a continuation.

        new_tokens [b, Tn] int32 (right-padded); cache_lens/active [b], where b = local_batch_size (this
        process's rows; the whole batch with one process). key: one PRNG key (row b then samples with
        fold_in(key, global row)) or one per row [b] (typed) / [b, 2] (raw), e.g. from (episode, turn).
        Every process calls with its rows; the output's arrays span the batch. The output cache holds every
        token except the last sampled one of each row, which the caller feeds first on the next call.
        """
        if (cache is None) != (cache_lens is None):
            raise ValueError("Pass cache and cache_lens together (both from Sampler.init_cache or a SampleOutput).")
        if cache is None:
            cache, cache_lens = self.init_cache()
        self._check_cache(cache)
        tokens_np = np.asarray(new_tokens, dtype=np.int32)
        lens_np = np.asarray(new_lens, dtype=np.int32)
        cache_lens_np = np.asarray(cache_lens, dtype=np.int32)
        active_np = np.ones((self.local_batch_size,), bool) if active is None else np.asarray(active, dtype=bool)
        self._check(tokens_np, lens_np, cache_lens_np, active_np, config)
        keys = row_keys(key, np.arange(self.rows.start, self.rows.stop))
        state = self.idle_state(config)
        if self.mesh is None:  # only the active rows begin
            rows = np.flatnonzero(active_np)
            cache, state = self.begin(params, cache, state, rows, tokens_np[rows], lens_np[rows],
                                      cache_lens_np[rows], keys[rows], config)
            end = int(np.max(cache_lens_np[rows] + lens_np[rows], initial=0)) + config.max_new_tokens
            state = settle_idle(state, jnp.asarray(active_np), jnp.asarray(cache_lens_np), jnp.int32(self.pad_id))
        else:  # every process runs the same programs: every row of the batch begins, idle ones are reset
            longest_new, last_end = agree_max(int(lens_np.max(initial=1)),
                                              int(np.max(np.where(active_np, cache_lens_np + lens_np, 0), initial=0)))
            end = last_end + config.max_new_tokens
            bucket = bucket_length(max(longest_new, 1))
            padded = np.full((self.local_batch_size, bucket), self.pad_id, np.int32)
            padded[:, :min(bucket, tokens_np.shape[1])] = tokens_np[:, :bucket]
            put = self.to_global
            fn = self._begin_fn(config, self.batch_size, self.batch_size, bucket, self.window_length(end), True)
            rows = put(np.arange(self.rows.start, self.rows.stop, dtype=np.int32))
            cache, state = fn(params, cache, state, rows, rows, rows, put(padded), put(cache_lens_np),
                              put(np.maximum(lens_np, 1)), put(keys), temperature_arg(config))
            state = settle_idle(state, put(active_np), put(cache_lens_np), jnp.int32(self.pad_id))
        cache, state = self.decode(params, cache, state, config, config.max_new_tokens, end=end)
        return state_output(state, cache)
