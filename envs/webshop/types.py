"""WebShop data: a product as shown on the site and a shopping goal (instruction + targets)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Review:
    title: str
    score: float
    body: str


@dataclasses.dataclass(frozen=True)
class Product:
    """One catalogue item; field meanings follow the original's processed product dicts."""

    asin: str  # upper-case id, e.g. "B09QQLDJ6V"
    title: str  # the product name ("Title"/"name" in the original)
    query: str  # the search query the product was scraped under (product type)
    category: str  # top-level category, e.g. "fashion"
    product_category: str  # breadcrumb "a › b › c"
    description: str
    bullet_points: tuple[str, ...]
    attributes: tuple[str, ...]  # e.g. ("non slip", "rubber sole")
    options: dict[str, tuple[str, ...]]  # lower-case option name -> lower-case values
    pricing: tuple[float, ...]  # one price or a (low, high) range
    price_tag: str  # "$12.99" or "$10.0 to $20.0"
    rating: str = "N.A."
    reviews: tuple[Review, ...] = ()

    def option_name_of(self, value: str) -> str | None:
        """The option (e.g. "size") that offers `value`, or None."""
        for name, values in self.options.items():
            if value in values:
                return name
        return None


@dataclasses.dataclass(frozen=True)
class Goal:
    """What the shopper wants: the product it was written for and the target attributes/options."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: tuple[str, ...]  # option values, e.g. ("black", "x-large")
    price_upper: float
    query: str
    name: str  # the target product's title
    category: str
    product_category: str
    weight: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
