"""Display names of a game's PDDL objects, by ALFWorld's rule (its Demangler, which RAGEN's env applies).

An id `base_bar_rest` shows as "base n": ids are taken in sorted order, and each base's numbers n = count..1 are
handed out in that order (the first sorted id of a base gets the highest number); an id that holds "basin" adds
"basin" to its base ("sink_bar_..._bar_sinkbasin" is a "sinkbasin"). An id without "_bar_" shows as itself with
ALFWorld's escapes undone, followed by a space.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

_ESCAPES = (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ","))


def _base(object_id: str) -> str | None:
    if "_bar_" not in object_id:
        return None
    base = object_id.split("_bar_", 1)[0]
    return base + "basin" if "basin" in object_id else base


def display_names(ids: Iterable[str]) -> dict[str, str]:
    """{PDDL object id: the name the game shows} for every id of one game (module docstring)."""
    ordered = sorted(set(ids))
    remaining = Counter(b for b in map(_base, ordered) if b is not None)
    names = {}
    for object_id in ordered:
        base = _base(object_id)
        if base is None:
            text = object_id
            for escaped, plain in _ESCAPES:
                text = text.replace(escaped, plain)
            names[object_id] = f"{text} "
        else:
            names[object_id] = f"{base} {remaining[base]}"
            remaining[base] -= 1
    return names
