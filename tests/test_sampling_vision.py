"""Sampling from a tiny random Qwen2.5-VL over two turns with pictures, the KV cache kept between them: greedy
tokens are a fresh full forward's argmax, and the sampler's raw log-probs are that forward's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models.vision import image_processor_for, vision_inputs
from ragen_jax.models.vision.tiny import make_tiny_vl_model
from ragen_jax.rollout.context import ContextBuilder, common_prefix_length
from ragen_jax.rollout.images import ImagePrompts, cached_prefix_length, concat_row_images, image_spans, images_from
from ragen_jax.sampling import SamplingConfig
from ragen_jax.sampling.vision import VLSampler, context_positions

NEW = 6
pytestmark = pytest.mark.slow  # ~1-2 min on 2 shared cores: compiles the tower, begin and decode programs


def picture(seed, size=56):
    return np.random.RandomState(seed).randint(0, 256, (size, size, 3)).astype(np.uint8)


@pytest.fixture(scope="module")
def vl():
    model, tokenizer = make_tiny_vl_model(seed=1)
    graphdef, params = nnx.split(model)
    prompts = ImagePrompts(tokenizer, image_processor_for(model.vl_config.vision))
    return model, graphdef, params, tokenizer, ContextBuilder(tokenizer), prompts


def full_logprobs(model, params, graphdef, tokens, images):
    """log-softmax [L, V] of one whole sequence with its pictures, no cache (M-RoPE from `rope_index`)."""
    positions, _ = context_positions(tokens, images, model.vl_config)

    @jax.jit
    def forward(params, tokens, positions, inputs):
        m = nnx.merge(graphdef, params)
        embeds = None if inputs is None else m.encode_images(inputs)
        return jax.nn.log_softmax(m(tokens[None], positions[:, None], image_embeds=embeds)[0][0], -1)

    inputs = vision_inputs(images.pixel_values, images.grid_thw, model.vl_config.vision) if images.num_images \
        else None
    return np.asarray(forward(params, jnp.asarray(tokens), jnp.asarray(positions), inputs))


def test_greedy_turns_with_pictures_match_a_full_forward(vl):
    model, graphdef, params, tokenizer, builder, prompts = vl
    sampler = VLSampler(graphdef, cache_size=256, pad_id=tokenizer.pad_token_id, batch_size=3)
    config = SamplingConfig(max_new_tokens=NEW, greedy=True)
    firsts = [("<image>\nWhere?", [picture(0)]), ("Look: <image> and <image>", [picture(1), picture(2, 84)]),
              ("No picture here.", [])]
    history = [[{"role": "system", "content": "Play."}, {"role": "user", "content": text}] for text, _ in firsts]
    pictures = [list(p) for _, p in firsts]
    fed = [np.zeros(0, np.int32)] * 3
    fed_keys = [()] * 3
    cache, cache_lens = sampler.init_cache()
    for turn in range(2):
        contexts, rows_images, chunks, positions, chunk_images, deltas = [], [], [], [], [], []
        for b in range(3):
            ctx, _, images = prompts.assemble(builder, history[b], pictures[b], add_generation_prompt=True)
            start = min(int(cache_lens[b]), common_prefix_length(fed[b], ctx), len(ctx) - 1)
            start = cached_prefix_length(start, ctx, images.keys, fed_keys[b], prompts.image_pad_id)
            pos, delta = context_positions(ctx, images, model.vl_config)
            held = len(image_spans(ctx[:start], prompts.image_pad_id))
            contexts.append(ctx), rows_images.append(images), deltas.append(delta)
            chunks.append(ctx[start:]), positions.append(pos[:, start:]), chunk_images.append(images_from(images, held))
            cache_lens[b] = start
        if turn == 1:
            assert min(len(c) for c in chunks) < min(len(c) for c in contexts)  # the cache was reused
        width = max(len(c) for c in chunks)
        new_tokens = np.zeros((3, width), np.int32)
        for b, c in enumerate(chunks):
            new_tokens[b, :len(c)] = c
        out = sampler.generate(params, new_tokens, [len(c) for c in chunks], jax.random.key(0), config, cache=cache,
                               cache_lens=cache_lens, positions=positions, images=chunk_images, rope_deltas=deltas)
        cache, cache_lens = out.cache, np.array(out.cache_lens)
        for b in range(3):
            n = int(out.lengths[b])
            response = np.asarray(out.tokens[b, :n])
            whole = np.concatenate([contexts[b], response])
            lp = full_logprobs(model, params, graphdef, whole, rows_images[b])
            at = np.arange(len(contexts[b]) - 1, len(whole) - 1)
            np.testing.assert_array_equal(response, lp[at].argmax(-1), err_msg=f"turn {turn} row {b}")
            np.testing.assert_allclose(np.asarray(out.raw_logprobs[b, :n]), lp[at, response], atol=1e-5)
            fed[b], fed_keys[b] = whole, rows_images[b].keys
            history[b] += [{"role": "assistant", "content": "", "tokens": response.tolist()},
                           {"role": "user", "content": f"Turn {turn + 2}: <image>"}]
            pictures[b].append(picture(10 + b + turn))
    assert concat_row_images(rows_images, prompts.features).num_images == 2 + 3 + 1


def test_the_pictures_reach_the_logits(vl):
    """The same tokens with another picture sample from other log-probs (the image tokens carry the tower)."""
    model, graphdef, params, tokenizer, builder, prompts = vl
    messages = [{"role": "user", "content": "<image> go"}]
    outs = []
    for seed in (0, 5):
        ctx, _, images = prompts.assemble(builder, messages, [picture(seed)], add_generation_prompt=True)
        sampler = VLSampler(graphdef, cache_size=128, pad_id=tokenizer.pad_token_id, batch_size=1)
        pos, delta = context_positions(ctx, images, model.vl_config)
        out = sampler.generate(params, ctx[None], [len(ctx)], jax.random.key(0), SamplingConfig(max_new_tokens=2,
                               greedy=True), positions=[pos], images=[images], rope_deltas=[delta])
        outs.append(np.asarray(out.raw_logprobs[0]))
    assert np.abs(outs[0] - outs[1]).max() > 1e-4
