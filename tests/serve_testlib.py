"""Shared fixtures of the serving tests: a tiny model exported to a Hugging Face folder, a chat template that
renders tools (Qwen2.5's layout: a system block listing them, calls in <tool_call> tags, results as a user turn
in <tool_response> tags), and an engine stand-in that answers with scripted text."""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np

from ragen_jax.models import make_tiny_model, save_pretrained
from ragen_jax.serve.engine import Completion

TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}{{- '# Tools\\n<tools>' }}{%- for tool in tools %}"
    "{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools>\\nCall one with <tool_call>{\"name\": ..., "
    "\"arguments\": ...}</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'system' and loop.first %}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '<|im_start|>assistant\\n' + m.content }}"
    "{%- for call in m.tool_calls %}{{- '<tool_call>\\n' + ({'name': call.function.name, 'arguments': "
    "call.function.arguments} | tojson) + '\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

CALCULATOR = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def tiny_hf_folder(folder: str, *, seed: int = 0, tools_template: bool = True) -> str:
    """A tiny random model saved as a Hugging Face folder (its template renders tools unless told not to)."""
    model, tokenizer = make_tiny_model(seed=seed)
    if tools_template:
        tokenizer.hf.chat_template = TOOLS_TEMPLATE
    save_pretrained(model, os.fspath(folder), tokenizer)
    return os.fspath(folder)


class ScriptedEngine:
    """Stands in for `Engine`: answers every choice with the next scripted text (the prompt is still rendered and
    checked by the app), and keeps the jobs it was given."""

    def __init__(self, tokenizer, texts, *, slots: int = 4, cache_size: int = 64, max_tokens: int = 16):
        self.tokenizer, self.texts = tokenizer, list(texts)
        self.slots, self.cache_size, self.max_tokens = slots, cache_size, max_tokens
        self.stats, self.jobs = {}, []

    def submit(self, job) -> concurrent.futures.Future:
        self.jobs.append(job)
        future = concurrent.futures.Future()
        done = []
        for _ in range(job.n):
            text = self.texts.pop(0) if self.texts else "ok"
            done.append(Completion(tuple(self.tokenizer.encode(text)), text, "stop"))
        future.set_result(done)
        return future


def prompt_text(tokenizer, job) -> str:
    return tokenizer.decode(np.asarray(job.prompt).tolist())
