"""Retrieval service: `python -m envs.searchqa.serve --corpus corpus.jsonl --port 8000`.

API (RAGEN's retrieval server): `GET /health` -> {status, corpus_size, index_type};
`POST /retrieve {"query": str, "top_k": int}` -> {query, method, results: [{id, content, score}],
num_results}. Search-R1's batch form `{"queries": [...], "topk": k, "return_scores": bool}` ->
{result: [[{document: {id, contents}, score}]]} is answered on the same endpoint.
Without --corpus it serves the built-in synthetic corpus.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from envs.searchqa.corpus import load_corpus, synthetic_data
from envs.searchqa.retriever import Retriever, make_retriever
from envs.serve.http import HttpError, JsonServer, require

MAX_TOP_K = 100
MAX_QUERIES = 256


def _top_k(body: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        if key in body:
            value = require(body, key, int)
            if not 1 <= value <= MAX_TOP_K:
                raise HttpError(400, f"{key!r} must be between 1 and {MAX_TOP_K}, got {value}.")
            return value
    return default


def routes(retriever: Retriever, default_top_k: int = 10) -> dict[tuple[str, str], Any]:
    """The route table of the retrieval service over `retriever`."""

    def health(_: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"status": "healthy", "corpus_size": len(retriever.docs), "index_type": retriever.method}

    def retrieve(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "queries" in body:  # Search-R1 batch form
            queries = require(body, "queries", list)
            if not queries or len(queries) > MAX_QUERIES or not all(isinstance(q, str) for q in queries):
                raise HttpError(400, f"'queries' must be a list of 1..{MAX_QUERIES} strings.")
            k = _top_k(body, ("topk", "top_k"), default_top_k)
            with_scores = bool(body.get("return_scores", False))
            result = []
            for query in queries:
                hits = retriever.search(query, k)
                docs = [{"id": h["id"], "contents": h["contents"]} for h in hits]
                result.append([{"document": d, "score": h["score"]} for d, h in zip(docs, hits)]
                              if with_scores else docs)
            return 200, {"result": result}
        query = require(body, "query", str, 'Send {"query": "...", "top_k": 5}.')
        if not query.strip():
            raise HttpError(400, "'query' is empty; send some search words.")
        k = _top_k(body, ("top_k", "k", "topk"), default_top_k)
        hits = retriever.search(query, k)
        results = [{"id": h["id"], "content": h["contents"], "score": h["score"]} for h in hits]
        return 200, {"query": query, "method": retriever.method, "results": results, "num_results": len(results)}

    return {("GET", "/health"): health, ("POST", "/retrieve"): retrieve}


def make_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, verbose: bool = False) -> JsonServer:
    """A retrieval server bound to host:port (port 0 picks a free one; see `.url`)."""
    return JsonServer(host, port, routes(retriever), verbose=verbose)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="BM25 / dense retrieval server for SearchQA.")
    parser.add_argument("--corpus", help="corpus file (.jsonl/.json/.parquet); default: built-in synthetic corpus")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--method", choices=("bm25", "dense"), default="bm25")
    parser.add_argument("--model-dir", help="local encoder folder for --method dense")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    docs = load_corpus(args.corpus) if args.corpus else list(synthetic_data()[0])
    server = make_server(make_retriever(docs, args.method, args.model_dir), args.host, args.port, args.verbose)
    print(f"retrieval server ({args.method}, {len(docs)} docs) listening on {server.url}", flush=True)
    server.serve_until_interrupted(sys.stdout.flush)


if __name__ == "__main__":
    main()
