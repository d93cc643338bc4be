"""The tiny preset's tokenizer: single-token specials and grid cells, round trips, chat template, reproducible build."""

import filecmp
import pathlib
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from ragen_jax.models import load_tiny_tokenizer, tiny_config
from ragen_jax.models.build_tiny_tokenizer import ASSET_DIR, GRID_SYMBOLS

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<answer>", "</answer>")


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def test_vocab_size_matches_tiny_config(tok):
    assert 1000 <= len(tok) <= 2000
    assert tiny_config().vocab_size == len(tok) == tok.vocab_size


def test_special_tokens_are_single_tokens(tok):
    for s in SPECIALS:
        assert tok.encode(s) == [tok.token_id(s)]
        assert tok.encode(f"x {s} y").count(tok.token_id(s)) == 1
    assert tok.eos_token_ids == (tok.token_id("<|im_end|>"), tok.token_id("<|endoftext|>"))
    assert tok.pad_token_id == tok.token_id("<|endoftext|>")
    with pytest.raises(KeyError):
        tok.token_id("<|not_a_token|>")


def test_grid_symbols_and_digits_are_one_token_each(tok):
    grid = "######\n#√_P_#\n#_XO_#\n#S__G#\n######"
    for row in grid.split("\n"):
        assert len(tok.encode(row)) == len(row)
    for ch in GRID_SYMBOLS + "0123456789":
        assert len(tok.encode(ch)) == 1
        assert len(tok.encode(f"Player: (3, {ch})")) == len(tok.encode("Player: (3, ")) + 2
    assert len(tok.encode("12345")) == 5


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40) | st.text(alphabet=GRID_SYMBOLS + "\n <>/|", max_size=60))
def test_decode_encode_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_chat_template_shape(tok):
    msgs = [{"role": "system", "content": "You're a helpful assistant."},
            {"role": "user", "content": "Turn 1:\nState:\n#P#"}]
    text = tok.apply_chat_template(msgs)
    assert text == ("<|im_start|>system\nYou're a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nTurn 1:\nState:\n#P#<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template(msgs, add_generation_prompt=False) == text[: -len("<|im_start|>assistant\n")]
    ids = tok.encode(text + "<think>")
    assert ids[0] == tok.token_id("<|im_start|>") and ids[-1] == tok.token_id("<think>")


def test_skip_special_tokens_keeps_think_and_answer_tags(tok):
    ids = tok.encode("<think> go </think> <answer> Up || Left </answer><|im_end|><|endoftext|>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think> go </think> <answer> Up || Left </answer>"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_build_script_regenerates_identical_files(tmp_path):
    subprocess.run([sys.executable, "-m", "ragen_jax.models.build_tiny_tokenizer", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=pathlib.Path(__file__).parents[1])
    names = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    match, mismatch, errors = filecmp.cmpfiles(ASSET_DIR, tmp_path, names, shallow=False)
    assert match == names, (mismatch, errors)


def test_end_of_turn_ids_include_the_generation_config_list(tmp_path):
    """A Llama 3.1 folder's tokenizer knows <|eot_id|> and <|end_of_text|>; its generation_config.json also ends
    generation at <|eom_id|>: every listed id ends a turn, and save_pretrained writes the list back."""
    from ragen_jax.models import load_tokenizer, make_tiny_model, save_pretrained

    hf = load_tiny_tokenizer().hf
    hf.add_special_tokens({"additional_special_tokens": ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]})
    hf.eos_token = "<|eot_id|>"
    hf.save_pretrained(tmp_path)
    end, eom, eot = hf.convert_tokens_to_ids(["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"])
    (tmp_path / "generation_config.json").write_text(f'{{"eos_token_id": [{end}, {eom}, {eot}]}}')
    tok = load_tokenizer(tmp_path)
    assert tok.eos_token_ids[0] == eot and set(tok.eos_token_ids) >= {end, eom, eot}
    model, _ = make_tiny_model(vocab_size=len(tok))
    save_pretrained(model, tmp_path / "out", tok)
    assert set(load_tokenizer(tmp_path / "out").eos_token_ids) == set(tok.eos_token_ids)
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": "<|eot_id|>"}')
    with pytest.raises(ValueError, match="generation_config.json has eos_token_id"):
        load_tokenizer(tmp_path)


def test_a_tokenizer_that_names_no_end_of_turn_token_is_refused_at_load(tmp_path):
    """Before, it loaded; generation could then never end a turn, and its pad id was an IndexError."""
    from tokenizers import Tokenizer as RawTokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from ragen_jax.models import CheckpointError, load_tokenizer

    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel()
    raw.train_from_iterator(["a plain text with no special tokens at all"] * 4, trainers.BpeTrainer(vocab_size=300))
    PreTrainedTokenizerFast(tokenizer_object=raw).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="names no end-of-turn token.*Set eos_token in tokenizer_config.json"):
        load_tokenizer(tmp_path)


def test_an_export_keeps_the_source_checkpoints_generation_defaults(tmp_path):
    """transformers' generate and vLLM read their sampling defaults from generation_config.json; an export kept only
    the special ids, so the exported model sampled at temperature 1 where the source checkpoint said 0.7."""
    import json

    from ragen_jax.models import load_tokenizer, make_tiny_model, save_pretrained

    load_tiny_tokenizer().hf.save_pretrained(tmp_path)
    source = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "do_sample": True,
              "eos_token_id": 5}
    (tmp_path / "generation_config.json").write_text(json.dumps(source))
    tok = load_tokenizer(tmp_path)
    model, _ = make_tiny_model(vocab_size=len(tok))
    save_pretrained(model, tmp_path / "out", tok)
    written = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert {k: written[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample")} == {
        k: source[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample")}
    assert set(written["eos_token_id"]) == set(tok.eos_token_ids) and 5 in written["eos_token_id"]
    assert written["pad_token_id"] == tok.pad_token_id
    (tmp_path / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="generation_config.json is not a JSON object"):
        load_tokenizer(tmp_path)
