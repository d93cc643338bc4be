"""WebShop's purchase score: attribute, option and price matches, scaled by a product-type match.

score = r_type * (attribute matches + option matches + price ok) / (#attributes + #options + 1);
a purchase is a success when the score is 1.
"""

from __future__ import annotations

import dataclasses

from envs.webshop.text_match import content_words, normalize_color, token_set_ratio
from envs.webshop.types import Goal, Product

FUZZY_THRESHOLD = 85
EXACT_MATCH_OPTIONS = ("size",)


@dataclasses.dataclass(frozen=True)
class PurchaseScore:
    total: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool
    query_match: bool
    category_match: bool
    title_score: float

    def info(self) -> dict[str, float | bool | None]:
        return dataclasses.asdict(self)


def _breadcrumb(text: str) -> set[str]:
    return {part.strip() for part in text.split("›") if part.strip()}


def type_reward(purchased: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) for buying `purchased` under `goal`."""
    query_match = purchased.query == goal.query
    category_match = len(_breadcrumb(purchased.product_category) & _breadcrumb(goal.product_category)) >= 2
    wanted = content_words(goal.name)
    got = set(content_words(purchased.title))
    title_score = 0.2 if not wanted else len(set(wanted) & got) / len(set(wanted))
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def _mentioned(text: str, product: Product) -> bool:
    """Whether `text` occurs in the product's title, bullet points or description."""
    return (
        text in product.title.lower()
        or text in " ".join(product.bullet_points).lower()
        or text in product.description.lower()
    )


def attribute_matches(purchased: Product, goal_attributes: tuple[str, ...]) -> int:
    """How many goal attributes fuzzy-match a product attribute or appear in its text."""
    count = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in purchased.attributes):
            count += 1
        elif _mentioned(wanted, purchased):
            count += 1
    return count


def option_matches(purchased: Product, goal_options: tuple[str, ...], chosen: dict[str, str]) -> int:
    """How many chosen options match a goal option (size exactly, others fuzzily) or the text."""
    goal_values = [normalize_color(v) for v in goal_options]
    count = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in goal_values
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if matched or _mentioned(value, purchased):
            count += 1
    return count


def purchase_score(purchased: Product, goal: Goal, price: float, chosen: dict[str, str]) -> PurchaseScore:
    """The original's `get_reward`: the score of buying `purchased` at `price` with `chosen` options."""
    r_type, query_match, category_match, title_score = type_reward(purchased, goal)
    n_att = attribute_matches(purchased, goal.attributes)
    n_opt = option_matches(purchased, goal.goal_options, chosen)
    r_price = price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    total = r_type * (n_att + n_opt + float(r_price)) / denominator
    return PurchaseScore(
        total=total,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else 0.0,
        r_option=n_opt / len(goal.goal_options) if goal.goal_options else None,
        r_price=bool(r_price),
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
    )
