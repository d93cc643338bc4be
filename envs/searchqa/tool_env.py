"""SearchQA with tools (`rollout.action_format="tool_call"`): `search(query)` over the corpus, then `answer(answer)`.

The episodes, retrieval and reward are SearchQAEnv's (its `search[...]` / `finish[...]` actions run underneath):
`search` returns the top documents (no reward; the episode goes on until the env's step cap), `answer` scores the
answer (1.0 for an exact match, else F1 when F1 >= the threshold) and ends the episode. `scripted_action` plays a
demonstration of the format: search the question, then answer with the reference answer.
"""

from __future__ import annotations

from typing import Any

from envs.protocols import ToolEnv
from envs.searchqa.env import ACTIONS_LINE, SearchQAEnv
from ragen_jax.tool_calls import ToolCall

INSTRUCTION = ("You are a search agent answering questions. Call the search tool to find documents about the "
               "question, then give your final answer with the answer tool (it ends the episode).")


def _string_argument(name: str, description: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string", "description": description}},
            "required": [name], "additionalProperties": False}


TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Search the corpus; returns the top "
                                      "documents.", "parameters": _string_argument("query", "what to look up")}},
    {"type": "function", "function": {"name": "answer", "description": "Give the final answer; ends the episode.",
                                      "parameters": _string_argument("answer", "a short answer")}},
]


def _without_actions_line(text: str) -> str:
    """SearchQAEnv's text without the line naming its text actions (the tools replace them)."""
    return text.replace(f"\n\n{ACTIONS_LINE}", "").replace(f"\n{ACTIONS_LINE}", "").rstrip()


class ToolSearchQAEnv(ToolEnv):
    """SearchQA through a search tool and an answer tool (kwargs as SearchQAEnv's)."""

    def __init__(self, **kwargs: Any) -> None:
        self.env = SearchQAEnv(**kwargs)
        self.searched = False  # a search ran this episode (the scripted policy then answers)

    def instruction(self) -> str:
        return INSTRUCTION

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        text, info = self.env.reset(seed)
        self.searched = False
        return _without_actions_line(text), info

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        if name == "search":
            action = f"search[{arguments.get('query', '')}]"
            self.searched = True
        elif name == "answer":
            action = f"finish[{arguments.get('answer', '')}]"
        else:
            raise ValueError(f"ToolSearchQAEnv has no tool {name!r}")  # the rollout checks names before calling
        text, reward, terminated, truncated, info = self.env.step(action)
        return _without_actions_line(text), reward, bool(terminated or truncated), info

    def scripted_action(self) -> ToolCall | None:
        """Search the question, then answer with its first reference answer."""
        question = self.env.question
        if question is None or not question.answers:
            return None
        if not self.searched:
            return ToolCall("search", {"query": question.question})
        return ToolCall("answer", {"answer": question.answers[0]})
