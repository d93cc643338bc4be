"""Bad checkpoint folders and options give errors that name the problem (file, tensor, expected value)."""

import copy
import json
import re
import shutil

import numpy as np
import pytest
import transformers
from safetensors.numpy import load_file, save_file

from ragen_jax.models import ModelConfig, load_model, load_tokenizer, make_tiny_model, save_pretrained
from ragen_jax.models import hf as hf_module
from ragen_jax.models.config import config_from_hf, sliding_layers
from ragen_jax.models.hf_files import CheckpointError


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    model, tok = make_tiny_model(seed=0, hidden_size=32, intermediate_size=64, head_dim=8, num_layers=1,
                                 tie_word_embeddings=False)
    save_pretrained(model, folder, tok)
    return folder


@pytest.fixture
def bad(good, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(good, folder)
    return folder


def _edit_config(folder, **changes):
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")


def test_missing_config(bad):
    (bad / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(bad)


def test_missing_weights(bad):
    (bad / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(bad)


def test_unsupported_model_type_names_the_supported_ones(bad):
    _edit_config(bad, model_type="gpt2")
    with pytest.raises(ValueError, match=r"'gpt2'.*qwen2, qwen3, llama"):
        load_model(bad)


def test_unsupported_architecture_in_model_config():
    with pytest.raises(ValueError, match="supported: qwen2, qwen3, llama"):
        ModelConfig("mistral", 16, 8, 16, 1, 2, 1, 4)


@pytest.fixture
def tensor_reads(monkeypatch):
    """Names of the tensors whose data load_model reads (headers and shapes are not data)."""
    reads: list[str] = []
    real_open = hf_module.safe_open

    class CountingHandle:
        def __init__(self, *args, **kwargs):
            self.inner = real_open(*args, **kwargs)

        def __enter__(self):
            self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def get_tensor(self, name):
            reads.append(name)
            return self.inner.get_tensor(name)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(hf_module, "safe_open", CountingHandle)
    return reads


def test_good_folder_loads_every_tensor_once(good, tensor_reads):
    model = load_model(good)
    assert sorted(tensor_reads) == sorted(load_file(good / "model.safetensors"))
    assert model.config.intermediate_size == 64


def test_missing_tensor_names_tensor_and_file_before_reading_any(bad, tensor_reads):
    tensors = load_file(bad / "model.safetensors")
    del tensors["model.norm.weight"]  # the last tensor loaded: found from the header, not after the others
    save_file(tensors, bad / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"'model\.norm\.weight' is missing from .*model\.safetensors"):
        load_model(bad)
    assert tensor_reads == []


def test_shape_mismatch_names_tensor_shapes_and_file_before_reading_any(bad, tensor_reads):
    _edit_config(bad, intermediate_size=48)
    with pytest.raises(CheckpointError) as info:
        load_model(bad)
    message = str(info.value)
    for name, found, expected in (("down_proj", "(32, 64)", "(32, 48)"), ("up_proj", "(64, 32)", "(48, 32)"),
                                  ("gate_proj", "(64, 32)", "(48, 32)")):
        assert (f"'model.layers.0.mlp.{name}.weight' in {bad / 'model.safetensors'} has shape {found}, "
                f"expected {expected}") in message
    assert tensor_reads == []


def test_wrong_tensor_in_the_last_shard_is_found_before_reading_any(tmp_path, tensor_reads):
    model, tok = make_tiny_model(seed=0, hidden_size=32, intermediate_size=64, head_dim=8, num_layers=2,
                                 tie_word_embeddings=False)
    folder = tmp_path / "sharded"
    save_pretrained(model, folder, tok, max_shard_bytes=40_000)
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    last_shard = sorted(set(index.values()))[-1]
    assert len(set(index.values())) > 2
    tensors = load_file(folder / last_shard)
    name = sorted(tensors)[-1]
    tensors[name] = np.zeros((3,) + tensors[name].shape[1:], tensors[name].dtype)
    save_file(tensors, folder / last_shard)
    with pytest.raises(CheckpointError, match=rf"'{name}' in .*{last_shard} has shape \(3,"):
        load_model(folder)
    assert tensor_reads == []


def test_truncated_shard_is_reported_before_reading_any(bad, tensor_reads):
    path = bad / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])  # an interrupted download
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated"):
        load_model(bad)
    path.write_bytes(b"\x00" * 4)
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a safetensors file"):
        load_model(bad)
    assert tensor_reads == []


def test_folder_without_tokenizer_files_is_an_error(bad):
    for f in bad.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            f.unlink()
    with pytest.raises(FileNotFoundError, match=r"No tokenizer files in .*tokenizer\.json"):
        load_tokenizer(bad)


def test_tokenizer_with_an_empty_vocabulary_is_an_error(bad):
    config = json.loads((bad / "tokenizer.json").read_text())
    config["model"]["vocab"], config["model"]["merges"], config["added_tokens"] = {}, [], []
    (bad / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"encodes .* to no ids"):
        load_tokenizer(bad)


def test_missing_shard_listed_in_index(bad):
    (bad / "model.safetensors").rename(bad / "model-00001-of-00001.safetensors")
    names = load_file(bad / "model-00001-of-00001.safetensors").keys()
    index = {"weight_map": {n: "model-00001-of-00002.safetensors" for n in names}}
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="model-00001-of-00002.safetensors"):
        load_model(bad)


def test_dtype_that_cannot_be_honoured(bad):
    with pytest.raises(ValueError, match="float16.*float32.*bfloat16"):
        load_model(bad, param_dtype="float16")
    tensors = load_file(bad / "model.safetensors")
    tensors["model.norm.weight"] = np.ones(32, np.int8)
    save_file(tensors, bad / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight.*I8"):
        load_model(bad)


def test_unsupported_features_are_refused():
    base = dict(model_type="llama", vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                num_attention_heads=2)
    with pytest.raises(ValueError, match="mlp_bias"):
        config_from_hf({**base, "mlp_bias": True})
    with pytest.raises(ValueError, match="rope_scaling type 'yarn'"):
        config_from_hf({**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="hidden_act"):
        config_from_hf({**base, "hidden_act": "gelu"})
    # before: a KeyError at the first forward pass, long after the load
    with pytest.raises(ValueError, match="rope_scaling of type 'llama3' lacks low_freq_factor, "
                                         "original_max_position_embeddings"):
        config_from_hf({**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}})
    with pytest.raises(ValueError, match="rope_scaling of type 'linear' lacks factor"):
        config_from_hf({**base, "rope_scaling": {"type": "linear"}})


def test_hf_config_mapping_defaults_and_legacy_keys():
    cfg = config_from_hf(dict(model_type="qwen2", vocab_size=10, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              rope_theta=1e6, torch_dtype="bfloat16", tie_word_embeddings=True))
    assert (cfg.head_dim, cfg.rope_theta, cfg.attention_bias, cfg.qk_norm) == (8, 1e6, True, False)
    assert ((cfg.param_dtype, cfg.dtype, cfg.tie_word_embeddings, cfg.rope_scaling)
            == ("bfloat16", "bfloat16", True, None))
    llama = config_from_hf(dict(model_type="llama", vocab_size=10, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4, rope_parameters={
                                    "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
                           dtype="float32")
    assert llama.num_kv_heads == 4 and llama.rope_theta == 5e5 and llama.rope_params["rope_type"] == "llama3"
    assert hash(llama) == hash(llama.replace())


_LINEAR = {"rope_type": "linear", "factor": 4.0}


@pytest.mark.parametrize("rope", [
    dict(rope_theta=1e6),  # transformers 4: theta at the top level, no scaling
    dict(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}),  # legacy "type"
    dict(rope_parameters={"rope_theta": 1e6, "rope_type": "default"}),  # transformers 5
    dict(rope_parameters={"rope_theta": 1e6, **_LINEAR}),
    # a transformers-5 config.json with a legacy rope_scaling added by hand (as Qwen2.5's README says for YaRN):
    # transformers reads rope_scaling alone, with the top-level theta or its default
    dict(rope_parameters={"rope_theta": 1e6, "rope_type": "default"}, rope_scaling={"type": "linear", "factor": 4.0}),
    dict(rope_parameters={"rope_theta": 1e6, "rope_type": "default"}, rope_scaling=_LINEAR, rope_theta=5e5),
])
def test_rope_settings_are_read_as_transformers_reads_them(rope):
    import transformers

    base = dict(vocab_size=10, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    ours = config_from_hf(dict(model_type="qwen2", **base, **copy.deepcopy(rope)))
    ref = transformers.Qwen2Config(**base, **copy.deepcopy(rope)).rope_parameters  # it edits the dicts it gets
    assert ours.rope_theta == ref["rope_theta"]
    assert ours.rope_params.get("rope_type", "default") == ref["rope_type"]
    assert ours.rope_params.get("factor") == (ref["factor"] if ref["rope_type"] != "default" else None)


@pytest.mark.parametrize("where", ["top", "rope_parameters"])
def test_scaled_rope_over_part_of_head_dim_is_refused_and_plain_rope_ignores_the_factor(where):
    """transformers' Qwen2/Llama fail on a scaled RoPE with partial_rotary_factor < 1 (its frequencies cover part of
    head_dim) and ignore the factor for plain RoPE; we computed full-width scaled RoPE without a word."""
    base = dict(model_type="qwen2", vocab_size=10, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4)

    def config(rope):
        if where == "top":
            return dict(base, rope_parameters=rope, partial_rotary_factor=0.5)
        return dict(base, rope_parameters={**rope, "partial_rotary_factor": 0.5})

    with pytest.raises(ValueError, match=r"'linear' RoPE scaling with partial_rotary_factor=0.5.*set it to 1.0"):
        config_from_hf(config({"rope_theta": 1e6, **_LINEAR}))
    plain = config_from_hf(config({"rope_theta": 1e6, "rope_type": "default"}))
    assert plain.rope_scaling is None and plain.rope_theta == 1e6


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "llama"])
def test_head_dim_defaults_as_transformers_when_config_json_omits_it(model_type):
    import transformers

    base = dict(vocab_size=10, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    ref = transformers.AutoConfig.for_model(model_type, **base)
    want = getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads  # Qwen3's is 128
    assert config_from_hf(dict(model_type=model_type, **base)).head_dim == want


@pytest.mark.parametrize("text", ['{"model_type": "qwen2", ', "[1, 2]"])
def test_a_config_json_that_is_not_a_json_object_names_the_file(bad, text):
    (bad / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=r"config\.json (is not valid JSON|holds a list)"):
        hf_module.read_config(bad)


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
@pytest.mark.parametrize("settings", [
    dict(use_sliding_window=True, sliding_window=64, max_window_layers=3),  # every layer below 3: none slides
    dict(use_sliding_window=True, sliding_window=64, max_window_layers=1),
    dict(use_sliding_window=False, sliding_window=64, max_window_layers=0),
    dict(use_sliding_window=True, sliding_window=None, max_window_layers=0),
    dict(use_sliding_window=True, sliding_window=64,
         layer_types=["full_attention", "sliding_attention", "full_attention"]),
])
def test_sliding_window_is_refused_only_where_a_layer_slides_as_transformers_reads_it(model_type, settings):
    """Before: any use_sliding_window=true was refused, although transformers slides no layer below
    max_window_layers (a config.json with max_window_layers = num_hidden_layers loads as full attention)."""
    hf = dict(model_type=model_type, vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
              num_attention_heads=2, max_position_embeddings=512, **settings)
    ref = transformers.AutoConfig.for_model(**hf)
    expected = [i for i, kind in enumerate(ref.layer_types) if kind == "sliding_attention" and ref.sliding_window]
    assert sliding_layers(hf) == expected
    if expected:
        with pytest.raises(ValueError, match=rf"layers {re.escape(str(expected))} attend only to that many past "
                                             "tokens.*use_sliding_window to false"):
            config_from_hf(hf)
    else:
        assert config_from_hf(hf).num_layers == 3


def test_a_window_no_position_can_pass_is_full_attention():
    hf = dict(model_type="qwen2", vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=2, max_position_embeddings=512, use_sliding_window=True, sliding_window=512,
              max_window_layers=0)
    assert sliding_layers(hf) == [] and config_from_hf(hf).num_layers == 2


@pytest.fixture
def every_read(tensor_reads, monkeypatch):
    """tensor_reads, plus the slices read to compare a tied checkpoint's head with its embedding."""
    handle = hf_module.safe_open

    class SliceCounting(handle):
        def get_slice(self, name):
            tensor_reads.append(name)
            return self.inner.get_slice(name)

    monkeypatch.setattr(hf_module, "safe_open", SliceCounting)
    return tensor_reads


def test_from_pretrained_refuses_a_folder_without_tokenizer_before_reading_any_tensor(bad, every_read):
    for f in bad.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            f.unlink()
    with pytest.raises(FileNotFoundError, match=r"No tokenizer files in "):
        hf_module.from_pretrained(bad)
    assert every_read == []


@pytest.fixture
def tied_with_head(tmp_path):
    """A checkpoint whose config ties the embeddings but which holds its own (different) lm_head.weight."""
    model, tok = make_tiny_model(seed=0, hidden_size=32, intermediate_size=64, head_dim=8, num_layers=1,
                                 tie_word_embeddings=False)
    folder = tmp_path / "tied"
    save_pretrained(model, folder, tok)
    _edit_config(folder, tie_word_embeddings=True)
    return folder


def test_a_tied_checkpoint_with_a_wrong_tensor_is_refused_before_its_head_is_compared(tied_with_head, every_read):
    tensors = load_file(tied_with_head / "model.safetensors")
    tensors["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"][:48]
    del tensors["model.norm.weight"]
    save_file(tensors, tied_with_head / "model.safetensors")
    with pytest.raises(CheckpointError) as info:
        load_model(tied_with_head)
    assert "'model.norm.weight' is missing" in str(info.value) and "has shape (48, 32)" in str(info.value)
    assert every_read == []  # neither a weight nor the head / embedding rows the untie check compares


def test_a_tied_checkpoint_with_its_own_head_still_loads_untied(tied_with_head, every_read):
    model = load_model(tied_with_head)
    assert not model.config.tie_word_embeddings
    assert "lm_head.weight" in every_read
