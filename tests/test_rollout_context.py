"""ContextBuilder against transformers: every turn's context equals `apply_chat_template(messages,
add_generation_prompt=True, tokenize=True)` + "<think>" for the same conversation, sampled tokens kept as sampled."""

import pytest

from ragen_jax.models import load_tiny_tokenizer
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.episodes import strip_end_of_turn

# Qwen2.5's template without its tool branches.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role == 'user' or (message.role == 'system' and not loop.first) "
    "or message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Llama 3.1's template without tools: a date line before the system message, contents trimmed.
LLAMA31_TEMPLATE = (
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
BODY = " I should go Up </think> <answer> Up || Left </answer>"


def _tokenizer(family: str):
    tok = load_tiny_tokenizer()
    if family == "qwen25":
        tok.hf.chat_template = QWEN25_TEMPLATE
        return tok, "<|im_end|>", "<|endoftext|>"
    tok.hf.add_special_tokens({"additional_special_tokens": [
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    tok.hf.bos_token, tok.hf.eos_token = "<|begin_of_text|>", "<|eot_id|>"
    tok.hf.chat_template = LLAMA31_TEMPLATE
    return tok, "<|eot_id|>", "<|end_of_text|>"


def _conversations(tok, responses: list[list[int]], eot: str, *, gen: bool):
    """(builder messages with sampled tokens, the same conversation as text messages: a response's text without the
    end-of-turn token the template writes after it)."""
    ours = [{"role": "system", "content": "You're a helpful assistant."}]
    for t, sampled in enumerate(responses):
        ours.append({"role": "user", "content": ("Reward:\n0.9\n" if t else "") + f"Turn {t + 1}:\nState:\n#P_#\n"})
        text = strip_end_of_turn("<think>" + tok.decode(sampled), [eot])
        ours.append({"role": "assistant", "content": text, "tokens": sampled})
    if gen:
        ours.append({"role": "user", "content": f"Reward:\n0.9\nTurn {len(responses) + 1}:\nState:\n#P_#\n"})
    return ours, [{"role": m["role"], "content": m["content"]} for m in ours]


def _transformers_tokens(tok, messages, *, gen: bool) -> list[int]:
    out = tok.hf.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
    ids = out if isinstance(out, list) else out["input_ids"]
    return list(ids) + (tok.encode("<think>") if gen else [])


@pytest.mark.parametrize("family", ["qwen25", "llama31"])
@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("ending", ["end_of_turn", "stop_string", "cut", "empty", "other_eos"])
def test_contexts_equal_the_chat_template_rendered_by_transformers(family, gen, ending):
    """Responses that sampled the template's end-of-turn token, stopped at "</answer>", were cut at response_length,
    were empty, or ended at another end-of-generation id of the checkpoint (Qwen2.5's <|endoftext|>, Llama 3.1's
    <|end_of_text|>). Before, that last case dropped the template's end of turn after the response."""
    tok, eot, other = _tokenizer(family)
    end = {"end_of_turn": [tok.token_id(eot)], "other_eos": [tok.token_id(other)]}.get(ending, [])
    first = {"cut": tok.encode(" I should go Up </th"), "empty": []}.get(ending, tok.encode(BODY)) + end
    responses = [first, tok.encode(BODY) + [tok.token_id(eot)]]
    ours, text = _conversations(tok, responses, eot, gen=gen)
    tokens, turns = ContextBuilder(tok).assemble(ours, add_generation_prompt=gen)
    want = _transformers_tokens(tok, text, gen=gen)
    assert tok.decode(tokens.tolist()) == tok.decode(want)
    assert tokens.tolist() == want
    for k, sampled in enumerate(responses):
        assert tokens[turns == k].tolist() == sampled


def test_a_response_kept_as_sampled_where_transformers_would_tokenize_it_differently():
    """Token-in/token-out: a non-canonical tokenization of the response is spliced in as sampled; the rest of the
    context still equals the template's tokens."""
    tok, eot, _ = _tokenizer("qwen25")
    sampled = [t for ch in " Up </answer>" for t in tok.encode(ch)] + [tok.token_id(eot)]
    assert sampled[:-1] != tok.encode(" Up </answer>")
    ours, text = _conversations(tok, [sampled], eot, gen=True)
    tokens, turns = ContextBuilder(tok).assemble(ours, add_generation_prompt=True)
    assert tokens[turns == 0].tolist() == sampled
    assert tok.decode(tokens.tolist()) == tok.decode(_transformers_tokens(tok, text, gen=True))


@pytest.mark.parametrize("family", ["qwen25", "llama31"])
def test_the_end_of_turn_is_the_templates_when_the_tokenizers_eos_is_another(family):
    """A base model's tokenizer ends text with <|endoftext|> / <|end_of_text|>, while its chat template closes an
    assistant message with <|im_end|> / <|eot_id|>: the end of turn a demo response is taught is the template's."""
    tok, eot, other = _tokenizer(family)
    assert ContextBuilder(tok).end_of_turn_id == tok.token_id(eot)
    tok.hf.eos_token = other
    assert tok.eos_token_ids[0] == tok.token_id(other)
    assert ContextBuilder(tok).end_of_turn_id == tok.token_id(eot)
