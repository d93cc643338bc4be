"""WebShop as a host env: shop on a simulated site with `search[query]` / `click[element]`.

Reward on buying is WebShop's purchase score; like RAGEN, the step reward is 1.0 when the score
reaches 1 and 0 otherwise (`reward_mode="score"` returns the raw score). The episode of seed s
is goal `perm[goal_index(s, split)]`, RAGEN's split and permutation scheme.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, Literal

from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys
from envs.webshop.data import Catalog, load_catalog
from envs.webshop.generate import synthetic_catalog
from envs.webshop.site import ProductSearch, Session, WebShopSite

# RAGEN's WebShop env_instruction (config/envs.yaml), verbatim.
INSTRUCTION = (
    "You are browsing an online shop. Based on the instruction, buy a product that close to the production "
    "description. You need to search, read the search results, pick a product, choose the size and color and buy. "
    "You should only choose action from the available actions list provided later.  Example process: I need a "
    "gingko light and 20x20 pillow cover that is hand painted. First search[gingko light 20x20 pillow cover hand "
    "painted], answer format: <answer>search[blanket with fleece throw]</answer>. Valid answer is "
    "search[<keywords>] or click[<clickable>]."
)
# Advice appended to every observation: RAGEN's RENDER_INSTRUCTIONS (ragen/env/webshop/env.py), verbatim.
TIPS = (
    "We must buy a product within 10 actions. It doesn't have to match perfectly with description.",
    "Search term should not include details like size, color.",
    "Never search for more than 2 times.",
    "Do not be too strict about the description, it's more important to buy one that is close enough within action "
    "limit.",
    "Prioritize click a product in the current page over going to next page.",
    "Almost never click[next >] for more than 2 times.",
    "Almost never click[< prev] unless you are sure the product is on one of the previous pages.",
    "If you have less than 3 actions left, just buy the first product you see in the current page.",
    "If an matching option exists, make sure to click[size] then click[color], one at a time, before click[buy now], "
    "but don't have to if only 1 action left, in that case you just click[buy now]. Never click description.",
)
PERMUTATION_SEED = 42
Split = Literal["train", "val", "test"]


@lru_cache(maxsize=8)
def _site(data_dir: str | None, num_products: int | None, seed: int) -> WebShopSite:
    """One shared site (catalogue + BM25 index) per data source, reused by every env instance."""
    catalog: Catalog = (load_catalog(data_dir, num_products=num_products, seed=seed) if data_dir
                        else synthetic_catalog(num_products or 300, seed))
    return WebShopSite(catalog, ProductSearch(catalog))


@lru_cache(maxsize=8)
def _permutation(n: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(PERMUTATION_SEED).shuffle(order)
    return tuple(order)


def goal_index(seed: int, split: Split, num_goals: int) -> int:
    """RAGEN's split: test = first 500 goals, val = next 1000, train = the rest (scaled down to
    10% / 10% / 80% for catalogues under 3000 goals), then a fixed permutation."""
    n_test, n_val = (500, 1000) if num_goals >= 3000 else (max(1, num_goals // 10), max(1, num_goals // 10))
    if split == "test":
        idx = seed % n_test
    elif split == "val":
        idx = seed % n_val + n_test
    elif split == "train":
        idx = seed % (num_goals - n_test - n_val) + n_test + n_val
    else:
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    return _permutation(num_goals)[idx]


_WEBSHOP_DATA = ("the site is built from data_dir (a local folder with WebShop's product and goal files; "
                 "num_products limits the catalogue) or, without it, a generated catalogue")
# RAGEN's WebShopEnvConfig keys (its SimServer's arguments) -> what ragen-jax offers.
RAGEN_KEYS = RagenKeys(
    fixed={"observation_mode": ("text", "the observation is RAGEN's text mode"),
           "limit_goals": (-1, "every goal of the split is used (split: train / val / test)"),
           "human_goals": (False, _WEBSHOP_DATA), "show_attrs": (False, "product pages show no extra attributes")},
    unsupported={"dataset": _WEBSHOP_DATA, "file_path": _WEBSHOP_DATA,
                 "server": "the site runs in-process; give data_dir",
                 "filter_goals": "every goal of the split is used"})


class WebShopEnv(HostEnv):
    """WebShop text env. Data: the synthetic catalogue by default, or the original files in `data_dir`."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, data_dir: str | None = None, num_products: int | None = None, seed: int = 0,
                 split: Split = "train", reward_mode: Literal["binary", "score"] = "binary",
                 max_steps: int | None = None, show_tips: bool = True):
        if reward_mode not in ("binary", "score"):
            raise ValueError(f"reward_mode must be 'binary' or 'score', got {reward_mode!r}")
        self.site = _site(data_dir, num_products, seed)
        self.split, self.reward_mode, self.max_steps, self.show_tips = split, reward_mode, max_steps, show_tips
        goal_index(0, split, len(self.site.catalog.goals))  # validate the split early
        self.session: Session | None = None
        self.num_steps = 0

    def instruction(self) -> str:
        return INSTRUCTION

    def _text(self, observation: str) -> str:
        """RAGEN's state text (its prepare_render_cache): the page, ".", the tips joined by newlines (none before the
        first), then "\\n You must choose from these actions:" and the actions, comma-separated, with a final "."."""
        s = self.session
        actions = self.site.available_actions(s)
        tips = "\n".join(TIPS) if self.show_tips and s.page != "done" else ""
        return f"{observation}.{tips}\n You must choose from these actions:{', '.join(actions)}."

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        goals = self.site.catalog.goals
        goal = goals[goal_index(int(seed), self.split, len(goals))]
        self.session = Session(goal=goal)
        self.num_steps = 0
        # RAGEN's first state is the instruction header's text ("Instruction: ..."), not the whole search page; a
        # later visit to the search page (back to search, an invalid first action) shows the page itself.
        return self._text(f"Instruction: {goal.instruction_text}"), {"instruction_text": goal.instruction_text,
                                 "available_actions": self.site.available_actions(self.session)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.session is None:
            raise RuntimeError("WebShopEnv.step called before reset(seed).")
        if self.session.page == "done":
            raise RuntimeError("The episode is over (the product was bought); call reset(seed).")
        before = self.site.render(self.session)
        valid, done = self.site.step(self.session, action)
        after = self.site.render(self.session)
        self.num_steps += 1
        raw = self.session.score.total if self.session.score else 0.0
        reward = (1.0 if raw >= 1.0 else 0.0) if self.reward_mode == "binary" else raw
        if not done:
            reward = 0.0
        truncated = not done and self.max_steps is not None and self.num_steps >= self.max_steps
        info: dict[str, Any] = {
            "action_is_valid": valid,
            "action_is_effective": after != before,
            "success": bool(done and raw >= 1.0),
            "raw_reward": raw,
            "success_purchase": bool(done),
            "end_of_page": self.site.end_of_page(self.session),
            "available_actions": self.site.available_actions(self.session),
        }
        if self.session.score is not None:
            info["purchase"] = self.session.score.info()
        return self._text(after), reward, done, truncated, info
