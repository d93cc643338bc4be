"""One turn of sampling as pure programs over a per-row KV cache: the turn's state (`TurnState`), its start
(`begin_turn`: prefill the new tokens, sample token 0) and its continuation (`decode_turn`: a `lax.while_loop`
of single-token steps), and the keys every token is drawn with. `Sampler` (sampler.py) compiles and schedules them.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models import KVCache, ModelConfig
from ragen_jax.models.transformer import with_decode_weights
from ragen_jax.shapes import pad_rows
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.logits import sample_rows
from ragen_jax.sampling.lanes import LaneCaches
from ragen_jax.sampling.stopping import INACTIVE, stop_reason


@flax.struct.dataclass
class SampleOutput:
    """What one `Sampler.generate` call produced; see `Sampler.generate` for the cache semantics."""

    tokens: jax.Array  # [B, N] int32, pad_id after each row's length
    lengths: jax.Array  # [B] int32, 0 for inactive rows; includes the eos/stop tokens
    logprobs: jax.Array  # [B, N] f32 under the sampling distribution; 0 past length
    raw_logprobs: jax.Array  # [B, N] f32 under the raw model (temperature 1, full vocab); 0 past length
    finish_reason: jax.Array  # [B] int32: 0 length cap, 1 eos, 2 stop sequence, -1 inactive
    cache: KVCache | LaneCaches  # one KVCache per lane when the sampler decodes in lanes
    cache_lens: jax.Array  # [B] int32 tokens of each row whose K/V are in the cache


@flax.struct.dataclass
class TurnState:
    """Every row's current turn, carried across decode chunks (all [B, ...] arrays).

    base: first cache slot of the turn's generated tokens (the slot its first token is fed into); keys: the
    row's turn key as raw key data (token n draws from fold_in(key, n)); done: the turn ended (or the row is idle).
    """

    tokens: jax.Array  # [B, N] int32
    logprobs: jax.Array  # [B, N] f32
    raw_logprobs: jax.Array  # [B, N] f32
    lengths: jax.Array  # [B] int32 tokens generated so far
    base: jax.Array  # [B] int32
    keys: jax.Array  # [B, k] uint32 raw key data
    done: jax.Array  # [B] bool
    reason: jax.Array  # [B] int32, INACTIVE for an idle row

    @property
    def cache_lens(self) -> jax.Array:
        """[B] tokens in the cache: all but each row's last sampled token, which is fed first next time."""
        return self.base + jnp.maximum(self.lengths - 1, 0)

    @property
    def last(self) -> jax.Array:
        """[B] each row's last sampled token (the next decode step feeds it)."""
        return jnp.take_along_axis(self.tokens, jnp.maximum(self.lengths - 1, 0)[:, None], axis=1)[:, 0]


def model_config_of(graphdef: Any) -> ModelConfig:
    """The ModelConfig stored as a static attribute in a CausalLM's graphdef."""
    for _, value in getattr(graphdef, "attributes", ()):
        config = getattr(value, "value", None)
        if isinstance(config, ModelConfig):
            return config
    raise ValueError("Could not find a ModelConfig in the graphdef; pass Sampler(..., model_config=...).")


def row_keys(key: Any, rows: np.ndarray) -> np.ndarray:
    """Raw key data [R, k] uint32, one key per row: `key` itself when it holds one per row ([R] typed or
    [R, k] raw), else `key` folded with each row's global index rows [R]."""
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    if key.ndim == 0:
        key = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.asarray(rows, jnp.int32))
    if key.shape[0] != len(rows):
        raise ValueError(f"Got {key.shape[0]} per-row keys for {len(rows)} rows.")
    return np.asarray(jax.random.key_data(key))


@jax.jit
def _episode_turn_keys(key, episodes, turns):
    keys = jax.vmap(lambda e, t: jax.random.fold_in(jax.random.fold_in(key, e), t))(episodes, turns)
    return jax.random.key_data(keys)


def episode_turn_keys(key: Any, episodes, turns) -> np.ndarray:
    """Raw key data [R, k]: the key of each (episode, turn) [R], fold_in(fold_in(key, episode), turn). Sampling with
    these makes every token depend only on (key, episode, turn, position), whatever the batch or schedule."""
    if not jax.dtypes.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(jnp.asarray(key))
    episodes, turns = (np.asarray(x, np.int32).reshape(-1) for x in (episodes, turns))
    n = len(episodes)
    if turns.shape != (n,):
        raise ValueError(f"episodes and turns must have the same length, got {n} and {len(turns)}.")
    return np.asarray(_episode_turn_keys(key, pad_rows(episodes), pad_rows(turns)))[:n]


def idle_state(batch: int, max_new_tokens: int, pad_id: int, key_width: int) -> TurnState:
    """Every row idle (done, nothing generated)."""
    zeros = jnp.zeros((batch, max_new_tokens), jnp.float32)
    return TurnState(tokens=jnp.full((batch, max_new_tokens), pad_id, jnp.int32), logprobs=zeros, raw_logprobs=zeros,
                     lengths=jnp.zeros((batch,), jnp.int32), base=jnp.zeros((batch,), jnp.int32),
                     keys=jnp.zeros((batch, key_width), jnp.uint32), done=jnp.ones((batch,), bool),
                     reason=jnp.full((batch,), INACTIVE, jnp.int32))


def _record(state: TurnState, rows: jax.Array, step: jax.Array, tok, lp, raw, config: SamplingConfig) -> TurnState:
    """Writes token `step` [R] of the rows `rows` [R] (index B = no row), its log-probs and stop reasons."""
    tokens = state.tokens.at[rows, step].set(tok, mode="drop")
    why = stop_reason(jnp.take(tokens, rows, axis=0, mode="clip"), step, tok, config)
    stopped = (why > 0) | (step + 1 >= config.max_new_tokens)
    return state.replace(
        tokens=tokens,
        logprobs=state.logprobs.at[rows, step].set(lp, mode="drop"),
        raw_logprobs=state.raw_logprobs.at[rows, step].set(raw, mode="drop"),
        lengths=state.lengths.at[rows].set(step + 1, mode="drop"),
        done=state.done.at[rows].set(stopped, mode="drop"),
        reason=state.reason.at[rows].set(why, mode="drop"))


def _token_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """Typed keys [R] of token `step` (scalar or [R]) from raw turn keys [R, k]."""
    return jax.vmap(jax.random.fold_in)(jax.random.wrap_key_data(keys), jnp.broadcast_to(step, keys.shape[:1]))


def begin_turn(graphdef, config: SamplingConfig, pad_id: int, kv_len: int, in_place: bool, params, cache,
           state: TurnState, rows, source, prefill_rows, tokens, cache_index, new_lens, keys, temperature,
           positions=None, image_embeds=None):
    """Starts a turn for rows [R] (an entry B is padding, ignored).

    Prefills U sequences: new tokens [U, Tb] from cache_index [U] into the cache rows prefill_rows [U] (a copy of
    their first kv_len slots); row r then takes prefill source[r]'s cache slots and last hidden state (rows that
    start from the same prompt share one prefill) and samples token 0 with fold_in(keys[r], 0) (keys [R, k] raw).
    `in_place` (static): rows and prefills are every row in order (the lockstep case), so the cache is written
    in place. temperature: f32 scalar (config's own temperature is not read). A vision-language model
    (`sampling.vision`) passes its M-RoPE positions [3, U, Tb] and the new tokens' image embeddings [N, D] (None:
    no image in the chunk). -> (cache, state)."""
    model = nnx.merge(graphdef, params)
    batch = state.lengths.shape[0]
    if in_place:
        sub = cache
    else:
        safe = jnp.minimum(prefill_rows, batch - 1)
        sub = cache.take_rows(safe).first_slots(kv_len)
    if positions is None:
        positions = cache_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    last_token = jnp.maximum(new_lens - 1, 0)
    images = {} if image_embeds is None else {"image_embeds": image_embeds}
    hidden, sub = model.hidden(tokens, positions, cache=sub, cache_index=cache_index, kv_len=kv_len,
                               query_lengths=new_lens, hidden_at=last_token, **images)  # padded tail skipped
    if in_place:
        cache = sub
    else:
        cache = cache.put_rows(rows, sub.take_rows(source))
    logits = model.logits(hidden.astype(model.config.jnp_dtype))[:, 0]
    tok, lp, raw = sample_rows(_token_keys(keys, jnp.int32(0)), logits[source], config, temperature)
    state = state.replace(
        tokens=state.tokens.at[rows].set(pad_id, mode="drop"),
        logprobs=state.logprobs.at[rows].set(0.0, mode="drop"),
        raw_logprobs=state.raw_logprobs.at[rows].set(0.0, mode="drop"),
        base=state.base.at[rows].set((cache_index + new_lens)[source], mode="drop"),
        keys=state.keys.at[rows].set(keys, mode="drop"))
    return cache, _record(state, rows, jnp.int32(0), tok, lp, raw, config)


def decode_turn(graphdef, config: SamplingConfig, kv_len: int, steps: int, params, weights, cache, state: TurnState,
            temperature, rope_deltas=None):
    """Advances every unfinished row by up to `steps` tokens (stops early once all rows are done).

    Row b feeds its last token into slot base + length - 1 and samples token `length` with fold_in(key, length);
    finished rows rewrite a slot past their end. Attention reads the first kv_len cache slots. weights: the
    model's `decode_weights` (projections laid out [out, in]), or None to use params' own layout. temperature: f32
    scalar (config's own temperature is not read). rope_deltas [B] int32 (a vision-language model's): the token
    at slot s of row b has position s + rope_deltas[b] (M-RoPE's text position after images)."""
    model = nnx.merge(graphdef, params)
    if weights is not None:
        model = with_decode_weights(model, weights)
    batch, n = state.tokens.shape
    all_rows = jnp.arange(batch)

    def cond(carry):
        i, _, s = carry
        return (i < steps) & ~jnp.all(s.done)

    def body(carry):
        i, cache, s = carry
        index = s.cache_lens
        positions = index[:, None] if rope_deltas is None else (index + rope_deltas)[:, None]
        logits, cache = model(s.last[:, None], positions, cache=cache, cache_index=index, kv_len=kv_len)
        step = jnp.minimum(s.lengths, n - 1)
        tok, lp, raw = sample_rows(_token_keys(s.keys, step), logits[:, 0], config, temperature)
        return i + 1, cache, _record(s, jnp.where(s.done, batch, all_rows), step, tok, lp, raw, config)

    _, cache, state = jax.lax.while_loop(cond, body, (jnp.int32(0), cache, state))
    return cache, state


def temperature_arg(config: SamplingConfig) -> np.ndarray:
    """The temperature argument of the begin and decode programs (a float32 scalar: one program per config apart
    from its temperature, `SamplingConfig.program_key`)."""
    return np.float32(config.temperature)


@jax.jit
def settle_idle(state: TurnState, active: jax.Array, cache_lens: jax.Array, pad_id: jax.Array) -> TurnState:
    """Rows not `active` [B] idle after a lockstep begin: nothing generated, their cache length kept."""
    on = active[:, None]
    return state.replace(tokens=jnp.where(on, state.tokens, pad_id), logprobs=jnp.where(on, state.logprobs, 0.0),
                         raw_logprobs=jnp.where(on, state.raw_logprobs, 0.0),
                         lengths=jnp.where(active, state.lengths, 0),
                         done=state.done | ~active, reason=jnp.where(active, state.reason, INACTIVE),
                         base=jnp.where(active, state.base, cache_lens))


@jax.jit
def end_rows(state: TurnState, rows: jax.Array) -> TurnState:
    """The turns of the rows `rows` [B] (bool) end where they are (a length cap the caller keeps, as a request's
    max_tokens or a stop string); their tokens so far stay, and the next `decode` leaves them."""
    return state.replace(done=state.done | rows)


def state_output(state: TurnState, cache: KVCache) -> SampleOutput:
    """A SampleOutput of the rows' current turns."""
    return SampleOutput(tokens=state.tokens, lengths=state.lengths, logprobs=state.logprobs,
                        raw_logprobs=state.raw_logprobs, finish_reason=state.reason, cache=cache,
                        cache_lens=state.cache_lens)
