"""Greedy generation through our KV-cache path equals transformers' generate(do_sample=False)."""

import numpy as np
import pytest
import torch
import transformers

from models_testlib import greedy, hf_folder, padded_batch
from ragen_jax.models import load_model


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hf"))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("case", ["qwen2_untied", "qwen3", "llama3"])
def test_greedy_32_tokens_match_transformers(case, root):
    folder = hf_folder(case, root)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokens, mask, _ = padded_batch([12, 7, 3], 12, 256, seed=1)
    with torch.no_grad():
        ref = ref_model.generate(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask.astype(np.int64)),
                                 max_new_tokens=32, do_sample=False, pad_token_id=0, eos_token_id=None)
    ref = ref[:, tokens.shape[1]:].numpy()
    prompts = [row[m].tolist() for row, m in zip(tokens, mask)]
    got = greedy(load_model(folder), prompts, 32)
    assert len(set(ref[0].tolist())) > 1, "degenerate reference; the test would prove little"
    np.testing.assert_array_equal(got, ref)
