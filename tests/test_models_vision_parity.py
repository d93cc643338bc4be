"""Qwen2.5-VL logit and greedy-decode parity with transformers' PyTorch model (random weights saved by transformers),
on prompts with one image, several images of two sizes (window and full attention), and text only."""

import numpy as np
import pytest

import vision_testlib as V
from ragen_jax.models.vision import image_processor_for, load_vl_model

ATOL, RTOL = 1e-5, 1e-5  # both libraries sit ~5e-6 from a float64 run at these logits (|logit| < 4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder, ref = V.hf_vl_model(str(tmp_path_factory.mktemp("vl")))
    model = load_vl_model(folder)
    processor = image_processor_for(model.vl_config.vision)
    return ref, V.Runner(model), V.parity_prompts(V.vl_tokenizer(), processor), model.vl_config.image_token_id


def test_logits_match_transformers_on_one_several_and_no_images(setup):
    """One padded batch of the prompts against transformers' logits of each alone; other pixels in the same prompt
    change the logits after the image (the placeholders really carry the tower's output)."""
    ref, runner, prompts, image_id = setup
    ours = dict(zip(prompts, runner.logits(list(prompts.values()))))
    for name, enc in prompts.items():
        want = V.torch_logits(ref, enc, image_id)
        assert np.abs(want).max() > 1.0, name  # logits far from 0: the comparison has something to compare
        np.testing.assert_allclose(ours[name], want, atol=ATOL, rtol=RTOL, err_msg=name)
    assert np.abs(ours["one_image"][-1] - ours["other_pixels"][-1]).max() > 1e-2


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_greedy_decode_with_the_kv_cache_matches_transformers_generate(setup):
    """Prefill (M-RoPE positions) into our KV cache, then decode at slot + rope_delta: the same greedy tokens as
    transformers' generate, for a batch whose rows have different images and lengths."""
    ref, runner, prompts, image_id = setup
    encs = [prompts["several_images"], prompts["one_image"], prompts["text_only"]]
    ours = runner.greedy(encs, new_tokens=5)
    for enc, got in zip(encs, ours):
        np.testing.assert_array_equal(got, V.torch_greedy(ref, enc, image_id, 5))
