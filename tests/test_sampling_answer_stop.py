"""Stopping a turn at "</answer>" under a byte-level BPE, where the text's tokens depend on what precedes it."""

import jax.numpy as jnp
import pytest
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ragen_jax.models.tiny import load_tiny_tokenizer
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.rollout import RolloutConfig
from ragen_jax.sampling.stopping import STOP_SEQUENCE, stop_reason


@pytest.fixture(scope="module")
def bpe():
    """A GPT-2/Qwen-style byte-level BPE (a space joins the punctuation after it) that learned " </" and "</"."""
    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    corpus = ["<think> go up </think> <answer> Up </answer>", "<answer>Up</answer>\n", "x </y> a </b>"] * 50
    raw.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=raw))


def _stops_at(config, ids) -> list[int]:
    """The positions of ids [N] at which a row generating them would stop on a stop sequence."""
    generated = jnp.asarray([ids], jnp.int32)
    return [n for n in range(len(ids))
            if int(stop_reason(generated, jnp.int32(n), generated[:, n], config)[0]) == STOP_SEQUENCE]


@pytest.mark.parametrize("response", ["<think> go up </think> <answer> Up </answer>",
                                      "<think>go</think><answer>Up</answer>",
                                      "<think>go</think>\n<answer>\nUp\n</answer>"])
def test_a_turn_stops_at_answer_however_its_tokens_fall(bpe, response):
    """RAGEN's format "<answer> [your answer] </answer>" puts a space before "</answer>"; a byte-level BPE then
    spells it " </" "answer" ">", not the "</" "answer" ">" of the text alone, and the turn used to run on to EOS."""
    assert bpe.encode(" </answer>")[0] not in bpe.encode("</answer>")  # the premise: " </" is one token
    rollout = RolloutConfig(response_length=64)
    config = rollout.sampling(bpe, rollout.stop_sequences(bpe))
    ids = bpe.encode(response)
    assert _stops_at(config, ids) == [len(ids) - 1]
    assert _stops_at(config, bpe.encode("<think> </think> <answer> Up")) == []


def test_an_answer_token_of_its_own_keeps_one_stop_sequence():
    """The tiny tokenizer holds "</answer>" as one token: its one stop sequence, whatever precedes it."""
    tokenizer = load_tiny_tokenizer()
    assert RolloutConfig(response_length=8).stop_sequences(tokenizer) == (tuple(tokenizer.encode("</answer>")),)
    assert RolloutConfig(response_length=8, stop_at_answer=False).stop_sequences(tokenizer) == ()


@pytest.mark.parametrize("response", ["<think> I answer <answer> Up </answer> now </think> <answer> Up </answer>",
                                      "<think>say<answer>Up</answer></think><answer>Up</answer>"])
def test_an_answer_the_reasoning_quotes_does_not_end_the_turn(bpe, response):
    """RAGEN's parse takes the answer after </think>: before, the turn stopped at the quoted "</answer>" inside
    the reasoning, the response had no </think> and was penalised as malformed. Without thinking the prompt ends
    in "<answer>", so the first "</answer>" ends the turn."""
    ids = bpe.encode(response)
    thinking = RolloutConfig(response_length=64)
    config = thinking.sampling(bpe, thinking.stop_sequences(bpe), stop_after=thinking.stop_gates(bpe))
    assert _stops_at(config, ids) == [len(ids) - 1]
    plain = RolloutConfig(response_length=64, enable_think=False)
    assert plain.stop_gates(bpe) == ()
    assert len(_stops_at(plain.sampling(bpe, plain.stop_sequences(bpe)), ids)) == 2
