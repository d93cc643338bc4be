"""A BM25 index over text documents, backed by the `bm25s` library (shared by WebShop and SearchQA)."""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np


class BM25Index:
    """Okapi BM25 (bm25s, English stop words) over `documents`; `search` returns (doc ids, scores)."""

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75):
        try:
            import bm25s
        except ImportError as e:
            raise ImportError("BM25 search needs the `bm25s` package: pip install bm25s") from e
        if not documents:
            raise ValueError("Cannot build a BM25 index over zero documents.")
        self._bm25s = bm25s
        self.num_docs = len(documents)
        tokens = bm25s.tokenize(list(documents), stopwords="en", show_progress=False)
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(tokens, show_progress=False)
        self._lock = threading.Lock()  # bm25s keeps per-call state in the tokenizer/retriever

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-`k` documents for `query`, best first: (ids [n] int, scores [n] float), n <= k.

        Documents with score 0 (no query term) are dropped, like a Lucene search.
        """
        k = min(int(k), self.num_docs)
        if k <= 0 or not query.strip():
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        with self._lock:
            tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
            if not any(len(t) for t in tokens.ids):
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            ids, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        ids, scores = np.asarray(ids[0]), np.asarray(scores[0])
        keep = scores > 0
        return ids[keep].astype(np.int64), scores[keep].astype(np.float32)
