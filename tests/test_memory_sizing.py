"""Sizing a GPU before the weights are downloaded: the planner reads a model's config.json alone, or the published
shapes of a named hub id, and `--print_config` says for an 80 GB and a 141 GB card whether the plan fits, with
the numbers."""

from __future__ import annotations

import json

import jax
import pytest

from configs.base import get_base_config
from ragen_jax.models import CausalLM, config_to_hf, read_config
from ragen_jax.models.known import KNOWN_HF_CONFIGS, known_config
from ragen_jax.sharding.memory import GiB, MemoryPlan, abstract_split
from ragen_jax.sharding.planning import CARD_BYTES, card_verdicts, plan_model_config, plan_report

# parameters of each checkpoint as its model card / safetensors index counts them (tied heads counted once)
PUBLISHED_PARAMS = {"Qwen/Qwen2.5-0.5B-Instruct": 494_032_768, "Qwen/Qwen2.5-1.5B-Instruct": 1_543_714_304,
                    "Qwen/Qwen2.5-3B-Instruct": 3_085_938_688, "Qwen/Qwen2.5-7B-Instruct": 7_615_616_512,
                    "Qwen/Qwen3-8B": 8_190_735_360, "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
                    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248}


def _param_count(c) -> int:
    """Parameters of a decoder from its config: embedding (and an untied head), per layer q/k/v/o (biases, q/k
    norms), gate/up/down and two norms, and the final norm."""
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    attention = c.hidden_size * (q + 2 * kv) + q * c.hidden_size + (q + 2 * kv) * c.attention_bias + (
        c.hidden_size * c.o_proj_bias) + 2 * c.head_dim * c.qk_norm
    layer = attention + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
    return c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2) + c.num_layers * layer + c.hidden_size


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMS))
def test_known_shapes_give_the_published_parameter_counts(hub_id):
    assert _param_count(known_config(hub_id)) == PUBLISHED_PARAMS[hub_id]


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-1B-Instruct"])
def test_the_count_is_the_models_own(hub_id):
    """The formula above against the model built from the shapes (two layers: qwen2 untied with biases, qwen3 with
    q/k norms, llama tied)."""
    config = known_config(hub_id).replace(num_layers=2)
    _, trainable, frozen = abstract_split(CausalLM, config)
    assert sum(x.size for x in jax.tree.leaves((trainable, frozen))) == _param_count(config)


def test_every_hub_id_the_configs_name_has_known_shapes():
    from configs.base import MODEL_PATHS

    for hub_id in MODEL_PATHS.values():
        assert hub_id in KNOWN_HF_CONFIGS
    assert known_config("qwen/qwen2.5-3b") == known_config("Qwen/Qwen2.5-3B-Instruct")  # the base model's shapes
    assert known_config("someone/unknown-7b") is None


def _model_cfg(path: str):
    cfg = get_base_config()
    cfg.model.path = path
    return cfg


def test_a_folder_holding_config_json_alone_plans(tmp_path):
    """No weights, no tokenizer: the plan needs config.json only."""
    config = known_config("Qwen/Qwen2.5-0.5B-Instruct")
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(config)))
    assert read_config(tmp_path) == config
    planned, source = plan_model_config(_model_cfg(str(tmp_path)).model)
    assert planned == config and source == ""


def test_a_hub_id_not_downloaded_plans_from_its_published_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: the id is not there
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = _model_cfg("Qwen/Qwen2.5-7B-Instruct")
    planned, source = plan_model_config(cfg.model)
    assert planned == known_config("Qwen/Qwen2.5-7B-Instruct") and "published config.json" in source
    cfg.model.path = "someone/not-a-known-model"
    with pytest.raises(FileNotFoundError, match="not-a-known-model"):
        plan_model_config(cfg.model)


def _plan(peak_gib: float) -> MemoryPlan:
    return MemoryPlan(params=int(peak_gib * GiB), grads=0, optimizer=0, activations=0, batch=0, sampling_params=0,
                      kv_cache=0, sampling_activations=0, mesh_shape=(1, 1, 1))


def test_card_verdicts_refuse_with_the_numbers():
    """jax's allocator takes 75% of a card by default and the plan must fit 90% of that: 53.4 GiB of an H100's
    79.1, 95.2 GiB of an H200's 141.0."""
    h100, h200 = card_verdicts(_plan(60.0), fraction=0.75)
    assert h100.startswith("  H100 80GB: REFUSED: needs 60.00 GiB per device, 53.40 GiB usable")
    assert h200.startswith("  H200 141GB: fits: 60.00 GiB per device of 95.18 GiB usable")
    assert all("REFUSED" in line for line in card_verdicts(_plan(100.0), fraction=0.75))
    assert not any("REFUSED" in line for line in card_verdicts(_plan(60.0), fraction=0.9))  # 64.1 usable
    assert 0.9 * 0.75 * CARD_BYTES["H100 80GB"] / GiB == pytest.approx(53.40, abs=0.005)


def test_the_plan_report_says_where_the_shapes_came_from_and_judges_both_cards():
    """Four layers of the 7B at RAGEN's sizes on one GPU (61 GiB; XLA:GPU compiles its update into 60.9): past the
    H100's 53.4 GiB, within the H200's 95.2."""
    cfg = get_base_config()
    cfg.algo.use_critic = cfg.algo.use_kl_loss = cfg.algo.use_kl_in_reward = False
    cfg.val.every, cfg.val.at_start = 0, False
    config = known_config("Qwen/Qwen2.5-7B-Instruct", param_dtype="bfloat16").replace(num_layers=4)
    text = plan_report(cfg, config, {"data": 1, "fsdp": 1, "tensor": 1}, " (from somewhere)")
    assert "(this backend reports no memory limit) (from somewhere):" in text
    assert "H100 80GB: REFUSED: needs" in text and "H200 141GB: fits:" in text, text


@pytest.mark.slow
def test_print_config_of_the_full_size_config_without_its_weights_refuses_both_cards(tmp_path, monkeypatch):
    """configs/base.py's 3B PPO run on one GPU (policy, critic, reference, AdamW, 8 x 3600-token micro-batches)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = get_base_config()
    model_config, source = plan_model_config(cfg.model)
    text = plan_report(cfg, model_config, {"data": 1, "fsdp": 1, "tensor": 1}, source)
    assert "shapes of Qwen/Qwen2.5-3B-Instruct's published config.json" in text
    assert "H100 80GB: REFUSED: needs" in text and "H200 141GB: REFUSED: needs" in text
    assert "memory plan: not available" not in text
