"""String matching used by WebShop's purchase score: fuzzy token-set ratio, colour normalisation,
and the content words of a product title.

The original uses thefuzz (rapidfuzz underneath) and spaCy's noun tags; here the same
token-set ratio is computed with an LCS (Indel) similarity, and content words replace spaCy nouns
(no model download) -- see docs/remote_envs.md for this deviation.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NON_ALNUM = re.compile(r"[^0-9a-z]+")

# Colour words: an option value that contains one is compared by that colour only.
COLOR_WORDS = (
    "apricot", "aqua", "beige", "black", "blue", "blush", "bronze", "brown", "burgundy", "camel",
    "camo", "champagne", "charcoal", "chocolate", "coffee", "copper", "coral", "cream", "denim",
    "fuchsia", "gold", "gray", "green", "grey", "indigo", "ivory", "khaki", "lavender", "lemon",
    "lilac", "lime", "magenta", "maroon", "mauve", "mint", "mocha", "multicolor", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pink", "plum", "purple", "rainbow",
    "red", "rose", "rust", "sand", "silver", "slate", "tan", "taupe", "teal", "turquoise",
    "violet", "walnut", "white", "wine", "yellow",
)

STOP_WORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or so that the this to was "
    "with without your you our my me i we pack count set piece pcs inch inches oz ounce ounces "
    "lb lbs ml size color colour new".split()
)


def default_process(text: str) -> str:
    """Lower-case, non-alphanumerics to spaces, trimmed (rapidfuzz's default processor)."""
    return _NON_ALNUM.sub(" ", text.lower()).strip()


@lru_cache(maxsize=65536)
def _lcs_len(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for ch in a:
        cur = [0]
        for j, bj in enumerate(b):
            cur.append(prev[j] + 1 if ch == bj else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def ratio(a: str, b: str) -> float:
    """Normalised Indel similarity in [0, 100]: 200 * LCS / (len(a) + len(b))."""
    total = len(a) + len(b)
    return 100.0 if total == 0 else 200.0 * _lcs_len(a, b) / total


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's `token_set_ratio` (rounded to an int): 100 when one token set contains the other."""
    ta, tb = set(default_process(a).split()), set(default_process(b).split())
    if not ta or not tb:
        return 0
    common = " ".join(sorted(ta & tb))
    only_a = " ".join(sorted(ta - tb))
    only_b = " ".join(sorted(tb - ta))
    if common and (not only_a or not only_b):
        return 100
    with_a = f"{common} {only_a}".strip()
    with_b = f"{common} {only_b}".strip()
    scores = [ratio(with_a, with_b)]
    if common:
        scores += [ratio(common, with_a), ratio(common, with_b)]
    return int(round(max(scores)))


def normalize_color(value: str) -> str:
    """The first colour word contained in `value`, or `value` unchanged."""
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value


def content_words(title: str) -> list[str]:
    """Lower-case alphabetic words of a title minus stop words and colours (stand-in for nouns)."""
    words = re.findall(r"[a-z][a-z'-]*[a-z]|[a-z]", title.lower())
    return [w for w in words if w not in STOP_WORDS and w not in COLOR_WORDS and len(w) > 1]
