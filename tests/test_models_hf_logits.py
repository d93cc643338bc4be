"""Logit parity with transformers' PyTorch models (random weights saved by transformers) on a padded batch."""

import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from safetensors.numpy import load_file, save_file

from models_testlib import CASES, forward, hf_folder, padded_batch, torch_logits
from ragen_jax.models import ValueModel, load_model, save_pretrained
from ragen_jax.models import hf as hf_module


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hf"))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers_on_left_padded_batch(case, root):
    folder = hf_folder(case, root)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokens, mask, positions = padded_batch([24, 17, 5], 24, 256)
    ref = torch_logits(ref_model, tokens, mask, positions)
    got = forward(load_model(folder), tokens, positions, mask)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[mask], ref[mask], atol=1e-4, rtol=0)


@pytest.mark.parametrize("differs", [True, False])
def test_tied_config_with_its_own_lm_head_loads_as_transformers_does(differs, root, tmp_path, monkeypatch):
    """config.json ties the embeddings yet the checkpoint holds an lm_head.weight: transformers uses that head
    untied when it differs from the embedding (and ties them when equal); so do we. Compared 10 rows at a time,
    the one differing row is in the last, shorter block."""
    monkeypatch.setattr(hf_module, "_COMPARE_BYTES", 10 * 64 * 4)
    shutil.copytree(hf_folder("qwen2_tied", root), tmp_path, dirs_exist_ok=True)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    if differs:
        tensors["lm_head.weight"][-1] += 0.5
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokens, mask, positions = padded_batch([12, 5], 12, 256, seed=2)
    model = load_model(tmp_path)
    assert model.config.tie_word_embeddings is not differs
    assert hf_module.read_config(tmp_path) == model.config  # what the memory planner sees
    np.testing.assert_allclose(forward(model, tokens, positions, mask)[mask],
                               torch_logits(ref_model, tokens, mask, positions)[mask], atol=1e-4, rtol=0)


def test_right_padding_gives_the_same_logits_for_real_tokens(root):
    model = load_model(hf_folder("qwen3", root))
    left, lmask, lpos = padded_batch([20, 9], 20, 256, seed=4)
    right = np.stack([np.roll(row, -int((~m).sum())) for row, m in zip(left, lmask)])
    rmask = np.stack([np.roll(m, -int((~m).sum())) for m in lmask])
    rpos = np.maximum(np.cumsum(rmask, 1) - 1, 0)
    got_left = forward(model, left, lpos, lmask)
    got_right = forward(model, right, rpos, rmask)
    np.testing.assert_allclose(got_left[lmask], got_right[rmask], atol=1e-5, rtol=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_value_model_loads_backbone_and_exports_as_token_classifier(tmp_path, root):
    folder = hf_folder("qwen2_untied", root)
    critic = load_model(folder, model_cls=ValueModel)
    lm = load_model(folder)
    np.testing.assert_array_equal(np.asarray(critic.model.norm.weight[...]), np.asarray(lm.model.norm.weight[...]))
    tokens, mask, positions = padded_batch([10, 6], 10, 256)
    values = critic(jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), attention_mask=jnp.asarray(mask))
    assert values.shape == (2, 10) and values.dtype == jnp.float32
    save_pretrained(critic, tmp_path)
    ref_model = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    ref = torch_logits(ref_model, tokens, mask, positions)[..., 0]
    np.testing.assert_allclose(np.asarray(values)[mask], ref[mask], atol=1e-4, rtol=0)
    reloaded = load_model(tmp_path, model_cls=ValueModel)
    np.testing.assert_array_equal(np.asarray(reloaded.score.kernel[...]), np.asarray(critic.score.kernel[...]))


def test_a_critic_from_critic_path_takes_the_model_dtypes_as_the_policy_does(root):
    """model.param_dtype / dtype apply to a critic loaded from critic_path too (the memory plan counts it so)."""
    from configs.bandit import get_config
    from ragen_jax.trainer.setup import make_critic

    model_cfg = get_config("tiny").model
    model_cfg.critic_path = hf_folder("qwen2_untied", root)  # a float32 checkpoint
    model_cfg.param_dtype, model_cfg.dtype = "bfloat16", "float32"
    critic = make_critic(model_cfg, policy=None)
    assert isinstance(critic, ValueModel)
    assert (critic.config.param_dtype, critic.config.dtype) == ("bfloat16", "float32")
    assert critic.model.embed_tokens.embedding[...].dtype == jnp.bfloat16
