"""Token-in/token-out context assembly.

A conversation is rendered with the model's own chat template, but every assistant message is
replaced by the exact tokens that were sampled for it: the template is rendered with sentinel
strings in the assistant slots, the text between sentinels is tokenized (and cached: those pieces
repeat across turns and episodes), and the sampled token lists are spliced in. Nothing the model
wrote is ever re-tokenized, and template/environment tokens never enter the loss mask.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from ragen_jax.tool_calls import tools_text

_SENTINEL = "\u2063RAGEN_ASSISTANT_{}\u2063"


class ContextBuilder:
    """Turns chat messages (with sampled assistant tokens) into token ids and a turn map."""

    def __init__(self, tokenizer, *, enable_think: bool = True, action_format: str = "answer",
                 cache_size: int = 65536):
        self.tokenizer = tokenizer
        # what the prompt ends with and every response is sampled after (nothing before a bare tool call)
        self.generation_suffix = "<think>" if enable_think else ("" if action_format == "tool_call" else "<answer>")
        self._template_renders_tools: dict[str, bool] = {}
        self._encode_cached = functools.lru_cache(maxsize=cache_size)(self._encode)
        eos_ids = tuple(tokenizer.eos_token_ids)
        self._eos_text = {i: tokenizer.decode([i]) for i in eos_ids}
        self.eos_texts = tuple(self._eos_text.values())

    @functools.cached_property
    def end_of_turn_id(self) -> int:
        """The end-of-turn id the chat template puts after an assistant message (Qwen2.5's `<|im_end|>`, also
        for a base model whose tokenizer's eos is `<|endoftext|>`); the tokenizer's first eos id when the
        template follows the message with none of them."""
        ids = tuple(self.tokenizer.eos_token_ids)
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL.format(0)}],
                add_generation_prompt=False)
        except Exception:  # noqa: BLE001 - a template that cannot render this pair: keep the tokenizer's eos
            return ids[0]
        after = text.partition(_SENTINEL.format(0))[2]
        matches = [i for i in ids if self._eos_text[i] and after.startswith(self._eos_text[i])]
        return max(matches, key=lambda i: len(self._eos_text[i])) if matches else ids[0]

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text))

    def assemble(self, messages: list[dict], *, add_generation_prompt: bool) -> tuple[np.ndarray, np.ndarray]:
        """messages -> (tokens [L] int32, turn_of_token [L] int32).

        turn_of_token is the index (within `messages`' assistant messages, in order) of the
        assistant message a sampled token belongs to, or -1 for template/environment tokens.
        An assistant message with "tokens" is spliced in verbatim after the generation suffix
        ("<think>") that preceded its sampling; one without "tokens" is rendered as text.
        """
        assistant = [m for m in messages if m["role"] == "assistant" and m.get("tokens") is not None]
        render_messages = []
        k = 0
        for m in messages:
            content = m["content"]
            if m["role"] == "assistant" and m.get("tokens") is not None:
                content = _SENTINEL.format(k)
                k += 1
            render_messages.append({"role": m["role"], "content": content})
        tools = messages[0].get("tools") if messages else None
        if tools and not self.template_renders_tools(tools):  # the tools' schemas in the system message instead
            render_messages[0] = {**render_messages[0], "content": render_messages[0]["content"] + tools_text(tools)}
            tools = None
        text = self._render(render_messages, add_generation_prompt=add_generation_prompt,
                            sampled_last=bool(assistant) and messages[-1] is assistant[-1], tools=tools)
        tokens: list[int] = []
        turns: list[int] = []
        rest = text
        for i, message in enumerate(assistant):
            before, sep, rest = rest.partition(_SENTINEL.format(i))
            if not sep:
                raise ValueError(
                    "The chat template altered an assistant message's content, so sampled tokens "
                    "cannot be spliced in; use a template that renders assistant content verbatim."
                )
            self._append_text(tokens, turns, before)
            self._append_text(tokens, turns, self.generation_suffix)
            sampled = list(message["tokens"])
            tokens.extend(sampled)
            turns.extend([i] * len(sampled))
            if sampled and sampled[-1] in self._eos_text:
                rest = _drop_prefix(rest, self._eos_text[sampled[-1]])
        self._append_text(tokens, turns, rest)
        if add_generation_prompt:
            self._append_text(tokens, turns, self.generation_suffix)
        return np.asarray(tokens, np.int32), np.asarray(turns, np.int32)

    def template_renders_tools(self, tools: list[dict]) -> bool:
        """Whether the chat template shows `tools` given through its `tools=` argument (Qwen2.5's and Qwen3's do; a
        template that ignores them gets their schemas appended to the system message, `tools_text`)."""
        key = json.dumps(tools, sort_keys=True)
        if key not in self._template_renders_tools:
            probe = [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]
            try:
                with_tools = self.tokenizer.apply_chat_template(probe, add_generation_prompt=True, tools=tools)
            except TypeError:  # a tokenizer stand-in without a tools argument
                with_tools = None
            plain = self.tokenizer.apply_chat_template(probe, add_generation_prompt=True)
            self._template_renders_tools[key] = with_tools is not None and with_tools != plain
        return self._template_renders_tools[key]

    def _render(self, messages: list[dict], *, add_generation_prompt: bool, sampled_last: bool,
                tools: list[dict] | None = None) -> str:
        """The chat text with sentinels in the assistant slots. A conversation that ends with a sampled assistant
        message renders it after its turn's generation prompt, as it was sampled: a template may render a final
        assistant message differently (Qwen3 puts an empty "<think>\\n\\n</think>\\n\\n" before the one after the
        last user message), which would train the response after tokens the policy never saw."""
        extra = {"tools": tools} if tools else {}
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **extra)
        if add_generation_prompt or not sampled_last:
            return text
        sentinel = messages[-1]["content"]
        _, sep, closing = text.rpartition(sentinel)
        if not sep:
            return text  # the template altered the content: `assemble` says so
        return (self.tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, **extra)
                + sentinel + closing)

    def _append_text(self, tokens: list[int], turns: list[int], text: str) -> None:
        if text:
            piece = self._encode_cached(text)
            tokens.extend(piece)
            turns.extend([-1] * len(piece))


def _drop_prefix(text: str, prefix: str) -> str:
    """text without a leading prefix: after a response that sampled the template's end-of-turn token, the template's
    own copy. A different end token (Qwen's <|endoftext|>, Llama's <|end_of_text|>) leaves the template's end of turn
    in place, as the chat template renders it after that message."""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D int arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n
