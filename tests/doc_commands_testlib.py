"""The shell commands README.md and docs/*.md show a reader: found in fenced and indented code blocks and in inline
code, as argv lists (shared by tests/test_doc_commands.py and tests/doc_commands_worker.py).

A command is what a reader would paste: `\\` continuations and `--flag` lines that continue a usage synopsis are
joined, `# comments` and leading `VAR=value` assignments dropped, `&&`, `;` and `|` split commands, an optional
`[--flag value]` counts as given, a placeholder (`N`, `$N`, `--seed=N`) is 0, and a `...` word (an elided rest) is
dropped.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ("python", "python3", "make")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SHELL_FENCES = ("", "bash", "sh", "shell", "console")
_INLINE = re.compile(r"`([^`]+)`")
_SEPARATORS = ("&&", "||", ";", "|", "&")
_SHELL_VAR = re.compile(r"\$\{?(\w+)\}?")
_PLACEHOLDER = re.compile(r"^(-[\w.-]+=)?[A-Z][A-Z0-9_]*$")  # N, DIR, --step=N: the reader's own value


@dataclasses.dataclass(frozen=True)
class DocCommand:
    doc: str  # README.md or docs/NAME.md
    argv: tuple[str, ...]  # ("python", "run.py", "--config", ...)

    def __str__(self) -> str:
        return f"{self.doc}: {shlex.join(self.argv)}"


def doc_paths() -> list[str]:
    """README.md and docs/*.md, relative to ROOT."""
    return ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def commands_in_code(code: str) -> list[list[str]]:
    """Every command of PROGRAMS in shell `code` -> argv lists (see the module docstring)."""
    code = code.replace("\\\n", " ")
    code = re.sub(r"\n[ \t]*(?=\[?--)", " ", code)  # a usage synopsis's options continued on the next line
    found = []
    for line in code.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote: prose, not a command
            continue
        command: list[str] = []
        for word in [*words, ";"]:
            if word not in _SEPARATORS:
                command.append(word)
                continue
            while command and re.match(r"^[A-Za-z_]\w*=", command[0]):
                command.pop(0)
            if command and command[0] in PROGRAMS:
                found.append(_as_given(command))
            command = []
    return found


def _as_given(words: list[str]) -> list[str]:
    """A synopsis's `[--step N]` as given (`--step N`), a placeholder (`N`, `DIR`, `--seed=N`, `$N`) as 0, `...`
    dropped."""
    out = []
    for word in words:
        if word == "...":
            continue
        word = _SHELL_VAR.sub("0", word)
        if word.startswith("[--"):
            word = word[1:]
        if word.endswith("]") and "[" not in word:
            word = word[:-1]
        out.append(re.sub(r"[A-Z][A-Z0-9_]*$", "0", word) if _PLACEHOLDER.match(word) else word)
    return out


def commands_in_markdown(text: str) -> list[list[str]]:
    """The commands in a markdown `text`: its shell fences, indented code blocks and inline code spans."""
    found = []
    for lang, body in _FENCE.findall(text):
        if lang in _SHELL_FENCES:
            found += commands_in_code(body)
    prose = _FENCE.sub("", text)
    found += commands_in_code("\n".join(line[4:] for line in prose.splitlines() if line.startswith("    ")))
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("    "))
    for span in _INLINE.findall(prose):
        found += commands_in_code(" ".join(span.split()))  # a span may wrap across lines
    return found


def override_fragments(text: str) -> list[str]:
    """The `--config.KEY=VALUE` words of a markdown `text`'s inline code that is not a whole command (a reader
    adds them to a run.py command: `--config.rollout.lanes=1`)."""
    found = []
    for span in _INLINE.findall("\n".join(line for line in text.splitlines() if not line.startswith("    "))):
        span = " ".join(span.split())
        if commands_in_code(span):
            continue
        try:
            words = shlex.split(span)
        except ValueError:
            continue
        found += [w for w in _as_given(words) if w.startswith("--config.") and "=" in w]
    return found


def shell_text(text: str) -> str:
    """A markdown `text` without its fences of other languages (python, text): where a command can be shown."""
    return _FENCE.sub(lambda m: m.group(0) if m.group(1) in _SHELL_FENCES else "", text)


def doc_commands() -> list[DocCommand]:
    """Every distinct command in README.md and docs/*.md, in the order the docs show them."""
    seen: dict[DocCommand, None] = {}
    for doc in doc_paths():
        with open(os.path.join(ROOT, doc)) as f:
            for argv in commands_in_markdown(f.read()):
                seen.setdefault(DocCommand(doc, tuple(argv)), None)
    return list(seen)


def doc_overrides() -> list[tuple[str, str]]:
    """Every distinct (doc, `--config.KEY=VALUE`) of README.md's and docs/*.md's override_fragments."""
    seen: dict[tuple[str, str], None] = {}
    for doc in doc_paths():
        with open(os.path.join(ROOT, doc)) as f:
            for word in override_fragments(_FENCE.sub("", f.read())):
                seen.setdefault((doc, word), None)
    return list(seen)


def doc_files(doc: str) -> dict[str, str]:
    """{NAME: text} of the files `doc` has its reader save (`<!-- doc-test: NAME -->` blocks; see
    tests/test_docs_examples.py): its commands run from the folder that holds them."""
    with open(os.path.join(ROOT, doc)) as f:
        blocks = re.findall(r"<!-- doc-test: (\S+) -->\n```\w*\n(.*?)```", f.read(), re.DOTALL)
    return {name: text for name, text in blocks if not name.startswith("run")}
