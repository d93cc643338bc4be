"""Search backends for the SearchQA env: the retrieval server over HTTP (timeouts, retries) or a
retriever in-process, plus the result formatting shown to the agent.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from envs.searchqa.retriever import Retriever
from envs.serve.jsonclient import JsonClient, ServiceError

MAX_DOC_CHARS = 800
MAX_TOTAL_CHARS = 4000


class RetrievalError(ServiceError):
    """The retrieval service failed (unreachable, timed out, or an error status)."""


class SearchBackend(Protocol):
    def search(self, query: str, top_k: int) -> list[dict[str, Any]]: ...


def format_results(hits: list[dict[str, Any]], max_results: int, max_doc_chars: int = MAX_DOC_CHARS,
                   max_total_chars: int = MAX_TOTAL_CHARS) -> str:
    """"[Document i] (ID: id, Score: s)\\ntext" blocks, each cut at `max_doc_chars`, all at
    `max_total_chars` (a cut adds "...")."""
    if not hits:
        return "No relevant documents found for the query."
    blocks = []
    for i, hit in enumerate(hits[:max_results], 1):
        text = str(hit.get("contents", hit.get("content", "")))
        if len(text) > max_doc_chars:
            text = text[:max_doc_chars] + "..."
        doc_id, score = hit.get("id", f"doc_{i}"), float(hit.get("score", 0.0))
        blocks.append(f"[Document {i}] (ID: {doc_id}, Score: {score:.3f})\n{text}")
    out = "\n\n".join(blocks)
    return out[:max_total_chars] + "..." if len(out) > max_total_chars else out


class LocalSearch:
    """A retriever called in-process (no server)."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever

    def search(self, query: str, top_k: int) -> list[dict[str, Any]]:
        return self.retriever.search(query, top_k)


class RetrievalClient:
    """Client of `POST /retrieve {query, top_k}` -> {results: [{id, content, score}]}; thread-safe
    (one keep-alive connection per thread). Raises RetrievalError after `retries` retries."""

    def __init__(self, url: str = "http://127.0.0.1:8000", timeout_s: float = 30.0, retries: int = 2):
        self.url, self.timeout_s, self.retries = url, timeout_s, retries
        self._local = threading.local()

    def _client(self) -> JsonClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = JsonClient(self.url, timeout_s=self.timeout_s, retries=self.retries)
        return client

    def health(self) -> dict[str, Any]:
        try:
            return self._client().call("GET", "/health", idempotent=True)
        except ServiceError as e:
            raise RetrievalError(f"Retrieval server health check failed: {e}", e.status) from e

    def search(self, query: str, top_k: int) -> list[dict[str, Any]]:
        try:
            payload = self._client().call("POST", "/retrieve", {"query": query, "top_k": int(top_k)}, idempotent=True)
        except ServiceError as e:
            raise RetrievalError(f"Retrieval failed for query {query!r}: {e}", e.status) from e
        results = payload.get("results")
        if not isinstance(results, list):
            raise RetrievalError(f"Retrieval server at {self.url} answered without a 'results' list: "
                                 f"{str(payload)[:200]}")
        bad = [hit for hit in results if not _is_hit(hit)]
        if bad:
            raise RetrievalError(f"Retrieval server at {self.url} answered results that are not {{id, content, score}} "
                                 f"objects with a numeric score, e.g. {str(bad[0])[:200]}")
        return results


def _is_hit(hit: Any) -> bool:
    """A result `format_results` can show: an object whose score, when given, reads as a number."""
    if not isinstance(hit, dict):
        return False
    try:
        float(hit.get("score", 0.0))
    except (TypeError, ValueError):
        return False
    return True
