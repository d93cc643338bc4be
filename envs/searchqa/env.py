"""SearchQA: answer a (multi-hop) question by searching a corpus: `search[query]`, `finish[answer]`.

Reward on finish: 1.0 for an exact match, else F1 when F1 >= 0.3, else 0 (normalised answers).
Search goes to a retrieval server (`retrieval_url`) or to an in-process retriever; a failing
server raises RetrievalError, which ends the episode with an error in the rollout.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys
from envs.searchqa.client import LocalSearch, RetrievalClient, SearchBackend, format_results
from envs.searchqa.corpus import Question, load_corpus, load_questions, synthetic_data
from envs.searchqa.retriever import make_retriever
from envs.searchqa.reward import extract_answer, score_answer

ACTIONS_LINE = "Available actions: search[<query>], finish[<answer>]"
# RAGEN's SearchQA env_instruction (config/envs.yaml), verbatim.
INSTRUCTION = (
    "You are a search agent answering questions by searching for information.\n"
    "Use search[your query] to find relevant documents, and finish[your answer] to submit your final answer.\n\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Then provide your action within <answer>...</answer> tags.\n\n"
    "Examples:\n"
    "  <think>I need to find information about Ben Platt's father.</think><answer>search[Ben Platt father parent]"
    "</answer>\n"
    "  <think>Based on the search results, Ben Platt's father is Henry Platt.</think><answer>finish[Henry Platt]"
    "</answer>\n"
)


@lru_cache(maxsize=4)
def _local_backend(corpus_path: str | None, method: str, model_dir: str | None, seed: int) -> LocalSearch:
    docs = load_corpus(corpus_path) if corpus_path else list(synthetic_data(seed)[0])
    return LocalSearch(make_retriever(docs, method, model_dir))


@lru_cache(maxsize=4)
def _questions(path: str | None, limit: int | None, seed: int) -> tuple[Question, ...]:
    questions = tuple(load_questions(path, limit)) if path else synthetic_data(seed)[1][:limit]
    if not questions:
        raise ValueError(f"No questions loaded from {path or 'the synthetic set'}.")
    return questions


# RAGEN's SearchEnvConfig names -> ours.
RAGEN_KEYS = RagenKeys(
    renames={"train_path": "questions_path", "retrieval_server_url": "retrieval_url",
             "retrieval_timeout": "timeout_s", "max_search_results": "top_k"},
    fixed={"dataset_name": ("hotpotqa", "questions_path reads any HotpotQA-style file"),
           "render_mode": ("text", "the observation is RAGEN's text"),
           "correct_reward": (1.0, "the reward is RAGEN's exact match 1.0, else F1 >= f1_threshold"),
           "incorrect_reward": (0.0, "the reward is RAGEN's exact match 1.0, else F1 >= f1_threshold")},
    unsupported={"mock_mode": "without retrieval_url ragen-jax needs no server: it searches a local corpus "
                              "(corpus_path, or a built-in synthetic one) in-process; remove mock_mode"})


class SearchQAEnv(HostEnv):
    """Search-and-answer env; `seed % len(questions)` picks the question (as in RAGEN)."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, questions_path: str | None = None, corpus_path: str | None = None,
                 retrieval_url: str | None = None, retrieval_method: str = "bm25", model_dir: str | None = None,
                 max_instances: int | None = 20000, max_steps: int = 10, top_k: int = 5,
                 max_doc_chars: int = 800, max_total_chars: int = 4000, timeout_s: float = 30.0,
                 retries: int = 2, f1_threshold: float = 0.3, seed: int = 0):
        self.questions = _questions(questions_path, max_instances, seed)
        self.backend: SearchBackend = (
            RetrievalClient(retrieval_url, timeout_s=timeout_s, retries=retries) if retrieval_url
            else _local_backend(corpus_path, retrieval_method, model_dir, seed))
        self.max_steps, self.top_k, self.f1_threshold = max_steps, top_k, f1_threshold
        self.max_doc_chars, self.max_total_chars = max_doc_chars, max_total_chars
        self.question: Question | None = None
        self.num_steps = 0
        self.done = False

    def instruction(self) -> str:
        return INSTRUCTION

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.question = self.questions[int(seed) % len(self.questions)]
        self.num_steps, self.done = 0, False
        return f"Question: {self.question.question}\n{ACTIONS_LINE}", {"question_id": self.question.id}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.question is None:
            raise RuntimeError("SearchQAEnv.step called before reset(seed).")
        if self.done:
            raise RuntimeError("The episode is over (an answer was given); call reset(seed).")
        self.num_steps += 1
        action = (action or "").strip()
        at_cap = self.num_steps >= self.max_steps
        if action.startswith("search[") and action.endswith("]"):
            written = action[len("search["):-1]  # shown as written (RAGEN's text); searched stripped
            query = written.strip()
            hits = self.backend.search(query, self.top_k) if query else []
            results = format_results(hits, self.top_k, self.max_doc_chars, self.max_total_chars)
            tail = "Maximum search steps reached. Episode ended without an answer." if at_cap else ACTIONS_LINE
            self.done = at_cap
            info = {"action_is_valid": bool(query), "action_is_effective": bool(query), "success": False,
                    "action_type": "search", "num_hits": len(hits)}
            return f"Search results for '{written}':\n{results}\n\n{tail}", 0.0, False, at_cap, info
        if action.startswith("finish[") and action.endswith("]"):
            return self._finish(action[len("finish["):-1], valid=True)
        if not action:
            self.done = at_cap
            info = {"action_is_valid": False, "action_is_effective": False, "success": False, "action_type": "invalid"}
            return (f"Invalid action. Use search[<query>] to search or finish[<answer>] to answer.\n{ACTIONS_LINE}",
                    0.0, False, at_cap, info)
        return self._finish(extract_answer(action), valid=False)

    def _finish(self, answer: str, valid: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        score = score_answer(answer, self.question.answers, self.f1_threshold)
        self.done = True
        info = {"action_is_valid": valid, "action_is_effective": True, "success": score.exact_match or score.reward > 0,
                "action_type": "finish" if valid else "fallback", "answer": answer,
                "exact_match": score.exact_match, "f1": score.f1}
        return f"Your answer: {answer}. Reward: {score.reward:.2f}", score.reward, True, False, info
