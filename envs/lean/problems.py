"""miniF2F-style theorems: data type, local loader (JSONL / JSON / .lean), proof assembly.

JSON(L) rows (miniF2F exports such as CoderBak/minif2f, the dataset RAGEN uses): `formal_statement`
(Lean 4, may start with imports/opens and end in `:= by sorry`), `natural_language_statement` (or
`informal_stmt` / `informal_statement` / `nl_statement`), `name` (or `id`), optional `header`.
A `.lean` file: a header (imports, opens, options) followed by theorems, each ending in `sorry`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Sequence

DEFAULT_IMPORTS = "import Mathlib\nimport Aesop\nset_option maxHeartbeats 0\nopen BigOperators Real Nat Topology Rat"
_DECL = ("theorem", "lemma", "example")
_INFORMAL_KEYS = ("natural_language_statement", "informal_stmt", "informal_statement", "nl_statement")


@dataclasses.dataclass(frozen=True)
class LeanTheorem:
    """`statement` ends with `:= by`; `imports` / `preamble` come before it."""

    name: str
    statement: str
    informal: str = ""
    imports: str = ""
    preamble: str = ""


def _normalise_statement(text: str) -> str:
    text = re.sub(r"\s*sorry\s*$", "", text.strip())
    if not text.endswith("by"):
        text = re.sub(r":=\s*$", "", text).rstrip() + " := by"
    return text


def split_sections(text: str) -> tuple[str, str, str]:
    """Lean source -> (import lines, other lines before the first declaration, the declaration)."""
    imports, preamble, body = [], [], []
    for line in text.splitlines():
        stripped = line.strip()
        if body:
            body.append(line)
        elif stripped.startswith("import "):
            imports.append(line)
        elif stripped.split(" ", 1)[0] in _DECL:
            body.append(line)
        else:
            preamble.append(line)
    return "\n".join(imports).strip(), "\n".join(preamble).strip(), "\n".join(body).strip()


def theorem_from_record(row: dict[str, Any], index: int) -> LeanTheorem:
    formal = row.get("formal_statement")
    if not isinstance(formal, str) or not formal.strip():
        raise ValueError(f"row {index} has no formal_statement; keys: {sorted(row)}")
    imports, preamble, body = split_sections(formal)
    header = row.get("header")
    if isinstance(header, str) and header.strip():
        h_imports, h_pre, _ = split_sections(header)
        imports = "\n".join(x for x in (h_imports, imports) if x)
        preamble = "\n".join(x for x in (h_pre, preamble) if x)
    informal = next((row[k] for k in _INFORMAL_KEYS if isinstance(row.get(k), str)), "")
    name = str(row.get("name") or row.get("id") or f"theorem_{index}")
    return LeanTheorem(name, _normalise_statement(body), informal.strip(), imports, preamble)


def parse_lean_file(text: str) -> list[LeanTheorem]:
    """Theorems of a miniF2F-style .lean file (shared header, each proof a `sorry`)."""
    imports, preamble, rest = split_sections(text)
    chunks = re.split(r"(?m)^(?=(?:theorem|lemma|example)\b)", rest)
    out = []
    for chunk in chunks:
        if not chunk.strip():
            continue
        m = re.match(r"(?:theorem|lemma)\s+(\S+)", chunk)
        out.append(LeanTheorem(m.group(1) if m else f"example_{len(out)}", _normalise_statement(chunk), "",
                               imports, preamble))
    return out


def load_theorems(path: str | Path) -> list[LeanTheorem]:
    """Theorems from a local .jsonl / .json / .lean file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Lean dataset file {path} does not exist; export miniF2F to JSONL "
                                "(formal_statement, natural_language_statement, name) or use a .lean file")
    suffix = path.suffix.lower()
    if suffix == ".lean":
        theorems = parse_lean_file(path.read_text(encoding="utf-8"))
    elif suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        theorems = [theorem_from_record(r, i) for i, r in enumerate(rows)]
    elif suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        theorems = [theorem_from_record(r, i) for i, r in enumerate(rows if isinstance(rows, list) else [rows])]
    else:
        raise ValueError(f"unsupported Lean dataset file {path}: use .jsonl, .json or .lean")
    if not theorems:
        raise ValueError(f"no theorems found in {path}")
    return theorems


def build_proof(theorem: LeanTheorem, tactics: Sequence[str], default_imports: str = DEFAULT_IMPORTS) -> str:
    """Full Lean source: imports, preamble, statement, then each tactic indented by two spaces."""
    parts = [theorem.imports or default_imports, theorem.preamble, theorem.statement]
    lines = "\n".join(p for p in parts if p).splitlines()
    for tactic in tactics:
        lines += ["  " + t for t in tactic.strip("\n").splitlines() if t.strip()]
    return "\n".join(lines) + "\n"


BUILTIN_THEOREMS: tuple[LeanTheorem, ...] = (
    LeanTheorem("ragen_mul_subst", "theorem ragen_mul_subst (a b : ℝ) (h₀ : a = 2) (h₁ : b = 3) : a * b = 6 := by",
                "If a = 2 and b = 3, show that a * b = 6."),
    LeanTheorem("ragen_add_zero", "theorem ragen_add_zero (n : ℕ) : n + 0 = n := by",
                "Show that adding zero to a natural number leaves it unchanged."),
)
