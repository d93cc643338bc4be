"""Shared helpers for the model tests: transformers checkpoints with random weights, padded batches, greedy decode."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

from ragen_jax.models import CausalLM, init_cache

KW = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
          vocab_size=256, intermediate_size=128, pad_token_id=0, bos_token_id=None, eos_token_id=None)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
CASES = {
    "qwen2_tied": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
    "qwen2_untied": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=False)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(head_dim=32, tie_word_embeddings=True)),
    "llama3": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
               dict(rope_scaling=LLAMA3, rope_theta=500000.0, tie_word_embeddings=False)),
    # attention_bias: transformers' Llama and Qwen3 then bias o_proj too (Qwen2's never has one)
    "llama_attention_bias": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(attention_bias=True)),
    "qwen3_attention_bias": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
                             dict(head_dim=32, attention_bias=True)),
}


@functools.lru_cache(maxsize=None)
def hf_folder(case: str, root: str) -> str:
    """Saves a transformers model with random (non-trivial) weights; the weights are seeded."""
    cfg_cls, model_cls, extra = CASES[case]
    torch.manual_seed(0)
    model = model_cls(cfg_cls(**KW, **extra)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    folder = f"{root}/{case}"
    model.save_pretrained(folder)
    return folder


def padded_batch(lengths, total, vocab, seed=0):
    """Left-padded tokens/mask/positions [B, total] as HF generate expects."""
    rng = np.random.RandomState(seed)
    tokens = rng.randint(1, vocab, (len(lengths), total))
    mask = np.arange(total)[None, :] >= (total - np.asarray(lengths))[:, None]
    tokens = np.where(mask, tokens, 0)
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    return tokens, mask, positions




def greedy(model: CausalLM, prompts: list[list[int]], new_tokens: int) -> np.ndarray:
    """Greedy decode through the contract's cache path: right-aligned rows, per-row cache_index [B]."""
    graphdef, state = nnx.split(model)
    b, p = len(prompts), max(map(len, prompts))
    lengths = jnp.asarray([len(x) for x in prompts], jnp.int32)
    tokens = jnp.asarray([x + [0] * (p - len(x)) for x in prompts], jnp.int32)

    @jax.jit
    def step(state, cache, tokens, positions, index):
        logits, cache = nnx.merge(graphdef, state)(tokens, positions, cache=cache, cache_index=index)
        return logits, cache

    cache = init_cache(model.config, b, p + new_tokens)
    positions = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
    logits, cache = step(state, cache, tokens, positions, jnp.zeros((b,), jnp.int32))
    nxt = jnp.argmax(logits[jnp.arange(b), lengths - 1], -1)
    out = [nxt]
    for i in range(new_tokens - 1):
        pos = (lengths + i)[:, None]
        logits, cache = step(state, cache, nxt[:, None], pos, lengths + i)
        nxt = jnp.argmax(logits[:, 0], -1)
        out.append(nxt)
    return np.asarray(jnp.stack(out, 1))


def forward(model, tokens, positions, attention_mask=None):
    """Jitted full forward (no cache) -> logits [B, T, V] as numpy."""
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda s, t, p, m: nnx.merge(graphdef, s)(t, p, attention_mask=m)[0])
    mask = None if attention_mask is None else jnp.asarray(attention_mask)
    return np.asarray(fn(state, jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), mask))


def torch_logits(model, tokens, mask=None, positions=None):
    """transformers forward -> logits as numpy."""
    kwargs = {"input_ids": torch.tensor(np.asarray(tokens))}
    if mask is not None:
        kwargs["attention_mask"] = torch.tensor(np.asarray(mask).astype(np.int64))
    if positions is not None:
        kwargs["position_ids"] = torch.tensor(np.asarray(positions))
    with torch.no_grad():
        return model(**kwargs).logits.float().numpy()
