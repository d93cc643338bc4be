"""save_pretrained writes folders that transformers loads with identical logits (single and sharded)."""

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from models_testlib import forward, hf_folder, torch_logits
from ragen_jax.models import load_model, make_tiny_model, save_pretrained
from ragen_jax.models.hf_files import TRAINING_RECORD, CheckpointError, read_training_record


def test_tiny_model_round_trip_through_transformers(tmp_path):
    model, tok = make_tiny_model(seed=3)
    save_pretrained(model, tmp_path, tok)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    text = tok.apply_chat_template([{"role": "user", "content": "Grid Map: \n#_P√O#\nGo"}]) + "<think>"
    ids = tok.encode(text)
    assert hf_tok.encode(text, add_special_tokens=False) == ids
    templated = hf_tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                           add_generation_prompt=True)
    assert templated == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    arr, pos = np.asarray([ids]), np.arange(len(ids))[None]
    got = forward(model, arr, pos)
    np.testing.assert_allclose(got, torch_logits(ref_model, arr), atol=1e-4, rtol=0)
    np.testing.assert_array_equal(forward(load_model(tmp_path), arr, pos), got)
    assert ref_model.config.eos_token_id == list(tok.eos_token_ids)


def test_sharded_checkpoint_round_trip(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf"))
    out = tmp_path_factory.mktemp("sharded")
    model = load_model(hf_folder("llama3", root))
    save_pretrained(model, out, max_shard_bytes=60_000)
    assert (out / "model.safetensors.index.json").exists()
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 2
    tokens, pos = np.arange(20)[None] % 256, np.arange(20)[None]
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_allclose(forward(load_model(out), tokens, pos), torch_logits(ref_model, tokens),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["llama_attention_bias", "qwen3_attention_bias"])
def test_attention_bias_round_trip_keeps_the_output_projection_bias(case, tmp_path_factory):
    """An `attention_bias` Llama/Qwen3 biases o_proj as well (transformers); the bias is loaded and written back."""
    root = str(tmp_path_factory.mktemp("hf"))
    out = tmp_path_factory.mktemp("bias")
    model = load_model(hf_folder(case, root))
    assert model.model.layers[0].self_attn.o_proj.bias is not None
    save_pretrained(model, out)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert ref_model.model.layers[0].self_attn.o_proj.bias is not None
    tokens, pos = np.arange(20)[None] * 7 % 256, np.arange(20)[None]
    np.testing.assert_allclose(forward(model, tokens, pos), torch_logits(ref_model, tokens), atol=1e-4, rtol=0)


def test_bfloat16_checkpoint_loads_and_exports_in_bfloat16(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hf"))
    out = tmp_path_factory.mktemp("bf16")
    model = load_model(hf_folder("qwen3", root), param_dtype="bfloat16")
    assert model.model.embed_tokens.embedding[...].dtype == jnp.bfloat16
    save_pretrained(model, out)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype="auto").eval()
    assert str(next(ref_model.parameters()).dtype) == "torch.bfloat16"
    reloaded = load_model(out)
    assert reloaded.config.param_dtype == "bfloat16" and reloaded.config.dtype == "bfloat16"
    tokens, pos = np.arange(16)[None], np.arange(16)[None]
    got = forward(reloaded, tokens, pos)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    ref = torch_logits(ref_model, tokens).astype(np.float32)
    assert np.abs(got - ref).max() < 0.1 * np.abs(ref).max()


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("first_shard_bytes, then_shard_bytes",
                         [(200_000, 2**31), (2**31, 200_000), (100_000, 200_000)])
def test_exporting_over_an_earlier_export_leaves_only_the_new_weights(first_shard_bytes, then_shard_bytes, tmp_path):
    """A second export into the same folder with another layout (single <-> sharded, fewer shards) removes the
    first one's weight files: both our loader and transformers then read the new weights, not stale ones."""
    old, tok = make_tiny_model(seed=1)
    new, _ = make_tiny_model(seed=2)
    save_pretrained(old, tmp_path, tok, max_shard_bytes=first_shard_bytes)
    save_pretrained(new, tmp_path, tok, max_shard_bytes=then_shard_bytes)
    weights = sorted(p.name for p in tmp_path.glob("model*.safetensors*"))
    if then_shard_bytes > 2**30:
        assert weights == ["model.safetensors"]
    else:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert weights == sorted(set(index["weight_map"].values())) + ["model.safetensors.index.json"]
    tokens, pos = np.arange(12)[None] * 5, np.arange(12)[None]
    want = forward(new, tokens, pos)
    np.testing.assert_array_equal(forward(load_model(tmp_path), tokens, pos), want)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    np.testing.assert_allclose(torch_logits(ref_model, tokens), want, atol=1e-4, rtol=0)


def test_a_folder_with_both_a_single_file_and_an_index_is_refused(tmp_path):
    """transformers would load model.safetensors, vLLM the index's shards: the loader names the ambiguity."""
    model, tok = make_tiny_model(seed=1)
    save_pretrained(model, tmp_path, tok, max_shard_bytes=200_000)
    first = sorted(json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"].values())[0]
    shutil.copy(tmp_path / first, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"both model\.safetensors and model\.safetensors\.index\.json.*Delete"):
        load_model(tmp_path)


def test_the_training_record_describes_only_the_weights_saved_with_it(tmp_path):
    """The trainer's export records its RL steps (eval of the folder then draws that step's validation keys); a
    later save without a record removes the old one, which described other weights."""
    model, tok = make_tiny_model(seed=1)
    save_pretrained(model, tmp_path, tok, training_record={"rl_steps": 12})
    assert read_training_record(tmp_path) == {"rl_steps": 12}
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path)  # an extra file transformers ignores
    save_pretrained(model, tmp_path, tok)
    assert not (tmp_path / TRAINING_RECORD).exists() and read_training_record(tmp_path) == {}
    (tmp_path / TRAINING_RECORD).write_text("{cut sho")
    assert read_training_record(tmp_path) == {}
