"""Host-side image bookkeeping against transformers' own functions: patch positions and attention windows of the
vision tower, M-RoPE positions and rope_deltas of prompts, placeholder expansion and its errors."""

import types

import numpy as np
import pytest
import torch
import transformers
from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

import vision_testlib as V
from ragen_jax.models.vision import (expand_image_placeholders, place_image_embeds, rope_index, vision_inputs,
                                     vl_config_from_hf)
from ragen_jax.models.vision.processor import content_with_images

GRIDS = np.array([[1, 4, 6], [1, 8, 8], [1, 2, 2], [1, 6, 10]])


@pytest.fixture(scope="module")
def configs():
    hf = V.hf_vl_config(V.vl_tokenizer())
    return hf, vl_config_from_hf(hf.to_dict())


def test_patch_positions_and_windows_are_transformers(configs):
    """Each patch's (row, col) is transformers' rotary position; patches share a window exactly when transformers
    puts them in the same window-attention run, and a frame when they are in the same image."""
    hf, config = configs
    vision = config.vision
    inputs = vision_inputs(np.zeros((int(GRIDS.prod(1).sum()), vision.patch_features), np.float32), GRIDS, vision)
    assert inputs.pixels.shape[0] == 1  # mixed grids: one group
    np.testing.assert_array_equal(inputs.positions[0], get_vision_position_ids(torch.tensor(GRIDS), 2).numpy())
    order, bounds = get_vision_window_index(torch.tensor(GRIDS), 2, vision.window_size, vision.patch_size)
    unit = vision.merge_unit
    theirs = np.empty(int(GRIDS.prod(1).sum()) // unit, np.int64)
    bounds = bounds.numpy() // unit
    for w, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        theirs[order.numpy()[lo:hi]] = w
    ours = inputs.windows[0][::unit]
    assert (inputs.windows[0].reshape(-1, unit) == ours[:, None]).all()  # a merge unit never straddles windows
    assert len(np.unique(ours)) == len(np.unique(theirs)) > len(GRIDS)
    assert all(len(np.unique(theirs[ours == w])) == 1 for w in np.unique(ours))
    np.testing.assert_array_equal(inputs.frames[0], np.repeat(np.arange(len(GRIDS)), GRIDS.prod(1)))


def test_images_of_one_grid_are_separate_groups(configs):
    _, config = configs
    grid = np.array([[1, 4, 6]] * 3)
    inputs = vision_inputs(np.zeros((72, config.vision.patch_features), np.float32), grid, config.vision)
    assert inputs.pixels.shape == (3, 24, config.vision.patch_features) and inputs.windows.shape == (3, 24)


def _random_prompts(rng, config, rows: int, length: int):
    """Right-padded rows of text tokens and 0-2 images each (a start token, the image's placeholders, an end
    token), and the grids in row order."""
    tokens, mask, grids = np.full((rows, length), 7), np.zeros((rows, length), bool), []
    for b in range(rows):
        row = list(rng.randint(10, 900, rng.randint(1, 5)))
        for _ in range(rng.randint(0, 3)):
            grid = GRIDS[rng.randint(len(GRIDS))]
            grids.append(grid)
            row += [config.vision_start_token_id] + [config.image_token_id] * (int(grid.prod()) // 4)
            row += [config.vision_end_token_id] + list(rng.randint(10, 900, rng.randint(0, 4)))
        tokens[b, :len(row)], mask[b, :len(row)] = row, True
    return tokens, mask, np.array(grids).reshape(-1, 3)


def test_rope_index_is_transformers_get_rope_index(configs):
    hf, config = configs
    stub = types.SimpleNamespace(config=hf)
    stub.get_vision_position_ids = lambda *a, **k: transformers.Qwen2_5_VLModel.get_vision_position_ids(stub, *a, **k)
    rng = np.random.RandomState(0)
    for _ in range(3):
        tokens, mask, grids = _random_prompts(rng, config, rows=4, length=90)
        want, want_deltas = transformers.Qwen2_5_VLModel.get_rope_index(
            stub, torch.tensor(tokens), torch.tensor((tokens == config.image_token_id).astype(np.int64)),
            image_grid_thw=torch.tensor(grids) if len(grids) else None, attention_mask=torch.tensor(mask))
        got, deltas = rope_index(tokens, grids, config, mask)
        np.testing.assert_array_equal(got[:, mask], want.numpy()[:, mask])
        np.testing.assert_array_equal(deltas, want_deltas.numpy()[:, 0])


def test_rope_index_of_a_later_turn_continues_the_row(configs):
    """Positions of a prompt cut in two (the second part a later turn at offset first slot + deltas so far) are those
    of the whole, and the deltas add up."""
    _, config = configs
    rng = np.random.RandomState(1)
    tokens, _, grids = _random_prompts(rng, config, rows=1, length=60)
    while len(grids) < 2:
        tokens, _, grids = _random_prompts(rng, config, rows=1, length=60)
    whole, whole_delta = rope_index(tokens, grids, config)
    cut = int(np.flatnonzero(tokens[0] == config.vision_end_token_id)[0]) + 1  # after the first image
    first, first_delta = rope_index(tokens[:, :cut], grids[:1], config)
    second, second_delta = rope_index(tokens[:, cut:], grids[1:], config, offsets=cut + first_delta)
    assert first_delta[0] < 0  # the image's tokens took fewer positions than slots
    np.testing.assert_array_equal(np.concatenate([first, second], axis=2), whole)
    np.testing.assert_array_equal(first_delta + second_delta, whole_delta)


def test_expand_image_placeholders_and_its_errors():
    grid = np.array([[1, 4, 6], [1, 2, 2]])
    assert expand_image_placeholders([5, 9, 6, 9, 6], grid, 9, 2) == [5] + [9] * 6 + [6, 9, 6]
    with pytest.raises(ValueError, match="2 images were given"):
        expand_image_placeholders([5, 9, 6], grid, 9, 2)


def test_rope_index_refuses_placeholders_that_do_not_fit_the_grids(configs):
    _, config = configs
    image = config.image_token_id
    with pytest.raises(ValueError, match="consecutive image placeholder"):
        rope_index(np.array([[1, image, image, 2]]), np.array([[1, 4, 6]]), config)
    with pytest.raises(ValueError, match="more image"):
        rope_index(np.array([[1, 2]]), np.array([[1, 2, 2]]), config)


def test_place_image_embeds_refuses_a_count_mismatch():
    embeds = np.zeros((1, 4, 3), np.float32)
    with pytest.raises(ValueError, match="2 image placeholder tokens but the vision tower gave 3"):
        place_image_embeds(embeds, np.array([[0, 1, 1, 0]], bool), np.ones((3, 3), np.float32))
    out = np.asarray(place_image_embeds(embeds, np.array([[0, 1, 1, 0]], bool), np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(out[0], [[0, 0, 0], [0, 1, 2], [3, 4, 5], [0, 0, 0]])


def test_content_with_images_splits_at_the_markers():
    assert content_with_images("no image", "<image>") == "no image"
    assert content_with_images("Turn 1:\n<image>\nLeft?", "<image>") == [
        {"type": "text", "text": "Turn 1:\n"}, {"type": "image"}, {"type": "text", "text": "\nLeft?"}]
