"""A deterministic synthetic WebShop catalogue (a few hundred products with attributes, options,
prices, reviews and human-style goal instructions), written in the original's file format.

`python -m envs.webshop.generate --out data/webshop_synth --num-products 300` writes
items_shuffle_synth.json, items_ins_v2_synth.json, items_human_ins.json and reviews.json;
`synthetic_catalog()` builds the same catalogue in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from functools import lru_cache
from typing import Any

from envs.webshop.data import Catalog, build_catalog

# (query, category, breadcrumb, title noun, attribute pool, options, price range)
PRODUCT_TYPES: tuple[tuple[Any, ...], ...] = (
    ("men's running shoes", "fashion", "clothing, shoes & jewelry › men › shoes › athletic",
     "Running Shoes", ("non slip", "rubber sole", "lightweight", "breathable mesh", "arch support", "memory foam"),
     {"color": ("black", "navy blue", "light gray", "white", "red"), "size": ("7", "8", "9", "10", "11", "12")},
     (25, 120)),
    ("women's yoga pants", "fashion", "clothing, shoes & jewelry › women › clothing › active",
     "Yoga Pants", ("high waist", "tummy control", "moisture wicking", "four way stretch", "machine wash", "pocket"),
     {"color": ("black", "wine red", "olive green", "dark gray", "pink"),
      "size": ("small", "medium", "large", "x-large")},
     (15, 60)),
    ("coffee maker", "kitchen", "home & kitchen › kitchen & dining › coffee, tea & espresso",
     "Coffee Maker",
     ("programmable", "stainless steel", "auto shut off", "dishwasher safe", "bpa free", "thermal carafe"),
     {"color": ("black", "silver", "white", "red"), "capacity": ("4 cup", "8 cup", "12 cup")},
     (30, 180)),
    ("hair extension", "beauty", "beauty & personal care › hair care › hair extensions, wigs & accessories",
     "Hair Extensions", ("natural looking", "clip in", "heat resistant", "long lasting", "human hair", "easy apply"),
     {"color": ("natural black", "dark brown", "blonde", "auburn"), "size": ("14 inch", "18 inch", "22 inch")},
     (12, 90)),
    ("bluetooth headphones", "electronics", "electronics › headphones, earbuds & accessories › headphones",
     "Bluetooth Headphones",
     ("noise cancelling", "wireless", "long battery life", "foldable", "built in microphone", "fast charging"),
     {"color": ("black", "white", "blue", "rose gold")},
     (20, 250)),
    ("protein bar", "grocery", "grocery & gourmet food › snack foods › bars › protein bars",
     "Protein Bars", ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based"),
     {"flavor name": ("chocolate peanut butter", "cookie dough", "vanilla almond", "salted caramel"),
      "size": ("12 count", "24 count")},
     (10, 45)),
    ("throw pillow covers", "home", "home & kitchen › home décor products › decorative pillows, inserts & covers",
     "Throw Pillow Covers", ("machine washable", "hidden zipper", "super soft", "velvet", "double sided", "set of 2"),
     {"color": ("mustard yellow", "navy blue", "blush pink", "cream white", "teal"),
      "size": ("18x18 inch", "20x20 inch", "26x26 inch")},
     (9, 40)),
    ("dog bed", "pet supplies", "pet supplies › dogs › beds & furniture › beds",
     "Dog Bed", ("orthopedic", "waterproof", "removable cover", "non skid bottom", "machine washable", "memory foam"),
     {"color": ("brown", "gray", "beige", "blue"), "size": ("small", "medium", "large", "x-large")},
     (25, 140)),
    ("led desk lamp", "home", "tools & home improvement › lighting & ceiling fans › lamps & shades › desk lamps",
     "LED Desk Lamp",
     ("dimmable", "usb charging port", "eye caring", "touch control", "adjustable arm", "energy saving"),
     {"color": ("black", "white", "silver")},
     (18, 75)),
    ("face moisturizer", "beauty", "beauty & personal care › skin care › face › creams & moisturizers",
     "Face Moisturizer", ("fragrance free", "hyaluronic acid", "oil free", "sensitive skin", "cruelty free", "spf 30"),
     {"size": ("1.7 fl oz", "3.4 fl oz")},
     (8, 65)),
)

BRAND_SYLLABLES = ("zen", "lu", "ko", "vi", "ra", "mo", "ta", "ne", "xo", "bel", "dor", "fin", "gal", "hux", "qui")
STYLE_WORDS = ("Classic", "Premium", "Everyday", "Ultra", "Pro", "Comfort", "Essential", "Deluxe", "Urban", "Sport")
REVIEW_TITLES = ("Great value", "Works as described", "Not bad", "Love it", "Could be better")

INSTRUCTION_TEMPLATES = (
    "i am looking for {attrs} {noun}{opts}",
    "i need {attrs} {noun}{opts}",
    "find me {attrs} {noun}{opts}",
    "i want to buy {attrs} {noun}{opts}",
)


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(BRAND_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _asin(index: int, rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNPQRSTUVWXYZ0123456789"
    return "B0" + "".join(rng.choice(alphabet) for _ in range(6)) + f"{index % 100:02d}"


def _option_text(goal_options: dict[str, str]) -> str:
    parts = []
    for name, value in goal_options.items():
        parts.append(f"{value} color" if name == "color" else f"size {value}" if name == "size" else value)
    return (" in " + " and ".join(parts)) if parts else ""


def generate_raw(num_products: int = 300, seed: int = 0) -> dict[str, Any]:
    """Raw records in the original file format: {"products", "attributes", "instructions", "reviews"}."""
    rng = random.Random(seed)
    products, attributes, instructions, reviews = [], {}, {}, []
    asins: set[str] = set()
    for index in range(num_products):
        query, category, crumb, noun, pool, option_pool, (low, high) = PRODUCT_TYPES[index % len(PRODUCT_TYPES)]
        asin = _asin(index, rng)
        while asin in asins:
            asin = _asin(index, rng)
        asins.add(asin)
        attrs = rng.sample(pool, rng.randint(2, 3))
        options = {name: sorted(rng.sample(values, rng.randint(min(2, len(values)), len(values))), key=values.index)
                   for name, values in option_pool.items()}
        title = f"{_brand(rng)} {rng.choice(STYLE_WORDS)} {noun} - {attrs[0].title()}, {rng.choice(attrs[1:]).title()}"
        price = round(rng.uniform(low, high), 2)
        pricing = f"${price:.2f}" if rng.random() < 0.8 else f"${price:.2f} - ${price * 1.3:.2f}"
        bullets = [f"{a.capitalize()}: designed with {a} for everyday use." for a in attrs]
        products.append({
            "asin": asin, "name": title, "query": query, "category": category, "product_category": crumb,
            "full_description": f"This {noun.lower()} from our {category} line is {', '.join(attrs)}. "
                                f"A reliable choice backed by a one year warranty.",
            "small_description": bullets, "pricing": pricing, "images": [f"https://example.invalid/{asin}.jpg"],
            "customization_options": {name: [{"value": v, "image": None} for v in values]
                                      for name, values in options.items()},
        })
        attributes[asin] = {"attributes": attrs}
        goals = []
        for _ in range(rng.randint(1, 2)):
            wanted = rng.sample(attrs, rng.randint(1, min(2, len(attrs))))
            goal_options = {name: rng.choice(values) for name, values in options.items()}
            text = rng.choice(INSTRUCTION_TEMPLATES).format(
                attrs=" and ".join(wanted), noun=noun.lower(), opts=_option_text(goal_options))
            goals.append({"instruction": text, "instruction_attributes": wanted,
                          "instruction_options": list(goal_options.values())})
        instructions[asin] = goals
        reviews.append({"asin": asin, "average_rating": round(rng.uniform(3.0, 5.0), 1), "reviews": [
            {"title": rng.choice(REVIEW_TITLES), "stars": rng.randint(2, 5),
             "review": f"The {noun.lower()} is {rng.choice(attrs)}."}
            for _ in range(rng.randint(0, 2))]})
    return {"products": products, "attributes": attributes, "instructions": instructions, "reviews": reviews}


@lru_cache(maxsize=8)
def synthetic_catalog(num_products: int = 300, seed: int = 0) -> Catalog:
    """The synthetic catalogue built through the same path as the original files (cached)."""
    raw = generate_raw(num_products, seed)
    return build_catalog(raw["products"], raw["attributes"], raw["instructions"], raw["reviews"], seed=seed)


def write_raw(out_dir: str, num_products: int = 300, seed: int = 0) -> list[str]:
    """Write the synthetic catalogue as original-format JSON files into `out_dir`; returns paths."""
    raw = generate_raw(num_products, seed)
    os.makedirs(out_dir, exist_ok=True)
    names = {"products": "items_shuffle_synth.json", "attributes": "items_ins_v2_synth.json",
             "instructions": "items_human_ins.json", "reviews": "reviews.json"}
    paths = []
    for key, name in names.items():
        path = os.path.join(out_dir, name)
        with open(path, "w") as f:
            json.dump(raw[key], f, indent=1)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-products", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for path in write_raw(args.out, args.num_products, args.seed):
        print(path)


if __name__ == "__main__":
    main()
