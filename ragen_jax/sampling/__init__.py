"""Jitted batched generation with a per-row KV cache (prefill + while_loop decode) and token scoring."""

from ragen_jax.sampling.buckets import bucket_length
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.filters import process_logits, sample_step, token_logprobs
from ragen_jax.sampling.sampler import SampleOutput, Sampler, model_config_of
from ragen_jax.sampling.scoring import score_tokens
from ragen_jax.sampling.stopping import EOS, INACTIVE, LENGTH, STOP_SEQUENCE

__all__ = [
    "SamplingConfig", "SampleOutput", "Sampler", "score_tokens", "bucket_length", "process_logits",
    "sample_step", "token_logprobs", "model_config_of", "LENGTH", "EOS", "STOP_SEQUENCE", "INACTIVE",
]
