"""Catalogue loading: the original WebShop files (or the synthetic generator's files in the same
format) -> Products, a deterministic price per product, and human-style goals.

Expected files in a data folder (names of the original `data/` folder; see docs/remote_envs.md):
- products, e.g. `items_shuffle_1000.json`: list of {asin, name, full_description,
  small_description, pricing ("$12.99" or "$10.00 - $20.00"), customization_options
  ({name: [{value, image}]}), category, query, product_category, images}
- attributes, e.g. `items_ins_v2_1000.json`: {asin: {attributes: [...], ...}}
- human goals, `items_human_ins.json`: {asin: [{instruction, instruction_attributes,
  instruction_options}]}
- optional reviews, `reviews.json`: [{asin, reviews: [{title, score|stars, body|review}], average_rating}]
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from decimal import Decimal
from typing import Any

from envs.webshop.types import Goal, Product, Review

PRICE_LEVELS = [10.0 * i for i in range(1, 100)]
GOAL_SHUFFLE_SEED = 233


@dataclasses.dataclass(frozen=True)
class Catalog:
    """All products (search order is by BM25, so list order only fixes ids), prices and goals."""

    products: tuple[Product, ...]
    by_asin: dict[str, Product]
    prices: dict[str, float]
    goals: tuple[Goal, ...]


def parse_pricing(text: str | None) -> tuple[tuple[float, ...], str]:
    """"$10.00 - $20.00" -> ((10.0, 20.0), "$10.0 to $20.0"); empty -> ((100.0,), "$100.0")."""
    if not text:
        return (100.0,), "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", part) or "0")) for part in text.split("$")[1:]]
    if not values:
        return (100.0,), "$100.0"
    if len(values) == 1:
        return (values[0],), f"${values[0]}"
    return (values[0], values[1]), f"${values[0]} to ${values[1]}"


def product_from_raw(raw: dict[str, Any], attributes: list[str], reviews: dict[str, Any] | None) -> Product:
    """One raw product record of the original format -> Product."""
    pricing, price_tag = parse_pricing(raw.get("pricing"))
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options[name.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    bullets = raw.get("small_description") or []
    review_list = tuple(
        Review(
            title=str(r.get("title", "")),
            score=float(r.get("score", r.get("stars", 0)) or 0),
            body=str(r.get("body", r.get("review", ""))),
        )
        for r in (reviews or {}).get("reviews", [])
    )
    return Product(
        asin=raw["asin"],
        title=raw["name"],
        query=raw["query"].lower().strip(),
        category=raw.get("category", ""),
        product_category=raw.get("product_category", ""),
        description=raw.get("full_description") or "",
        bullet_points=tuple(bullets) if isinstance(bullets, list) else (str(bullets),),
        attributes=tuple(attributes) or ("DUMMY_ATTR",),
        options=options,
        pricing=pricing,
        price_tag=price_tag,
        rating=str((reviews or {}).get("average_rating", "N.A.")),
        reviews=review_list,
    )


def product_prices(products: tuple[Product, ...], seed: int) -> dict[str, float]:
    """The price a product sells at: its price, or a seeded uniform draw inside its range."""
    rng = random.Random(seed)
    return {p.asin: p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2]) for p in products}


def price_limit(price: float, rng: random.Random) -> tuple[float, str]:
    """The goal's budget: the larger of two of the four price levels above `price` (or none)."""
    above = [level for level in PRICE_LEVELS if level > price][:4]
    if len(above) < 2:
        return 1_000_000.0, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def human_goals(products: tuple[Product, ...], prices: dict[str, float],
                instructions: dict[str, list[dict[str, Any]]], seed: int) -> list[Goal]:
    """Goals from human instructions, with budgets; products without attributes are skipped."""
    rng = random.Random(seed)
    goals = []
    for product in products:
        for item in instructions.get(product.asin, []):
            attrs = tuple(item.get("instruction_attributes") or ())
            if not attrs:
                continue
            upper, price_text = price_limit(prices[product.asin], rng)
            options = item.get("instruction_options") or []
            goals.append(Goal(
                asin=product.asin,
                instruction_text=item["instruction"].strip(".") + price_text,
                attributes=attrs,
                goal_options=tuple(options.values() if isinstance(options, dict) else options),
                price_upper=upper,
                query=product.query,
                name=product.title,
                category=product.category,
                product_category=product.product_category,
            ))
    return goals


def build_catalog(raw_products: list[dict[str, Any]], attributes: dict[str, Any],
                  instructions: dict[str, list[dict[str, Any]]], reviews: list[dict[str, Any]] | None = None,
                  num_products: int | None = None, seed: int = 0) -> Catalog:
    """Raw records of the original format -> a Catalog with deterministic prices and goal order."""
    review_by_asin = {r["asin"]: r for r in (reviews or [])}
    seen: set[str] = set()
    products = []
    for raw in raw_products[:num_products] if num_products else raw_products:
        asin = raw.get("asin", "nan")
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        attrs = (attributes.get(asin) or {}).get("attributes") or []
        products.append(product_from_raw(raw, attrs, review_by_asin.get(asin)))
    products_t = tuple(products)
    prices = product_prices(products_t, seed)
    goals = human_goals(products_t, prices, instructions, seed)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    if not goals:
        raise ValueError("The catalogue has no goals: no product has instructions with attributes.")
    return Catalog(products_t, {p.asin: p for p in products_t}, prices, tuple(goals))


def _find(data_dir: str, name: str | None, pattern: str) -> str | None:
    if name:
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"WebShop data file {path} not found; check data_dir and the file name.")
        return path
    matches = sorted(f for f in os.listdir(data_dir) if re.fullmatch(pattern, f))
    return os.path.join(data_dir, matches[0]) if matches else None


def load_catalog(data_dir: str, products_file: str | None = None, attributes_file: str | None = None,
                 goals_file: str | None = None, reviews_file: str | None = None,
                 num_products: int | None = None, seed: int = 0) -> Catalog:
    """Load the original WebShop files from `data_dir` (file names as in the module docstring)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"WebShop data_dir {data_dir!r} is not a folder.")
    paths = {
        "products": _find(data_dir, products_file, r"items_shuffle(_\w+)?\.json"),
        "attributes": _find(data_dir, attributes_file, r"items_ins_v2(_\w+)?\.json"),
        "goals": _find(data_dir, goals_file, r"items_human_ins\.json"),
        "reviews": _find(data_dir, reviews_file, r"(items_)?reviews(_\w+)?\.json"),
    }
    for key in ("products", "goals"):
        if paths[key] is None:
            raise FileNotFoundError(f"No {key} file in {data_dir}; expected names are listed in envs/webshop/data.py.")
    loaded: dict[str, Any] = {}
    for key, path in paths.items():
        if path is not None:
            with open(path) as f:
                loaded[key] = json.load(f)
    return build_catalog(loaded["products"], loaded.get("attributes", {}), loaded["goals"],
                         loaded.get("reviews"), num_products=num_products, seed=seed)
