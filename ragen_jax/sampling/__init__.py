"""Jitted batched generation with a per-row KV cache (prefill + while_loop decode) and token scoring."""

from ragen_jax.shapes import bucket_length
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.logits import process_logits, sample_rows, sample_step, token_logprobs
from ragen_jax.sampling.sampler import Sampler
from ragen_jax.sampling.turn import (SampleOutput, TurnState, end_rows, episode_turn_keys, model_config_of,
                                    row_keys)
from ragen_jax.sampling.scoring import score_tokens
from ragen_jax.sampling.stopping import EOS, INACTIVE, LENGTH, STOP_SEQUENCE

__all__ = [
    "SamplingConfig", "SampleOutput", "Sampler", "score_tokens", "bucket_length", "process_logits",
    "sample_step", "sample_rows", "token_logprobs", "model_config_of", "TurnState", "row_keys", "episode_turn_keys",
    "end_rows",
    "LENGTH", "EOS", "STOP_SEQUENCE", "INACTIVE",
]
