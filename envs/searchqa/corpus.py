"""SearchQA data: a deterministic self-made world (documents about fictional people, towns,
countries and companies) with HotpotQA-style multi-hop questions, and loaders for local files.

Corpus files (.jsonl/.json/.parquet): rows with `id` and `contents` (Search-R1's wiki format,
'"Title"\\ntext'), or `title` + `text`, or `content`; a .json list of plain strings also works.
Question files: rows with `question` and answers in `golden_answers` | `ground_truth` | `answer`
| `answers` | `reward_model.ground_truth.target` (Search-R1 / RAGEN parquet layouts).
`python -m envs.searchqa.corpus --out DIR` writes corpus.jsonl and questions.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
from functools import lru_cache
from typing import Any

from envs.records import read_records


@dataclasses.dataclass(frozen=True)
class Document:
    id: str
    contents: str  # '"Title"\ntext'


@dataclasses.dataclass(frozen=True)
class Question:
    question: str
    answers: tuple[str, ...]
    id: str = ""
    kind: str = ""  # bridge / comparison / yes-no for the synthetic set


_SYLLABLES = ("ka", "lo", "mir", "ven", "dar", "sel", "tor", "ani", "bel", "cor", "eth", "fal",
              "gri", "hal", "isk", "jor", "lum", "nor", "ost", "pra", "quin", "rav", "sut", "ulm")
PROFESSIONS = ("painter", "engineer", "poet", "botanist", "architect", "composer", "cartographer", "chemist")
INDUSTRIES = ("shipbuilding", "textiles", "glassware", "printing", "clockmaking", "brewing", "ceramics")


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _namer(rng: random.Random):
    used: set[str] = set()

    def name(parts: int) -> str:
        while True:
            word = "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()
            if word not in used:
                used.add(word)
                return word
    return name


def synthetic_world(seed: int = 0, n_countries: int = 6, n_towns: int = 18, n_people: int = 40,
                    n_companies: int = 16) -> tuple[list[Document], list[Question]]:
    """Documents and 2-hop questions whose answers are only found by combining two documents."""
    rng = random.Random(seed)
    name = _namer(rng)
    countries = [{"name": name(3), "year": rng.randint(1500, 1900)} for _ in range(n_countries)]
    towns = [{"name": name(2), "country": countries[i % n_countries], "river": name(2) + " River",
              "pop": rng.randint(2, 900) * 1000} for i in range(n_towns)]
    for c in countries:
        c["capital"] = next(t for t in towns if t["country"] is c)
    people = [{"name": f"{name(2)} {name(3)}", "town": rng.choice(towns), "born": rng.randint(1800, 1990),
               "job": rng.choice(PROFESSIONS)} for _ in range(n_people)]
    companies = [{"name": f"{name(2)} {rng.choice(('Works', 'Company', 'Guild', 'Studio'))}",
                  "founder": people[i], "town": rng.choice(towns), "year": rng.randint(1850, 2010),
                  "industry": rng.choice(INDUSTRIES)} for i in range(n_companies)]
    docs: list[Document] = []
    for c in countries:
        docs.append(Document("", f'"{c["name"]}"\n{c["name"]} is a country founded in {c["year"]}. '
                             f'Its capital is {c["capital"]["name"]}.'))
    for t in towns:
        docs.append(Document("", f'"{t["name"]}"\n{t["name"]} is a town in {t["country"]["name"]} on the '
                             f'{t["river"]}, with a population of {t["pop"]:,}.'))
    for p in people:
        docs.append(Document("", f'"{p["name"]}"\n{p["name"]} (born {p["born"]}) is {_article(p["job"])} {p["job"]} '
                             f'who was born in the town of {p["town"]["name"]}.'))
    for c in companies:
        docs.append(Document("", f'"{c["name"]}"\n{c["name"]} is {_article(c["industry"])} {c["industry"]} '
                             f'company founded in {c["year"]} by {c["founder"]["name"]}. '
                             f'It is based in {c["town"]["name"]}.'))
    docs = [Document(str(i), d.contents) for i, d in enumerate(docs)]

    questions: list[Question] = []
    for p in people:
        questions.append(Question(f"In which country was the {p['job']} {p['name']} born?",
                                  (p["town"]["country"]["name"],), kind="bridge"))
        questions.append(Question(f"On which river is the birthplace of {p['name']}?",
                                  (p["town"]["river"],), kind="bridge"))
    for c in companies:
        questions.append(Question(f"In what year was the founder of {c['name']} born?",
                                  (str(c["founder"]["born"]),), kind="bridge"))
        questions.append(Question(f"What is the capital of the country where {c['name']} is based?",
                                  (c["town"]["country"]["capital"]["name"],), kind="bridge"))
    for a, b in zip(people[::2], people[1::2]):
        if a["born"] != b["born"]:
            first = a if a["born"] < b["born"] else b
            questions.append(Question(f"Who was born first, {a['name']} or {b['name']}?", (first["name"],),
                                      kind="comparison"))
        same = "yes" if a["town"]["country"] is b["town"]["country"] else "no"
        questions.append(Question(f"Were {a['name']} and {b['name']} born in the same country?", (same,),
                                  kind="yes-no"))
    rng.shuffle(questions)
    return docs, [dataclasses.replace(q, id=f"synth_{i}") for i, q in enumerate(questions)]


@lru_cache(maxsize=4)
def synthetic_data(seed: int = 0) -> tuple[tuple[Document, ...], tuple[Question, ...]]:
    docs, questions = synthetic_world(seed)
    return tuple(docs), tuple(questions)


def _doc_from_row(row: dict[str, Any], index: int) -> Document:
    doc_id = str(row.get("id", row.get("doc_id", f"doc_{index}")))
    if "contents" in row:
        return Document(doc_id, str(row["contents"]))
    if "text" in row:
        return Document(doc_id, f'"{row["title"]}"\n{row["text"]}' if row.get("title") else str(row["text"]))
    if "content" in row:
        return Document(doc_id, str(row["content"]))
    raise ValueError(f"Corpus row {index} has none of the fields contents / text / content: {sorted(row)}.")


def load_corpus(path: str, limit: int | None = None) -> list[Document]:
    """Documents from a local corpus file (formats in the module docstring)."""
    if path.lower().endswith(".json") and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if isinstance(data, list) and all(isinstance(d, str) for d in data):
            return [Document(f"doc_{i}", d) for i, d in enumerate(data[:limit] if limit else data)]
    return [_doc_from_row(row, i) for i, row in enumerate(read_records(path, limit))]


def _answers(row: dict[str, Any]) -> tuple[str, ...]:
    for key in ("golden_answers", "ground_truth", "answers", "answer"):
        if key in row and row[key] is not None:
            value = row[key]
            break
    else:
        target = ((row.get("reward_model") or {}).get("ground_truth") or {})
        value = target.get("target") if isinstance(target, dict) else target
    if isinstance(value, dict):
        value = value.get("target", value.get("text"))
    if value is None:
        raise ValueError(f"Question row has no answer field (golden_answers / ground_truth / answer): {sorted(row)}.")
    return (str(value),) if isinstance(value, (str, int, float)) else tuple(str(v) for v in value)


def load_questions(path: str, limit: int | None = None) -> list[Question]:
    """Questions from a local HotpotQA-style file (formats in the module docstring)."""
    out = []
    for i, row in enumerate(read_records(path, limit)):
        if "question" not in row:
            raise ValueError(f"{path} row {i} has no 'question' field; fields are {sorted(row)}.")
        out.append(Question(str(row["question"]), _answers(row), id=str(row.get("id", i)),
                            kind=str(row.get("type", ""))))
    return out


def write_synthetic(out_dir: str, seed: int = 0) -> tuple[str, str]:
    """Write the synthetic corpus and questions as JSONL; returns (corpus path, questions path)."""
    docs, questions = synthetic_data(seed)
    os.makedirs(out_dir, exist_ok=True)
    corpus_path, questions_path = os.path.join(out_dir, "corpus.jsonl"), os.path.join(out_dir, "questions.jsonl")
    with open(corpus_path, "w") as f:
        for d in docs:
            f.write(json.dumps({"id": d.id, "contents": d.contents}) + "\n")
    with open(questions_path, "w") as f:
        for q in questions:
            f.write(json.dumps({"id": q.id, "question": q.question, "golden_answers": list(q.answers),
                                "type": q.kind}) + "\n")
    return corpus_path, questions_path


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the synthetic SearchQA corpus and questions.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(*write_synthetic(args.out, args.seed), sep="\n")


if __name__ == "__main__":
    main()
