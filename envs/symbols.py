"""Grid symbol tables in RAGEN's form, checked: grid_lookup (cell code -> symbol) draws the grid, grid_vocab
(symbol -> meaning) is the system prompt's legend.

A table is well-formed when every cell kind of the env has its own one-character symbol and the legend lists
exactly the symbols the grid is drawn in. Either dict alone is completed from the other: a lookup alone gets
RAGEN's meaning words for the legend, a legend alone draws each kind in the symbol it calls by that kind's meaning
word (or in the env's default symbols when it lists exactly those, relabelled).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from envs.ragen_keys import plain

_LINE_BREAKS = ("\n", "\r")


def legend_text(vocab: Mapping[str, str]) -> str:
    """RAGEN's legend of grid_vocab, leading newline included (appended to the instruction)."""
    return "\nThe meaning of each symbol in the state is:\n" + ", ".join(f"{k}: {v}" for k, v in vocab.items())


def _check_symbol(symbol: Any, where: str, env: str) -> str:
    if not isinstance(symbol, str) or len(symbol) != 1 or symbol in _LINE_BREAKS:
        raise ValueError(f"{env}: {where} is {symbol!r}; each grid symbol must be one character other than a line "
                         "break (the grid is one symbol per cell, one row per line)")
    return symbol


def check_lookup(lookup: Mapping[Any, Any], kinds: Sequence[str], env: str) -> dict[int, str]:
    """grid_lookup as {code: symbol} in code order (codes 0..len(kinds)-1, digit strings read as ints); ValueError
    names a missing or unknown code, a bad symbol, or one symbol drawing two kinds."""
    table = plain(lookup)
    if not isinstance(table, dict):
        raise ValueError(f"{env}: grid_lookup must be a dict {{cell code: symbol}}, got {lookup!r}")
    known = ", ".join(f"{code}: {kind}" for code, kind in enumerate(kinds))
    unknown = sorted(repr(k) for k in table if not (isinstance(k, int) and 0 <= k < len(kinds)))
    if unknown:
        raise ValueError(f"{env}: grid_lookup has codes {', '.join(unknown)} that are no cell kind; its codes are "
                         f"{known}")
    missing = [f"{code} ({kinds[code]})" for code in range(len(kinds)) if code not in table]
    if missing:
        raise ValueError(f"{env}: grid_lookup misses code {', '.join(missing)}; give a symbol for every kind: {known}")
    out = {code: _check_symbol(table[code], f"grid_lookup[{code}] ({kinds[code]})", env) for code in range(len(kinds))}
    by_symbol: dict[str, list[str]] = {}
    for code, symbol in out.items():
        by_symbol.setdefault(symbol, []).append(kinds[code])
    shared = [f"{symbol!r} draws {' and '.join(names)}" for symbol, names in by_symbol.items() if len(names) > 1]
    if shared:
        raise ValueError(f"{env}: grid_lookup is ambiguous: {'; '.join(shared)}; give each kind its own symbol")
    return out


def _check_vocab(vocab: Mapping[Any, Any], env: str) -> dict[str, str]:
    table = plain(vocab)
    if not isinstance(table, dict):
        raise ValueError(f"{env}: grid_vocab must be a dict {{symbol: meaning}}, got {vocab!r}")
    for symbol, meaning in table.items():
        _check_symbol(symbol, f"the grid_vocab symbol {symbol!r}", env)
        if not isinstance(meaning, str):
            raise ValueError(f"{env}: grid_vocab[{symbol!r}] is {meaning!r}; a meaning is text, e.g. 'wall'")
    return table


def _lookup_from_vocab(vocab: dict[str, str], kinds: Sequence[str], default: dict[int, str],
                       env: str) -> dict[int, str]:
    if set(vocab) == set(default.values()):
        return dict(default)
    lookup = {}
    for code, kind in enumerate(kinds):
        named = [symbol for symbol, meaning in vocab.items() if meaning.strip().lower() == kind]
        if len(named) != 1:
            found = "no symbol" if not named else f"symbols {', '.join(map(repr, named))}"
            raise ValueError(f"{env}: grid_vocab {vocab!r} names {found} as {kind!r}, so the grid's symbol for that "
                             f"kind is unknown: give grid_lookup too (cell code -> symbol), or call each kind by its "
                             f"name ({', '.join(kinds)}) once")
        lookup[code] = named[0]
    return check_lookup(lookup, kinds, env)


def symbol_table(lookup: Mapping[Any, Any] | None, vocab: Mapping[Any, Any] | None, kinds: Sequence[str],
                 default: Mapping[int, str], env: str) -> tuple[dict[int, str], dict[str, str]]:
    """(grid_lookup {code: symbol}, grid_vocab {symbol: meaning}) from RAGEN's two dicts, either or both None.

    kinds: the meaning word of each cell code, in code order; default: the env's default lookup. ValueError names
    the fault: a kind without a symbol, a symbol for two kinds, a legend that lists other symbols than the grid's,
    or a legend calling a symbol a kind the lookup draws in another symbol."""
    if lookup is None and vocab is None:
        lookup = default
    if lookup is not None:
        table = check_lookup(lookup, kinds, env)
        if vocab is None:
            return table, {table[code]: kind for code, kind in enumerate(kinds)}
    legend = _check_vocab(vocab, env)
    if lookup is None:
        table = _lookup_from_vocab(legend, kinds, dict(default), env)
    drawn = set(table.values())
    extra, unlisted = [s for s in legend if s not in drawn], [s for s in table.values() if s not in legend]
    if extra or unlisted:
        parts = ([f"lists {', '.join(map(repr, extra))} that grid_lookup does not draw"] if extra else []) + (
            [f"misses {', '.join(map(repr, unlisted))} that grid_lookup draws"] if unlisted else [])
        raise ValueError(f"{env}: grid_vocab {' and '.join(parts)}; the legend must list exactly the grid's symbols "
                         f"({' '.join(table.values())})")
    for symbol, meaning in legend.items():
        word = meaning.strip().lower()
        if word in kinds and table[kinds.index(word)] != symbol:
            raise ValueError(f"{env}: grid_vocab calls {symbol!r} the {word} but grid_lookup draws the {word} as "
                             f"{table[kinds.index(word)]!r}; make the two tables agree")
    return table, legend


def grid_codes(text: str, lookup: Mapping[int, str], env: str, names: str) -> np.ndarray:
    """A drawn grid -> its cells' lookup codes [rows, cols] int8 (the inverse of drawing with `lookup`). ValueError
    names an empty grid, a ragged row, or an unknown symbol with its row and column; `names` lists the symbols."""
    inverse = {symbol: code for code, symbol in lookup.items()}
    lines = text.strip("\n").split("\n")
    if not lines[0]:
        raise ValueError(f"{env} grid is empty; draw one row per line.")
    for r, line in enumerate(lines):
        if len(line) != len(lines[0]):
            raise ValueError(f"{env} grid row {r} has {len(line)} cells but row 0 has {len(lines[0])}; "
                             "every row needs the same width.")
        for c, ch in enumerate(line):
            if ch not in inverse:
                raise ValueError(f"{env} grid has unknown symbol {ch!r} at row {r}, col {c}; use {names}.")
    return np.array([[inverse[ch] for ch in line] for line in lines], np.int8)
