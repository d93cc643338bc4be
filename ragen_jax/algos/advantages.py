"""Advantage estimators on the [B, T] token layout, registered in ADVANTAGE_ESTIMATORS.

Every estimator has the signature ``fn(inputs: AdvantageInputs, **hparams) -> (advantages
[B, T], returns [B, T])``; both outputs are zero outside ``response_mask`` and carry no
gradient. Semantics follow veRL v0.6.1 ``core_algos`` (and RAGEN's bi-level GAE); the few
deliberate differences are stated in each docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import chex
import flax.struct
import jax
import jax.numpy as jnp

from ragen_jax.algos.masked import masked_whiten
from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS


@flax.struct.dataclass
class AdvantageInputs:
    """What an estimator may read. Token fields are [B, T]; ``group_ids`` is [B] int.

    response_mask: 1 on sampled assistant tokens only (multi-turn rows hold several spans).
    values: critic values per token (GAE family). group_ids: equal for episodes of one group.
    turn_end_mask: 1 on the last token of each assistant turn (bi-level GAE); when None the
    turn ends are the tokens with a non-zero reward, as in RAGEN.
    episode_ids: [B] int, equal for rows of one episode (a `single_turn` or `limited_multi_turn`
    context makes a row per turn); group statistics then count each episode once, by its first
    row, as RAGEN does. None: every row is its own episode.
    """

    token_level_rewards: jax.Array
    response_mask: jax.Array
    values: jax.Array | None = None
    group_ids: jax.Array | None = None
    turn_end_mask: jax.Array | None = None
    episode_ids: jax.Array | None = None


def _check(inputs: AdvantageInputs, *, need_values: bool = False, need_groups: bool = False) -> None:
    chex.assert_rank([inputs.token_level_rewards, inputs.response_mask], 2)
    chex.assert_equal_shape([inputs.token_level_rewards, inputs.response_mask])
    if need_values:
        if inputs.values is None:
            raise ValueError("This advantage estimator needs AdvantageInputs.values [B, T] (critic values).")
        chex.assert_equal_shape([inputs.values, inputs.token_level_rewards])
    if need_groups:
        if inputs.group_ids is None:
            raise ValueError("This advantage estimator needs AdvantageInputs.group_ids [B] (one id per group).")
        chex.assert_rank(inputs.group_ids, 1)
        chex.assert_axis_dimension(inputs.group_ids, 0, inputs.token_level_rewards.shape[0])
        chex.assert_type(inputs.group_ids, int)
        if inputs.episode_ids is not None:
            chex.assert_equal_shape([inputs.episode_ids, inputs.group_ids])
            chex.assert_type(inputs.episode_ids, int)


def _time_major(*xs: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(jnp.swapaxes(x, 0, 1) for x in xs)


def _finish(adv: jax.Array, ret: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    m = mask.astype(bool)
    adv = jnp.where(m, adv, 0.0)
    ret = jnp.where(m, ret, 0.0)
    return jax.lax.stop_gradient(adv), jax.lax.stop_gradient(ret)


def _masked_gae_scan(rewards, values, mask, gamma, lam) -> jax.Array:
    """Reverse GAE recursion that jumps over unmasked tokens (their reward is ignored)."""
    r, v, m = _time_major(rewards, values, mask.astype(bool))

    def step(carry, x):
        next_value, last_gae = carry
        r_t, v_t, m_t = x
        new_gae = r_t + gamma * next_value - v_t + gamma * lam * last_gae
        carry = (jnp.where(m_t, v_t, next_value), jnp.where(m_t, new_gae, last_gae))
        return carry, carry[1]

    zeros = jnp.zeros_like(r[0])
    _, adv = jax.lax.scan(step, (zeros, zeros), (r, v, m), reverse=True)
    return jnp.swapaxes(adv, 0, 1)


@ADVANTAGE_ESTIMATORS.register("gae")
def gae(inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 1.0,
        whiten: bool = True) -> tuple[jax.Array, jax.Array]:
    """Token-level GAE over sampled tokens only: env/template tokens are skipped, so the TD
    error of the last token of a turn bootstraps from the first token of the next turn.
    returns = raw advantages + values; advantages are then whitened over masked tokens.
    """
    _check(inputs, need_values=True)
    rewards = inputs.token_level_rewards.astype(jnp.float32)
    values = inputs.values.astype(jnp.float32)
    adv = _masked_gae_scan(rewards, values, inputs.response_mask, gamma, lam)
    returns = adv + values
    if whiten:
        adv = masked_whiten(adv, inputs.response_mask)
    return _finish(adv, returns, inputs.response_mask)


def turn_ends_from_rewards(token_level_rewards: jax.Array) -> jax.Array:
    """RAGEN's rule: a turn ends wherever a non-zero reward sits. -> [B, T] bool."""
    return token_level_rewards != 0


def turn_ends_from_mask(response_mask: jax.Array) -> jax.Array:
    """Last token of each masked-in span (one span per assistant turn). -> [B, T] bool."""
    m = response_mask.astype(bool)
    next_m = jnp.concatenate([m[:, 1:], jnp.zeros_like(m[:, :1])], axis=1)
    return m & ~next_m


@ADVANTAGE_ESTIMATORS.register("bilevel_gae")
def bilevel_gae(inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 1.0,
                high_level_gamma: float = 0.95, whiten: bool = True) -> tuple[jax.Array, jax.Array]:
    """RAGEN's bi-level (turn-level) GAE.

    High level, over the turn-end tokens e_1 < ... < e_K of a row (values V, rewards r):
      A_k = r(e_k) + hg * V(e_{k+1}) - V(e_k) + hg * lam * A_{k+1}   (V(e_{K+1}) = 0, A_{K+1} = 0)
      G_k = A_k + V(e_k)                                              (the turn's return)
    Low level, backwards over sampled tokens t (next sampled token t'):
      at a turn end:   a_t = G_k - V(t)  (= A_k; the token recursion restarts here)
      elsewhere:       a_t = r(t) + gamma * V(t') - V(t) + gamma * lam * a_{t'}
    returns = a + V on sampled tokens; advantages whitened over sampled tokens.
    Turn ends come from ``inputs.turn_end_mask`` or, when None, from non-zero rewards (RAGEN).
    Where RAGEN fails (sampled tokens after the last turn end) we bootstrap from 0.
    """
    _check(inputs, need_values=True)
    rewards = inputs.token_level_rewards.astype(jnp.float32)
    values = inputs.values.astype(jnp.float32)
    ends = inputs.turn_end_mask
    ends = turn_ends_from_rewards(rewards) if ends is None else ends.astype(bool)
    chex.assert_equal_shape([ends, rewards])
    r, v, e, m = _time_major(rewards, values, ends, inputs.response_mask.astype(bool))
    zeros = jnp.zeros_like(r[0])

    def high(carry, x):
        next_value, last_adv = carry
        r_t, v_t, e_t = x
        new_adv = r_t + high_level_gamma * next_value - v_t + high_level_gamma * lam * last_adv
        carry = (jnp.where(e_t, v_t, next_value), jnp.where(e_t, new_adv, last_adv))
        return carry, jnp.where(e_t, new_adv + v_t, r_t)

    _, turn_reward = jax.lax.scan(high, (zeros, zeros), (r, v, e), reverse=True)

    def low(carry, x):
        next_value, last_gae = carry
        g_t, v_t, e_t, m_t = x
        token_gae = g_t + gamma * next_value - v_t + gamma * lam * last_gae
        new_gae = jnp.where(e_t, g_t - v_t, token_gae)
        carry = (jnp.where(m_t, v_t, next_value), jnp.where(m_t, new_gae, last_gae))
        return carry, carry[1]

    _, adv = jax.lax.scan(low, (zeros, zeros), (turn_reward, v, e, m), reverse=True)
    adv = jnp.swapaxes(adv, 0, 1)
    returns = adv + values
    if whiten:
        adv = masked_whiten(adv, inputs.response_mask)
    return _finish(adv, returns, inputs.response_mask)


def _first_rows(episode_ids: jax.Array | None, n: int) -> jax.Array:
    """[n] bool: whether each row is its episode's first (every row is, without episode ids)."""
    if episode_ids is None:
        return jnp.ones((n,), bool)
    chex.assert_shape(episode_ids, (n,))
    earlier = jnp.tril(jnp.ones((n, n), bool), k=-1)  # [i, j]: j < i
    return ~((episode_ids[:, None] == episode_ids[None, :]) & earlier).any(axis=1)


def _row_sums(weights: jax.Array, scores: jax.Array) -> jax.Array:
    """weights [n, n] (0/1) and scores [n] -> [n] sums of weights[i, j] * scores[j] over j, in full float32."""
    return jnp.sum(weights * scores[None, :], axis=1)


def group_mean_std(scores: jax.Array, group_ids: jax.Array,
                   episode_ids: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-row mean, unbiased std and size of the row's group. scores/group_ids [B] -> 3 x [B].

    With episode_ids [B], only the first row of each episode joins its group's statistics (its score
    stands for the episode; RAGEN's `compute_grpo_outcome_advantage` with episode ids), so an episode
    trained as several turn rows counts once, not once per turn. Sums are elementwise, not a matmul: a
    float32 dot runs in TF32 / bfloat16 on GPUs / TPUs by default, and a mean off by a rounding of the
    rewards would give a group of equal rewards advantages of about +-0.9 instead of 0."""
    chex.assert_rank([scores, group_ids], 1)
    chex.assert_equal_shape([scores, group_ids])
    counted = _first_rows(episode_ids, scores.shape[0]).astype(scores.dtype)
    same = (group_ids[:, None] == group_ids[None, :]).astype(scores.dtype) * counted[None, :]
    count = same.sum(axis=1)
    mean = _row_sums(same, scores) / jnp.maximum(count, 1.0)
    sq = same * jnp.square(scores[None, :] - mean[:, None])
    std = jnp.sqrt(sq.sum(axis=1) / jnp.maximum(count - 1.0, 1.0))
    return mean, std, count


def _episode_scores(inputs: AdvantageInputs) -> jax.Array:
    return inputs.token_level_rewards.astype(jnp.float32).sum(axis=-1)


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo(inputs: AdvantageInputs, *, norm_adv_by_std_in_grpo: bool = True,
         epsilon: float = 1e-6) -> tuple[jax.Array, jax.Array]:
    """GRPO outcome advantage: (score - group mean) [/ (group std + eps)] on every sampled token.

    score = sum of the row's token rewards; std is unbiased; a group of one has mean 0, std 1; with
    ``episode_ids`` each episode counts once in its group (`group_mean_std`).
    ``norm_adv_by_std_in_grpo=False`` is Dr.GRPO. returns = advantages (as in veRL).
    """
    _check(inputs, need_groups=True)
    scores = _episode_scores(inputs)
    mean, std, count = group_mean_std(scores, inputs.group_ids, inputs.episode_ids)
    single = count <= 1
    mean = jnp.where(single, 0.0, mean)
    std = jnp.where(single, 1.0, std)
    adv = scores - mean
    if norm_adv_by_std_in_grpo:
        adv = adv / (std + epsilon)
    adv = jnp.broadcast_to(adv[:, None], inputs.response_mask.shape)
    return _finish(adv, adv, inputs.response_mask)


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo(inputs: AdvantageInputs) -> tuple[jax.Array, jax.Array]:
    """RLOO: score minus the mean of the other group members, = (score - mean) * n / (n - 1).

    A group of one keeps its raw score (veRL). With ``episode_ids`` the members are episodes (each by its
    first row) and "the others" leave out the row's whole episode. returns = advantages.
    """
    _check(inputs, need_groups=True)
    scores = _episode_scores(inputs)
    mean, _, count = group_mean_std(scores, inputs.group_ids, inputs.episode_ids)
    own = scores
    if inputs.episode_ids is not None:  # the score the row's episode entered its group's mean with
        first = _first_rows(inputs.episode_ids, scores.shape[0])
        own = _row_sums(((inputs.episode_ids[:, None] == inputs.episode_ids[None, :]) & first[None, :]).astype(
            scores.dtype), scores)
    others = (mean * count - own) / jnp.maximum(count - 1.0, 1.0)
    adv = jnp.where(count > 1, scores - others, scores)
    adv = jnp.broadcast_to(adv[:, None], inputs.response_mask.shape)
    return _finish(adv, adv, inputs.response_mask)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
def reinforce_plus_plus(inputs: AdvantageInputs, *, gamma: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """REINFORCE++: discounted return-to-go over sampled tokens, whitened over the batch.

    Like GAE, unmasked tokens are skipped (no reward, no discount). For one response span this
    equals veRL; on multi-turn rows veRL would cut the return at the first env token instead.
    """
    _check(inputs)
    r, m = _time_major(inputs.token_level_rewards.astype(jnp.float32), inputs.response_mask.astype(bool))

    def step(running, x):
        r_t, m_t = x
        new = r_t + gamma * running
        return jnp.where(m_t, new, running), new

    _, returns = jax.lax.scan(step, jnp.zeros_like(r[0]), (r, m), reverse=True)
    returns = jnp.swapaxes(returns, 0, 1)
    adv = masked_whiten(returns, inputs.response_mask)
    return _finish(adv, returns, inputs.response_mask)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(inputs: AdvantageInputs) -> tuple[jax.Array, jax.Array]:
    """REINFORCE++ with a group baseline: (score - group mean) on every sampled token, whitened over the batch.

    A group of one has mean 0; with ``episode_ids`` each episode counts once in its group's mean (as ``grpo``;
    veRL counts rows). The whitening is over sampled tokens, as veRL's. returns = advantages (as in veRL).
    """
    _check(inputs, need_groups=True)
    scores = _episode_scores(inputs)
    mean, _, count = group_mean_std(scores, inputs.group_ids, inputs.episode_ids)
    adv = jnp.broadcast_to((scores - jnp.where(count <= 1, 0.0, mean))[:, None], inputs.response_mask.shape)
    adv = masked_whiten(adv, inputs.response_mask)
    return _finish(adv, adv, inputs.response_mask)


def accepts_keyword(fn: Callable, name: str) -> bool:
    """Whether ``fn`` takes the keyword argument ``name`` (by name or through **kwargs)."""
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def call_with_supported(fn: Callable, *args, **hparams):
    """Call ``fn`` with only the keyword hparams its signature accepts (all if it has **kw).

    Lets a trainer pass one flat algorithm config (gamma, lam, norm_adv_by_std, ...) to
    whichever estimator or loss the config names.
    """
    return fn(*args, **{k: v for k, v in hparams.items() if accepts_keyword(fn, k)})


def compute_advantages(name: str | Callable, inputs: AdvantageInputs,
                       **hparams) -> tuple[jax.Array, jax.Array]:
    """Look up an estimator (name, import path or callable) and apply it. -> (adv, returns) [B, T]."""
    fn = ADVANTAGE_ESTIMATORS.get(name)
    adv, ret = call_with_supported(fn, inputs, **hparams)
    chex.assert_equal_shape([adv, ret, inputs.response_mask])
    return adv, ret


# veRL's ReMax baseline is the reward of a greedy (temperature 0) rollout of each prompt: one more rollout per step,
# which the trainer does not run (RAGEN itself exits on remax as untested).
ADVANTAGE_ESTIMATORS.mark_unavailable(
    "remax", "veRL's ReMax needs a greedy rollout of every prompt each step as its baseline, which ragen-jax does "
    "not run; use adv_estimator='grpo' or 'rloo' (baselines from the group's own sampled rollouts)")
