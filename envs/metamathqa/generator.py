"""Seeded grade-school arithmetic word problems in MetaMathQA's record format, for offline use.

Each record is {"query", "response", "type"}; the response shows the working as "a op b = c"
lines and ends with "The answer is: X" like MetaMathQA. Answers are exact (integers, or finite
decimals for the discount template). Numbers appear in the query in a fixed order per template.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Callable

NAMES = ("Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jamal",
         "Kira", "Liam", "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sam", "Tariq")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells")

Record = dict[str, str]


def format_number(value: Fraction | int) -> str:
    """An exact value as MetaMathQA writes it: "12", "30.6", "-4" (finite decimals only)."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    places = 0
    scaled = value
    while scaled.denominator != 1:
        scaled *= 10
        places += 1
    sign = "-" if scaled < 0 else ""
    digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _record(kind: str, query: str, steps: list[str], answer: Fraction | int) -> Record:
    text = "\n".join(steps + [f"The answer is: {format_number(answer)}"])
    return {"query": query, "response": text, "type": f"offline/{kind}"}


def _change(rng: random.Random) -> Record:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    count, price = rng.randint(2, 9), rng.randint(1, 12)
    cost = count * price
    bill = next(b for b in (10, 20, 50, 100, 200) if b > cost)
    query = (f"{name} buys {count} {item} at ${price} each and pays with a ${bill} bill. "
             f"How much change, in dollars, does {name} get back?")
    steps = [f"{name} spends {count} * {price} = {cost} dollars.",
             f"The change is {bill} - {cost} = {bill - cost} dollars."]
    return _record("change", query, steps, bill - cost)


def _sharing(rng: random.Random) -> Record:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    each, friends = rng.randint(2, 9), rng.randint(2, 6)
    total = each * friends + rng.randint(1, 20)
    given = each * friends
    query = (f"{name} has {total} {item} and gives {each} {item} to each of {friends} friends. "
             f"How many {item} does {name} have left?")
    steps = [f"{name} gives away {each} * {friends} = {given} {item}.",
             f"{name} has {total} - {given} = {total - given} {item} left."]
    return _record("sharing", query, steps, total - given)


def _distance(rng: random.Random) -> Record:
    speed, hours = rng.randint(20, 70), rng.randint(2, 9)
    query = (f"A train travels at {speed} miles per hour for {hours} hours. "
             f"How many miles does it travel?")
    return _record("distance", query, [f"It travels {speed} * {hours} = {speed * hours} miles."],
                   speed * hours)


def _equal_split(rng: random.Random) -> Record:
    item = rng.choice(ITEMS)
    children, each = rng.randint(2, 12), rng.randint(2, 15)
    total = children * each
    query = (f"{total} {item} are shared equally among {children} children. "
             f"How many {item} does each child get?")
    return _record("equal_split", query, [f"Each child gets {total} / {children} = {each} {item}."],
                   each)


def _savings(rng: random.Random) -> Record:
    name = rng.choice(NAMES)
    weekly, weeks = rng.randint(5, 40), rng.randint(3, 12)
    saved = weekly * weeks
    spent = rng.randint(1, saved - 1)
    query = (f"{name} saves ${weekly} every week for {weeks} weeks and then spends ${spent} on a "
             f"gift. How many dollars does {name} have left?")
    steps = [f"{name} saves {weekly} * {weeks} = {saved} dollars.",
             f"After the gift {name} has {saved} - {spent} = {saved - spent} dollars."]
    return _record("savings", query, steps, saved - spent)


def _boxes(rng: random.Random) -> Record:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    boxes, per_box = rng.randint(2, 9), rng.randint(3, 12)
    total = boxes * per_box
    lost = rng.randint(1, total - 1)
    query = (f"{name} has {boxes} boxes with {per_box} {item} in each box. {name} loses {lost} "
             f"of the {item}. How many {item} are left?")
    steps = [f"There are {boxes} * {per_box} = {total} {item}.",
             f"{total} - {lost} = {total - lost} {item} are left."]
    return _record("boxes", query, steps, total - lost)


def _discount(rng: random.Random) -> Record:
    price = 4 * rng.randint(2, 50)
    percent = rng.choice((10, 15, 20, 25, 30, 40, 50, 75))
    keep = 100 - percent
    sale = Fraction(price * keep, 100)
    query = (f"A jacket costs ${price}. It is on sale for {percent}% off. "
             f"What is the sale price in dollars?")
    steps = [f"The buyer pays 100 - {percent} = {keep} percent of the price.",
             f"{price} * {keep} = {price * keep}, and {price * keep} / 100 = {format_number(sale)} dollars."]
    return _record("discount", query, steps, sale)


def _average(rng: random.Random) -> Record:
    name = rng.choice(NAMES)
    a, b = rng.randint(60, 100), rng.randint(60, 100)
    c = rng.choice([v for v in range(60, 101) if (a + b + v) % 3 == 0])
    total = a + b + c
    query = f"{name} scored {a}, {b} and {c} on three tests. What is {name}'s average score?"
    steps = [f"The scores add up to {a} + {b} = {a + b}, and {a + b} + {c} = {total}.",
             f"The average is {total} / 3 = {total // 3}."]
    return _record("average", query, steps, total // 3)


def _production(rng: random.Random) -> Record:
    per_hour, hours, days = rng.randint(3, 20), rng.randint(2, 8), rng.randint(2, 6)
    daily = per_hour * hours
    query = (f"A baker makes {per_hour} loaves per hour and works {hours} hours a day for "
             f"{days} days. How many loaves does the baker make?")
    steps = [f"Each day the baker makes {per_hour} * {hours} = {daily} loaves.",
             f"Over {days} days that is {daily} * {days} = {daily * days} loaves."]
    return _record("production", query, steps, daily * days)


def _fraction_of(rng: random.Random) -> Record:
    den = rng.choice((3, 4, 5, 6, 8))
    num = rng.randint(1, den - 1)
    students = den * rng.randint(3, 12)
    part = students * num // den
    query = (f"A class has {students} students and {num}/{den} of them walk to school. "
             f"How many students do not walk to school?")
    steps = [f"{students} * {num} = {students * num}, and {students * num} / {den} = {part} "
             f"students walk.", f"{students} - {part} = {students - part} students do not walk."]
    return _record("fraction_of", query, steps, students - part)


TEMPLATES: dict[str, Callable[[random.Random], Record]] = {
    "change": _change, "sharing": _sharing, "distance": _distance, "equal_split": _equal_split,
    "savings": _savings, "boxes": _boxes, "discount": _discount, "average": _average,
    "production": _production, "fraction_of": _fraction_of,
}


def generate_problem(seed: int) -> Record:
    """The word problem of integer `seed` (same seed, same record)."""
    rng = random.Random(seed)
    kind = rng.choice(sorted(TEMPLATES))
    return TEMPLATES[kind](rng)
