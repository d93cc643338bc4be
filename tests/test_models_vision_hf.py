"""Qwen2.5-VL checkpoints: our export read back by transformers (same logits), both checkpoint naming layouts,
config.json layouts (the Hub's flat one, transformers 5's nested one) and their errors."""

import json

import jax
import numpy as np
import pytest
import transformers
from flax import nnx
from safetensors.numpy import load_file, save_file

import vision_testlib as V
from ragen_jax.models import CheckpointError, read_config
from ragen_jax.models.vision import (Qwen25VLModel, image_processor_for, load_vl_model, qwen2_5_vl_3b_config,
                                     read_vl_config, save_vl_pretrained, vl_config_from_hf, vl_config_to_hf)


@pytest.fixture(scope="module")
def config():
    return vl_config_from_hf(V.hf_vl_config(V.vl_tokenizer()).to_dict())


def _random_model(config, seed: int = 0) -> Qwen25VLModel:
    """A model with seeded random parameters (norm scales near 1, the rest N(0, 0.05)), drawn in numpy: an export's
    logits then span a few units."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Qwen25VLModel(config, rngs=nnx.Rngs(0))))
    rng = np.random.RandomState(seed)
    flat = [(path, var.replace(np.asarray(
        1.0 + 0.1 * rng.randn(*var.shape) if path[-1] == "weight" and len(var.shape) == 1
        else 0.05 * rng.randn(*var.shape), np.float32))) for path, var in nnx.to_flat_state(state)]
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_export_is_read_back_by_transformers_with_the_same_logits(config, tmp_path):
    tokenizer = V.vl_tokenizer()
    model = _random_model(config, seed=3)
    processor = image_processor_for(config.vision)
    save_vl_pretrained(model, tmp_path, tokenizer, image_processor=processor)
    ref = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(tmp_path).eval()
    prompts = V.parity_prompts(tokenizer, processor)
    for enc, got in zip(prompts.values(), V.Runner(model).logits(list(prompts.values()))):
        want = V.torch_logits(ref, enc, config.image_token_id)
        assert np.abs(want).max() > 0.5
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert read_vl_config(tmp_path) == config
    reloaded = load_vl_model(tmp_path)
    np.testing.assert_array_equal(np.asarray(reloaded.visual.patch_embed.proj.weight[...]),
                                  np.asarray(model.visual.patch_embed.proj.weight[...]))
    assert json.load(open(tmp_path / "preprocessor_config.json"))["merge_size"] == 2


def test_transformers_in_memory_names_load_too(tmp_path, tmp_path_factory):
    """A checkpoint whose tensors carry transformers 5's module names (model.visual.*, model.language_model.*)
    loads to the same weights as the Hub's names."""
    folder, _ = V.hf_vl_model(str(tmp_path_factory.mktemp("vl")))
    tensors = load_file(f"{folder}/model.safetensors")
    renamed = {("model.language_model." + k[6:] if k.startswith("model.") else
                "model.visual." + k[7:] if k.startswith("visual.") else k): v for k, v in tensors.items()}
    assert "model.visual.merger.mlp.2.weight" in renamed
    save_file(renamed, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(open(f"{folder}/config.json").read())
    a, b = nnx.state(load_vl_model(folder)), nnx.state(load_vl_model(tmp_path))
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_hub_style_flat_config_of_the_3b_checkpoint():
    """The flat layout Qwen/Qwen2.5-VL-3B-Instruct's config.json has (text keys at the top, rope_scaling of type
    mrope, older vision key names) reads as the 3B shapes."""
    hub = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"], "vocab_size": 151936,
           "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
           "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "max_position_embeddings": 128000, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
           "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 70,
           "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "image_token_id": 151655,
           "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
           "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                             "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                             "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                             "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
                             "temporal_patch_size": 2}}
    assert vl_config_from_hf(hub) == qwen2_5_vl_3b_config()
    nested = vl_config_to_hf(qwen2_5_vl_3b_config())
    assert vl_config_from_hf(nested) == qwen2_5_vl_3b_config()
    assert transformers.Qwen2_5_VLConfig(**nested).text_config.rope_parameters["mrope_section"] == [16, 24, 24]


def test_config_errors_name_the_problem(config, tmp_path):
    hf = vl_config_to_hf(config)
    with pytest.raises(ValueError, match="model_type"):
        vl_config_from_hf({**hf, "model_type": "qwen2"})
    bad = {**hf, "text_config": {**hf["text_config"], "rope_parameters": {"mrope_section": [2, 2, 2]}}}
    with pytest.raises(ValueError, match="summing to head_dim // 2 = 8"):
        vl_config_from_hf(bad)
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(CheckpointError, match="load it with ragen_jax.models.vision.load_vl_model"):
        read_config(tmp_path)  # the text models' loader names the one to use
    (tmp_path / "config.json").write_text(json.dumps({**hf, "vision_config": {"depth": 1}}))
    with pytest.raises(CheckpointError, match="lacks the required key 'hidden_size'"):
        read_vl_config(tmp_path)
    with pytest.raises(ValueError, match="out_hidden_size"):
        config.replace(vision=config.vision.__class__(**{**config.vision.__dict__, "out_hidden_size": 32}))
