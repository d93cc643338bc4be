"""Tiny Qwen2.5-VL fixtures built in-process: the tiny tokenizer with Qwen's vision tokens and a VL chat template,
a transformers model with seeded random weights saved to a folder, prompts through transformers' image processor,
and jitted forward / greedy-decode helpers for our model."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx
from transformers import PreTrainedTokenizerFast

from ragen_jax.models import init_cache
from ragen_jax.models.build_tiny_tokenizer import ASSET_DIR
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.vision import (VL_CHAT_TEMPLATE, decode_positions, encode_vl_prompt, rope_index,
                                     vision_inputs)
from ragen_jax.models.vision.processor import VISION_TOKENS

# window_size 56 px = 2 x 2 merged tokens per window: the test images span several windows; block 1 attends fully
VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
TEXT = dict(vocab_size=1152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=None,
            eos_token_id=None, pad_token_id=0,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0})


def vl_tokenizer() -> Tokenizer:
    """The tiny tokenizer with <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|> and VL_CHAT_TEMPLATE."""
    hf = PreTrainedTokenizerFast.from_pretrained(ASSET_DIR)
    hf.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)}, replace_extra_special_tokens=False)
    hf.chat_template = VL_CHAT_TEMPLATE
    return Tokenizer(hf)


def hf_vl_config(tokenizer: Tokenizer, **text: object) -> transformers.Qwen2_5_VLConfig:
    ids = {name: tokenizer.token_id(token) for name, token in
           (("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
            ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"))}
    return transformers.Qwen2_5_VLConfig(text_config={**TEXT, **text}, vision_config=dict(VISION), **ids)


@functools.lru_cache(maxsize=None)
def hf_vl_model(root: str, tie_word_embeddings: bool = False):
    """(folder, model): a transformers Qwen2.5-VL with seeded random weights (norm scales near 1, the rest N(0, 0.1),
    the vision tower's N(0, 0.05), so the logits span a few units) saved into a folder under root."""
    cfg = hf_vl_config(vl_tokenizer())
    cfg.tie_word_embeddings = tie_word_embeddings
    torch.manual_seed(0)
    model = transformers.Qwen2_5_VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_q" in name:
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.05 if name.startswith("model.visual") else 0.1)
    folder = f"{root}/vl_{'tied' if tie_word_embeddings else 'untied'}"
    model.save_pretrained(folder)
    return folder, model


def images(seed: int = 0) -> list[np.ndarray]:
    """Two RGB test images of different sizes: 56 x 84 (4 x 6 patches, 2 windows) and 112 x 112 (4 windows)."""
    rng = np.random.RandomState(seed)
    return [rng.randint(0, 256, (56, 84, 3)).astype(np.uint8), rng.randint(0, 256, (112, 112, 3)).astype(np.uint8)]


def parity_prompts(tokenizer, image_processor) -> dict[str, dict]:
    """The parity prompts: one image, three images of two sizes, text only, and the first with other pixels (the
    same shapes in every test, so their programs compile once per session)."""
    one, two = images()
    prompts = {
        "one_image": prompt(tokenizer, image_processor, [None, "Where is the box?"], [one]),
        "several_images": prompt(tokenizer, image_processor, ["Compare", None, "with", None, "and", None],
                                 [one, two, one]),
        "text_only": prompt(tokenizer, image_processor, ["Push the box onto the target."], []),
    }
    first = prompts["one_image"]
    prompts["other_pixels"] = dict(first, pixel_values=first["pixel_values"][::-1].copy())
    return prompts


def prompt(tokenizer, image_processor, parts, imgs):
    """encode_vl_prompt of one user message whose content items are `parts` (text strings, or None for an image)."""
    content = [{"type": "image"} if p is None else {"type": "text", "text": p} for p in parts]
    return encode_vl_prompt(tokenizer, [{"role": "user", "content": content}], imgs, image_processor)


def torch_kwargs(enc: dict, image_token_id: int) -> dict:
    """transformers inputs of one encoded prompt (batch of 1)."""
    tokens = enc["tokens"][None].astype(np.int64)
    kw = {"input_ids": torch.tensor(tokens)}
    if len(enc["image_grid_thw"]):
        kw.update(pixel_values=torch.tensor(enc["pixel_values"]), image_grid_thw=torch.tensor(enc["image_grid_thw"]),
                  mm_token_type_ids=torch.tensor((tokens == image_token_id).astype(np.int64)))
    return kw


def torch_logits(ref, enc: dict, image_token_id: int) -> np.ndarray:
    with torch.no_grad():
        return ref(**torch_kwargs(enc, image_token_id)).logits[0].float().numpy()


def torch_greedy(ref, enc: dict, image_token_id: int, new_tokens: int) -> np.ndarray:
    kw = torch_kwargs(enc, image_token_id)
    with torch.no_grad():
        out = ref.generate(**kw, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    return out[0, kw["input_ids"].shape[1]:].numpy()


class Runner:
    """Our model's jitted programs over its split state: image encoding and forward, with or without a cache."""

    def __init__(self, model):
        self.model = model
        self.graphdef, self.state = nnx.split(model)
        merge = lambda s: nnx.merge(self.graphdef, s)  # noqa: E731
        self._encode = jax.jit(lambda s, inputs: merge(s).encode_images(inputs))
        self._forward = jax.jit(lambda s, t, p, e, m: merge(s)(t, p, image_embeds=e, attention_mask=m)[0])
        self._cached = jax.jit(lambda s, t, p, e, c, i: merge(s)(t, p, image_embeds=e, cache=c, cache_index=i))

    def image_embeds(self, pixel_values, grid_thw):
        if not len(grid_thw):
            return None
        return self._encode(self.state, vision_inputs(pixel_values, grid_thw, self.model.vl_config.vision))

    def batch(self, encs, length):
        """Right-padded tokens [B, length], mask, M-RoPE positions and rope_deltas, and all images' embeddings."""
        tokens = np.zeros((len(encs), length), np.int32)
        mask = np.zeros((len(encs), length), bool)
        for b, enc in enumerate(encs):
            tokens[b, :len(enc["tokens"])] = enc["tokens"]
            mask[b, :len(enc["tokens"])] = True
        grids = [e["image_grid_thw"] for e in encs if len(e["image_grid_thw"])]
        grid = np.concatenate(grids) if grids else None
        positions, deltas = rope_index(tokens, grid, self.model.vl_config, mask)
        embeds = None if grid is None else self.image_embeds(
            np.concatenate([e["pixel_values"] for e in encs if len(e["image_grid_thw"])]), grid)
        return tokens, mask, positions, deltas, embeds

    def logits(self, encs, length: int = 64) -> list[np.ndarray]:
        """Each prompt's logits [T_b, V] from one padded batch."""
        tokens, mask, positions, _, embeds = self.batch(encs, length)
        out = np.asarray(self._forward(self.state, tokens, positions, embeds, mask))
        return [out[b, :len(enc["tokens"])] for b, enc in enumerate(encs)]

    def greedy(self, encs, new_tokens: int, length: int = 64) -> np.ndarray:
        """Greedy tokens [B, new_tokens]: prefill into a KV cache, then one token per step at slot + rope_delta."""
        tokens, _, positions, deltas, embeds = self.batch(encs, length)
        lengths = np.asarray([len(e["tokens"]) for e in encs], np.int32)
        cache = init_cache(self.model.config, len(encs), length + new_tokens)
        rows = np.arange(len(encs))
        logits, cache = self._cached(self.state, tokens, positions, embeds, cache, np.zeros(len(encs), np.int32))
        nxt = jnp.argmax(logits[rows, lengths - 1], -1)
        out = [nxt]
        for i in range(new_tokens - 1):
            slots = (lengths + i)[:, None]
            logits, cache = self._cached(self.state, nxt[:, None], decode_positions(jnp.asarray(slots), deltas),
                                         None, cache, lengths + i)
            nxt = jnp.argmax(logits[:, 0], -1)
            out.append(nxt)
        return np.asarray(jnp.stack(out, 1))
