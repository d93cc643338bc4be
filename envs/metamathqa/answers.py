"""MetaMathQA answer labels and matching.

A label is the text after "The answer is: " in a response. An answer matches when (1) it equals
the label after the original's normalisation (lower-case, all whitespace removed), or (2) both
are equal after light LaTeX clean-up ($, \\boxed, \\text, \\left/\\right, \\dfrac, trailing period),
or (3) both read as the same exact number: 0.5 = 1/2 = .50 = \\frac{1}{2}; thousands commas,
currency signs and trailing unit words are ignored; a percent sign is dropped (so "50%" equals
"50", not "0.5"). Answers longer than MAX_ANSWER_CHARS use rule (1) only.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_ANSWER_CHARS = 200

_LABEL_RE = re.compile(r"The answer is: (.*?)$", re.DOTALL)
_WS_RE = re.compile(r"\s+")
_PREFIX_RE = re.compile(r"^\s*(the\s+)?(final\s+)?answer\s*(is)?\s*[:=]?\s*", re.IGNORECASE)
_WRAPPERS = ("\\boxed", "\\text", "\\textbf", "\\mathrm", "\\mbox", "\\fbox")
_DROP = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "\\$", "$",
         "^\\circ", "^{\\circ}", "°", "\\%", "%")

_INT = r"\d+"
_THOUSANDS = r"\d{1,3}(?:,\d{3})+"
_DECIMAL = rf"(?:{_THOUSANDS}|{_INT})(?:\.\d+)?|\.\d+"
_NUMBER_RE = re.compile(
    r"^(?P<sign>[+-]?)\s*(?:"
    r"\\frac\{\s*(?P<fn>[+-]?\d+)\s*\}\{\s*(?P<fd>[+-]?\d+)\s*\}"
    r"|\\frac(?P<sn>\d)(?P<sd>\d)"
    rf"|(?P<qn>{_INT})\s*/\s*(?P<qd>{_INT})"
    rf"|(?P<dec>{_DECIMAL})"
    r")\s*(?P<unit>(?:[a-z]{2,}(?:\^?[23])?\.?(?:\s+[a-z]{2,}(?:\^?[23])?\.?){0,2})?)\.?$"
)
# Words after a number that make it a different quantity, not a unit.
_NOT_UNITS = frozenset({"pi", "sqrt", "infty", "inf", "log", "ln", "sin", "cos", "tan", "times",
                        "cdot", "mod", "and", "or"})
_ASSIGN_RE = re.compile(r"^[a-z]\s*=\s*")


def extract_label(response: str) -> str | None:
    """The text after the first "The answer is: " up to the end, stripped (None if absent)."""
    match = _LABEL_RE.search(response)
    return match.group(1).strip() if match else None


def normalize_original(text: str) -> str:
    """The original's normalisation: lower-case and remove all whitespace."""
    return _WS_RE.sub("", text.strip().lower())


def clean_latex(text: str) -> str:
    """Strip an "answer is" prefix, math delimiters, wrappers and spacing commands; lower-case."""
    s = _PREFIX_RE.sub("", text.strip())
    for wrapper in _WRAPPERS:
        s = _unwrap(s, wrapper)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for token in _DROP:
        s = s.replace(token, "")
    s = s.strip().rstrip(".").strip().lower()
    return _ASSIGN_RE.sub("", s)


def matching_brace(s: str, open_at: int) -> int:
    """Index of the "}" that closes the "{" at `s[open_at]`; -1 if it is never closed."""
    depth = 0
    for i in range(open_at, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _unwrap(s: str, command: str) -> str:
    """Replace `command{X}` by X (one brace level deep is enough for answers)."""
    start = s.find(command + "{")
    while start != -1:
        open_at = start + len(command)
        end = matching_brace(s, open_at)
        if end == -1:
            return s
        s = s[:start] + s[open_at + 1:end] + s[end + 1:]
        start = s.find(command + "{")
    return s


def parse_number(text: str) -> Fraction | None:
    """The exact value of a cleaned answer that is a single number (with optional units)."""
    match = _NUMBER_RE.match(text.strip())
    if match is None:
        return None
    g = match.groupdict()
    if any(word.strip(".^23") in _NOT_UNITS for word in g["unit"].split()):
        return None
    if g["fn"] is not None:
        num, den = int(g["fn"]), int(g["fd"])
    elif g["sn"] is not None:
        num, den = int(g["sn"]), int(g["sd"])
    elif g["qn"] is not None:
        num, den = int(g["qn"]), int(g["qd"])
    else:
        value = Fraction(g["dec"].replace(",", ""))
        num, den = value.numerator, value.denominator
    if den == 0:
        return None
    value = Fraction(num, den)
    return -value if g["sign"] == "-" else value


MATCH_RULES = ("lenient", "ragen")  # rules (1)-(3) of the module docstring; rule (1) alone, the original's


def check_match_rule(rule: str) -> str:
    """`rule` if it is one of MATCH_RULES, else a ValueError naming both."""
    if rule not in MATCH_RULES:
        raise ValueError(f"Unknown MetaMathQA answer_match {rule!r}; use 'lenient' (the original's rule plus LaTeX "
                         "clean-up and numeric equality) or 'ragen' (the original's rule only).")
    return rule


def answers_match(answer: str, label: str | None, rule: str = "lenient") -> bool:
    """True if `answer` is the same answer as `label` under `rule` (MATCH_RULES; see the module docstring)."""
    check_match_rule(rule)
    if label is None:
        return False
    if normalize_original(answer) == normalize_original(label):
        return True
    if rule == "ragen":
        return False
    if len(answer) > MAX_ANSWER_CHARS or len(label) > MAX_ANSWER_CHARS:
        return False
    a, b = clean_latex(answer), clean_latex(label)
    if a and _WS_RE.sub("", a) == _WS_RE.sub("", b):
        return True
    va, vb = parse_number(a), parse_number(b)
    return va is not None and va == vb
