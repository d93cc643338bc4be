"""Retrievers over a document list: BM25 (default) and dense (a local embedding model, E5-style).

Both return hits as dicts {"id", "contents", "score"}, best first.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, Sequence

import numpy as np

from envs.searchqa.bm25 import BM25Index
from envs.searchqa.corpus import Document


class Retriever(Protocol):
    method: str
    docs: Sequence[Document]

    def search(self, query: str, top_k: int) -> list[dict[str, Any]]: ...


def _hits(docs: Sequence[Document], ids: np.ndarray, scores: np.ndarray) -> list[dict[str, Any]]:
    return [{"id": docs[i].id, "contents": docs[i].contents, "score": float(s)} for i, s in zip(ids, scores)]


class BM25Retriever:
    """BM25 over the documents' full text (title included)."""

    method = "bm25"

    def __init__(self, docs: Sequence[Document]):
        self.docs = list(docs)
        self.index = BM25Index([d.contents for d in self.docs])

    def search(self, query: str, top_k: int) -> list[dict[str, Any]]:
        ids, scores = self.index.search(query, top_k)
        return _hits(self.docs, ids, scores)


class DenseRetriever:
    """Cosine similarity of mean-pooled embeddings from a local Hugging Face encoder folder
    (e.g. a downloaded intfloat/e5-base-v2); queries get "query: ", documents "passage: "."""

    method = "dense"

    def __init__(self, docs: Sequence[Document], model_dir: str, batch_size: int = 64, max_length: int = 256):
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as e:
            raise ImportError("Dense retrieval needs torch and transformers installed.") from e
        self._torch = torch
        self.docs = list(docs)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
        self.max_length = max_length
        self._lock = threading.Lock()
        chunks = [self._embed([f"passage: {d.contents}" for d in self.docs[i:i + batch_size]])
                  for i in range(0, len(self.docs), batch_size)]
        self.doc_vectors = np.concatenate(chunks, axis=0)  # [N, D], unit rows

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Unit-norm mean-pooled embeddings [len(texts), D]."""
        torch = self._torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled.float().numpy()

    def search(self, query: str, top_k: int) -> list[dict[str, Any]]:
        with self._lock:
            q = self._embed([f"query: {query}"])[0]
        scores = self.doc_vectors @ q
        k = min(int(top_k), len(self.docs))
        ids = np.argsort(-scores, kind="stable")[:k]
        return _hits(self.docs, ids, scores[ids])


def make_retriever(docs: Sequence[Document], method: str = "bm25", model_dir: str | None = None) -> Retriever:
    """A retriever by name: "bm25", or "dense" with `model_dir` (a local encoder folder)."""
    if method == "bm25":
        return BM25Retriever(docs)
    if method == "dense":
        if not model_dir:
            raise ValueError("Dense retrieval needs model_dir: a local folder with an encoder (e.g. e5-base-v2); "
                             "pass --config.env.kwargs.model_dir=DIR, or use retrieval_method='bm25'.")
        return DenseRetriever(docs, model_dir)
    raise ValueError(f"Unknown retrieval method {method!r}; use 'bm25' or 'dense'.")
