"""Contexts with images (a VL policy's rollout): image markers become the chat template's image tokens expanded to
each picture's token count, the pictures ride beside the tokens, image tokens never enter a loss mask, and the
cache keeps a prefix only where its pictures are the same."""

import numpy as np
import pytest

from envs.jax_batch import JaxEnvBatch
from envs.sokoban.env import Sokoban
from ragen_jax.models.vision import image_processor_for
from ragen_jax.models.vision.tiny import tiny_vl_config, tiny_vl_tokenizer
from ragen_jax.rollout.batching import build_batch
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.episodes import fit_image_context
from ragen_jax.rollout.images import ImagePrompts, cached_prefix_length, image_spans
from ragen_jax.rollout.prompts import TurnRecord
from ragen_jax.rollout.types import Episode


@pytest.fixture(scope="module")
def vl():
    tokenizer = tiny_vl_tokenizer()
    config = tiny_vl_config(tokenizer)
    prompts = ImagePrompts(tokenizer, image_processor_for(config.vision))
    return tokenizer, ContextBuilder(tokenizer), prompts


def picture(seed, size=56):
    return np.random.RandomState(seed).randint(0, 256, (size, size, 3)).astype(np.uint8)


def played_episode(tokenizer):
    """Two answered turns, each showing one 56 x 56 picture (4 image tokens), then an open third turn."""
    answer = tokenizer.encode("<think>go</think><answer>Up</answer>") + [tokenizer.token_id("<|im_end|>")]
    history = [TurnRecord(state="<image>", actions_left=5, images=(picture(t),), response_text="go Up",
                          response_tokens=list(answer), reward=1.0, actions_executed=1) for t in range(2)]
    history.append(TurnRecord(state="<image>", actions_left=3, images=(picture(2),)))
    return Episode(env_tag="s", seed=0, group_id=0, history=history, system="Push boxes.")


def test_a_context_shows_each_turns_picture_as_its_image_tokens(vl):
    tokenizer, builder, prompts = vl
    ep = played_episode(tokenizer)
    cfg = RolloutConfig(max_turn=3, response_length=16, max_model_len=1024)
    tokens, images = fit_image_context(builder, cfg, ep, prompts)
    pad = prompts.image_pad_id
    assert images.num_images == 3 and images.grid_thw.tolist() == [[1, 4, 4]] * 3
    assert (tokens == pad).sum() == 12  # 4 x 4 patches merged 2 x 2: 4 tokens per picture
    assert [e - s for s, e in image_spans(tokens, pad)] == [4, 4, 4]
    assert images.pixel_values.shape == (3 * 16, prompts.features)
    start = tokenizer.token_id("<|vision_start|>")
    assert all(tokens[s - 1] == start for s, _ in image_spans(tokens, pad))
    # the same picture is processed once and gives the same pixels
    again = prompts.process([picture(1)])
    np.testing.assert_array_equal(again.pixel_values, images.pixel_values[16:32])


def test_the_batch_keeps_each_rows_pictures_and_never_trains_image_tokens(vl):
    tokenizer, builder, prompts = vl
    ep = played_episode(tokenizer)
    ep.history.pop()  # the episode ended after two answered turns
    logprobs = {(0, t): (np.zeros(len(r.response_tokens)), np.zeros(len(r.response_tokens)))
                for t, r in enumerate(ep.history)}
    batch = build_batch(builder, [ep], mode="limited_multi_turn", window=1, max_tokens=16, enable_think=True,
                        format_penalty=0.0, use_turn_scores=False, norm_method="identity", norm_grouping="batch",
                        logprobs=logprobs, pad_id=tokenizer.pad_token_id, row_multiple=4)
    assert batch.images is None  # text path unchanged
    for t, r in enumerate(ep.history):
        r.history_start = t  # a window of 1: each turn's row shows only its own state
    batch = build_batch(builder, [ep], mode="limited_multi_turn", window=1, max_tokens=16, enable_think=True,
                        format_penalty=0.0, use_turn_scores=False, norm_method="identity", norm_grouping="batch",
                        logprobs=logprobs, pad_id=tokenizer.pad_token_id, row_multiple=4, image_prompts=prompts)
    assert len(batch.images) == batch.num_samples == 4
    is_image = batch.tokens == prompts.image_pad_id
    assert is_image[:2].sum(axis=1).tolist() == [4, 4] and not is_image[2:].any()
    assert batch.loss_mask[is_image].sum() == 0 and (batch.turn_ids[is_image] == -1).all()
    assert batch.loss_mask[:2].sum(axis=1).tolist() == [len(ep.history[0].response_tokens)] * 2
    assert [im.keys for im in batch.images[:2]] == [prompts.process([picture(t)]).keys for t in range(2)]
    assert [im.num_images for im in batch.images] == [1, 1, 0, 0]
    picked = batch.select(np.array([1, 0]))
    assert picked.images[0].keys == batch.images[1].keys and "images" not in batch.arrays()


def test_a_cached_prefix_stops_where_the_pictures_differ(vl):
    _, _, prompts = vl
    pad = prompts.image_pad_id
    tokens = np.array([5, 9, pad, pad, 8, 9, pad, pad, 8, 7])
    assert cached_prefix_length(10, tokens, ("a", "b"), ("a", "b"), pad) == 10
    assert cached_prefix_length(10, tokens, ("a", "b"), ("a", "c"), pad) == 6
    assert cached_prefix_length(10, tokens, ("x", "b"), ("a", "b"), pad) == 2
    assert cached_prefix_length(7, tokens, ("a", "b"), ("a", "b"), pad) == 6  # never inside an image
    assert cached_prefix_length(10, tokens, ("a", "b"), ("a",), pad) == 6  # the cache held one picture only


@pytest.mark.slow  # ~6 s: compiles the env's step and its drawing
def test_an_image_format_env_batch_draws_every_observation():
    env = JaxEnvBatch(Sokoban(render_mode="image", dim_room=(6, 6), num_boxes=1, bank_size=4), 2)
    observations = env.reset([3, 4])
    assert observations == ["<image>", "<image>"]
    assert [im[0].shape for im in env.last_images] == [(168, 168, 3)] * 2
    first = env.last_images[0][0].copy()
    result = env.step([[env.action_lookup["up"]], []], np.array([True, False]))
    assert result.images[1] == () and result.images[0][0].shape == (168, 168, 3)
    assert result.images[0][0].dtype == np.uint8 and first.dtype == np.uint8
    text = JaxEnvBatch(Sokoban(dim_room=(6, 6), num_boxes=1, bank_size=4), 1)
    text.reset([3])
    assert text.last_images is None and text.step([[1]], np.array([True])).images is None
