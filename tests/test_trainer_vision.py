"""The update's side of a vision-language policy: log-probs of rows with pictures, recomputed with the vision
tower inside the (jitted) scoring, equal the sampler's raw log-probs; `model.freeze_vision` keeps the tower fixed
while the language model trains."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ragen_jax.models.vision import image_processor_for
from ragen_jax.models.vision.tiny import make_tiny_vl_model
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.images import ImagePrompts
from ragen_jax.sampling import SamplingConfig
from ragen_jax.sampling.vision import VLSampler, context_positions
from ragen_jax.trainer.setup import split_model
from ragen_jax.trainer.vision_scoring import vision_rows, vl_policy_logprobs


def picture(seed, size=56):
    return np.random.RandomState(seed).randint(0, 256, (size, size, 3)).astype(np.uint8)


@pytest.fixture(scope="module")
def vl():
    model, tokenizer = make_tiny_vl_model(seed=2)
    prompts = ImagePrompts(tokenizer, image_processor_for(model.vl_config.vision))
    return model, tokenizer, ContextBuilder(tokenizer), prompts


def rows_of(prompts, builder, texts_and_pictures):
    out = []
    for text, pics in texts_and_pictures:
        ctx, _, images = prompts.assemble(builder, [{"role": "user", "content": text}], pics,
                                          add_generation_prompt=True)
        out.append((ctx, images))
    return out


def padded(seqs, length):
    tokens = np.zeros((len(seqs), length), np.int32)
    mask = np.zeros((len(seqs), length), bool)
    for b, s in enumerate(seqs):
        tokens[b, :len(s)], mask[b, :len(s)] = s, True
    return tokens, mask


@pytest.mark.slow  # ~1 min on 2 shared cores: the sampler's programs and the scoring
def test_scored_logprobs_with_the_tower_inside_equal_the_samplers(vl):
    model, tokenizer, builder, prompts = vl
    graphdef, params = nnx.split(model)
    rows = rows_of(prompts, builder, [("<image> then <image>", [picture(0), picture(1, 84)]), ("text only", [])])
    sampler = VLSampler(graphdef, cache_size=128, pad_id=tokenizer.pad_token_id, batch_size=2)
    width = max(len(c) for c, _ in rows)
    tokens, _ = padded([c for c, _ in rows], width)
    pos = [context_positions(c, im, model.vl_config) for c, im in rows]
    out = sampler.generate(params, tokens, [len(c) for c, _ in rows], jax.random.key(3),
                           SamplingConfig(max_new_tokens=5), positions=[p for p, _ in pos],
                           images=[im for _, im in rows], rope_deltas=[d for _, d in pos])
    seqs = [np.concatenate([c, np.asarray(out.tokens[b, :int(out.lengths[b])])]) for b, (c, _) in enumerate(rows)]
    tokens, mask = padded(seqs, 64)
    positions, inputs = vision_rows(tokens, mask, [im for _, im in rows], model.vl_config)
    score = jax.jit(lambda p, t, m, q, i: vl_policy_logprobs(nnx.merge(graphdef, p), t, m, q, i)[0])
    lp = np.asarray(score(params, tokens, mask, positions, inputs))
    for b, (ctx, _) in enumerate(rows):
        n = int(out.lengths[b])
        np.testing.assert_allclose(lp[b, len(ctx):len(ctx) + n], np.asarray(out.raw_logprobs[b, :n]), atol=1e-5)


@pytest.mark.slow  # ~15-20 s each on 2 shared cores: the tower's and the LM's backward pass
@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_vision_keeps_the_tower_fixed_while_the_language_model_trains(vl, freeze):
    model, tokenizer, builder, prompts = vl
    split = split_model(model, lora=False, freeze_vision=freeze)
    rows = rows_of(prompts, builder, [("<image> go", [picture(4)]), ("no picture", [])])
    tokens, mask = padded([c for c, _ in rows], 32)
    positions, inputs = vision_rows(tokens, mask, [im for _, im in rows], model.vl_config)
    tx = optax.sgd(0.1)

    @jax.jit
    def update(trainable, frozen):
        def loss(t):
            lp, _ = vl_policy_logprobs(nnx.merge(split.graphdef, t, frozen), tokens, mask, positions, inputs)
            return -(lp * mask).sum()
        grads = jax.grad(loss)(trainable)
        updates, _ = tx.update(grads, tx.init(trainable), trainable)
        return optax.apply_updates(trainable, updates)

    before = nnx.state(model, nnx.Param)
    after = nnx.state(nnx.merge(split.graphdef, update(split.trainable, split.frozen), split.frozen), nnx.Param)
    changed = lambda part: any(not np.array_equal(a, b) for a, b in zip(  # noqa: E731
        jax.tree.leaves(before[part]), jax.tree.leaves(after[part])))
    assert changed("model") and changed("visual") != freeze
    assert not any("visual" in str(path) for path, _ in jax.tree_util.tree_leaves_with_path(split.trainable)) \
        or not freeze
    assert jnp.isfinite(jnp.asarray(jax.tree.leaves(after["visual"])[0])).all()


@pytest.mark.slow  # ~20 s on 2 shared cores: the tower twice
def test_a_training_batchs_per_row_picture_slots_score_as_the_rows_pictures(vl):
    """row_image_arrays (fixed picture slots per row, as training batches carry them) + vl_row_logprobs give the
    log-probs of vl_policy_logprobs over the rows' own pictures."""
    from ragen_jax.trainer.vision_scoring import row_image_arrays, vl_row_logprobs

    model, tokenizer, builder, prompts = vl
    graphdef, params = nnx.split(model)
    rows = rows_of(prompts, builder, [("<image> then <image>", [picture(5), picture(6)]), ("none", []),
                                      ("<image> only", [picture(7)])])
    tokens, mask = padded([c for c, _ in rows], 48)
    images = [im for _, im in rows]
    arrays = row_image_arrays(tokens, mask, images, model.vl_config)
    assert arrays["pixels"].shape[:2] == (3, 2) and arrays["mrope"].shape == (3, 3, 48)
    positions, inputs = vision_rows(tokens, mask, images, model.vl_config)
    want = jax.jit(lambda p: vl_policy_logprobs(nnx.merge(graphdef, p), tokens, mask, positions, inputs)[0])(params)
    got = jax.jit(lambda p, a: vl_row_logprobs(nnx.merge(graphdef, p), tokens, mask, a)[0])(params, arrays)
    np.testing.assert_allclose(np.asarray(got) * mask, np.asarray(want) * mask, atol=1e-5)
    with pytest.raises(ValueError, match="one picture size"):
        row_image_arrays(tokens, mask, [rows_of(prompts, builder, [("<image>", [picture(1, 84)])])[0][1],
                                        images[1], images[2]], model.vl_config)
