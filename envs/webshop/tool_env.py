"""WebShop with tools (`rollout.action_format="tool_call"`): `search(query)` and `click(element)` on the simulated site.

The site, goals and reward are WebShopEnv's (its `search[...]` / `click[...]` actions run underneath); each result
is the page text and the actions it allows, in WebShop's own notation (`click[buy now]` is the click tool with
element "buy now"). RAGEN's tips, which teach the text actions' syntax, are off
by default (`show_tips`). There is no scripted policy: warm-start it from a JSONL of demonstrations.
"""

from __future__ import annotations

from typing import Any

from envs.protocols import ToolEnv
from envs.webshop.env import WebShopEnv

INSTRUCTION = ("You are shopping on a web site for the product the instruction describes. Call the search tool with "
               "keywords, then the click tool on a product, on its options (size, color, ...) and finally on "
               "'buy now'; the purchase ends the episode and is scored against the instruction.")


def _string_argument(name: str, description: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string", "description": description}},
            "required": [name], "additionalProperties": False}


TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Search the site (from a page with a search "
                                      "box).", "parameters": _string_argument("query", "keywords")}},
    {"type": "function", "function": {"name": "click", "description": "Click an element the page lists (a product "
                                      "id, an option, 'buy now', 'next >', 'back to search', ...).",
                                      "parameters": _string_argument("element", "the element, as listed")}},
]


class ToolWebShopEnv(ToolEnv):
    """WebShop through a search tool and a click tool (kwargs as WebShopEnv's; tips off by default)."""

    def __init__(self, show_tips: bool = False, **kwargs: Any) -> None:
        self.env = WebShopEnv(show_tips=show_tips, **kwargs)

    def instruction(self) -> str:
        return INSTRUCTION

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return self.env.reset(seed)

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        if name == "search":
            action = f"search[{arguments.get('query', '')}]"
        elif name == "click":
            action = f"click[{arguments.get('element', '')}]"
        else:
            raise ValueError(f"ToolWebShopEnv has no tool {name!r}")  # the rollout checks names before calling
        text, reward, terminated, truncated, info = self.env.step(action)
        return text, reward, bool(terminated or truncated), info
