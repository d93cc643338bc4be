"""SearchQA: answer scoring, result formatting, data loading, the env in-process and against a
retrieval server started on 127.0.0.1 inside the test (including a dead and a hung server)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from envs.registry import make
from envs.searchqa.client import RetrievalClient, RetrievalError, format_results
from envs.searchqa.corpus import Document, load_corpus, load_questions, synthetic_data, write_synthetic
from envs.searchqa.retriever import BM25Retriever
from envs.searchqa.reward import exact_match, extract_answer, f1_score, normalize_answer, score_answer
from envs.searchqa.serve import make_server
from envs.serve.jsonclient import JsonClient, ServiceError


# ---------------------------------------------------------------- scoring
def test_normalisation():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a pear.") == "apple pear"


@pytest.mark.parametrize("pred, gold, reward, em", [
    ("Paris", "paris", 1.0, True),
    ("the Paris.", "Paris", 1.0, True),
    ("Paris France", "Paris", pytest.approx(2 / 3), False),  # F1 = 2*(1/2*1)/(1/2+1)
    ("it is in the city of Paris France", "Paris", 0.0, False),  # 7 tokens: F1 = 0.25 < 0.3
    ("in the city of Paris France", "Paris", pytest.approx(1 / 3), False),  # 5 tokens: F1 = 1/3
    ("London", "Paris", 0.0, False),
    ("yes", "no", 0.0, False),
    ("no", "no", 1.0, True),
])
def test_score_answer(pred, gold, reward, em):
    score = score_answer(pred, gold)
    assert score.reward == reward and score.exact_match == em


def test_score_takes_best_gold_and_special_tokens():
    assert score_answer("New York City", ["NYC", "New York City"]).reward == 1.0
    assert f1_score("yes it is", "yes") == (0.0, 0.0, 0.0)
    assert f1_score("big red dog", "red dog")[0] == pytest.approx(0.8)
    assert exact_match("A Tale", "tale")


def test_extract_answer_from_free_text():
    assert extract_answer("<think>hmm</think> The answer is Marie Curie.") == "Marie Curie"
    assert extract_answer("so \\boxed{42} it is") == "42"


@pytest.mark.parametrize("text, answer", [
    # RAGEN's rules (ragen/env/search/reward.py extract_answer_from_response), in order.
    ("The answer is 42.", "The answer is 42"),  # a phrase answer of <= 3 characters falls through to the sentence
    ("I think it is *Ilvaren*, the capital", "Ilvaren"),  # single-star emphasis counts too
    ("**...** then **Ilvaren**", "Ilvaren"),  # emphasis without a word character is skipped
    ("Hence, the river Marl.", "the river Marl"),  # "therefore / thus / so / hence" phrases
    ("The answer is: 'Marie Curie'!", "Marie Curie"),  # edge punctuation stripped
    ("<think>x</think>   ", ""),
])
def test_extract_answer_follows_ragen(text, answer):
    assert extract_answer(text) == answer


def test_format_results_limits():
    hits = [{"id": str(i), "contents": "x" * 1000, "score": 1.0 / (i + 1)} for i in range(10)]
    out = format_results(hits, max_results=5)
    assert out.startswith("[Document 1] (ID: 0, Score: 1.000)\n" + "x" * 800 + "...")
    assert len(out) == 4003 and out.endswith("...")
    assert "[Document 5]" in out and "[Document 6]" not in out
    assert format_results([], 5) == "No relevant documents found for the query."
    short = format_results([{"id": "a", "content": "hello", "score": 0.5}], 5)
    assert short == "[Document 1] (ID: a, Score: 0.500)\nhello"


# ---------------------------------------------------------------- data
def test_synthetic_data_is_deterministic_and_answerable():
    docs, questions = synthetic_data(0)
    assert synthetic_data(0) == (docs, questions) and len(docs) >= 60 and len(questions) >= 100
    text = " ".join(d.contents for d in docs)
    for q in questions:
        if q.kind == "bridge":
            assert q.answers[0] in text


def test_loaders_roundtrip_and_formats(tmp_path):
    corpus_path, questions_path = write_synthetic(str(tmp_path))
    docs, questions = synthetic_data(0)
    assert tuple(load_corpus(corpus_path)) == docs
    assert ([(q.question, q.answers) for q in load_questions(questions_path)]
            == [(q.question, q.answers) for q in questions])
    (tmp_path / "c.json").write_text(json.dumps(["first doc", "second doc"]))
    assert load_corpus(str(tmp_path / "c.json"))[1] == Document("doc_1", "second doc")
    (tmp_path / "q.jsonl").write_text(
        json.dumps({"question": "q1", "answer": "a1"}) + "\n"
        + json.dumps({"question": "q2", "reward_model": {"ground_truth": {"target": ["x", "y"]}}}) + "\n")
    assert [q.answers for q in load_questions(str(tmp_path / "q.jsonl"))] == [("a1",), ("x", "y")]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match="no answer field"):
        load_questions(str(tmp_path / "bad.jsonl"))


# ---------------------------------------------------------------- env in-process
def test_instruction_is_ragens():
    """RAGEN's config/envs.yaml SearchQA env_instruction, verbatim."""
    assert make("SearchQA").instruction() == (
        "You are a search agent answering questions by searching for information.\n"
        "Use search[your query] to find relevant documents, and finish[your answer] to submit your final answer.\n\n"
        "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
        "within <think> </think> tags.\n"
        "Then provide your action within <answer>...</answer> tags.\n\n"
        "Examples:\n"
        "  <think>I need to find information about Ben Platt's father.</think><answer>search[Ben Platt father parent]"
        "</answer>\n"
        "  <think>Based on the search results, Ben Platt's father is Henry Platt.</think><answer>finish[Henry Platt]"
        "</answer>\n")


def test_env_search_then_finish():
    env = make("SearchQA")
    obs, _ = env.reset(0)
    assert obs.startswith("Question: ") and obs.endswith("Available actions: search[<query>], finish[<answer>]")
    q = env.question
    obs, reward, done, truncated, info = env.step(f"search[{q.question}]")
    assert obs.startswith(f"Search results for '{q.question}':\n[Document 1] (ID: ")
    assert (reward, done, truncated, info["action_is_valid"]) == (0.0, False, False, True)
    obs, reward, done, _, info = env.step(f"finish[{q.answers[0]}]")
    assert done and reward == 1.0 and info["success"] and obs == f"Your answer: {q.answers[0]}. Reward: 1.00"


def test_env_wrong_answer_and_fallback_and_invalid():
    env = make("SearchQA")
    env.reset(1)
    assert env.step("finish[definitely not it]")[1:3] == (0.0, True)
    env.reset(1)
    obs, reward, done, truncated, info = env.step("   ")
    assert not done and not info["action_is_valid"] and obs.startswith("Invalid action.")
    _, reward, done, _, info = env.step(f"The answer is {env.question.answers[0]}.")
    assert done and reward == 1.0 and info["action_type"] == "fallback" and not info["action_is_valid"]


def test_empty_search_is_invalid_and_searches_nothing():
    """A deliberate difference (docs/ragen_differences.md): RAGEN sends `search[]`'s empty query to its
    retriever and counts the action valid; here it reaches no backend (our server answers an empty query 400), is
    invalid and ineffective, and the episode goes on. The reward is RAGEN's: 0."""

    class Recording:
        def __init__(self):
            self.queries = []

        def search(self, query, top_k):
            self.queries.append(query)
            return [{"id": "d", "contents": "text", "score": 1.0}]

    env = make("SearchQA")
    env.backend = backend = Recording()
    env.reset(0)
    for action in ("search[]", "search[   ]"):
        obs, reward, done, truncated, info = env.step(action)
        assert obs == (f"Search results for '{action[7:-1]}':\nNo relevant documents found for the query.\n\n"
                       "Available actions: search[<query>], finish[<answer>]")
        assert (reward, done, truncated) == (0.0, False, False)
        assert (info["action_is_valid"], info["action_is_effective"], info["num_hits"]) == (False, False, 0)
    assert backend.queries == []
    env.step("search[ town ]")
    assert backend.queries == ["town"]
    _, reward, done, _, _ = env.step(f"finish[{env.question.answers[0]}]")
    assert done and reward == 1.0


def test_env_step_cap_truncates():
    env = make("SearchQA", max_steps=2)
    env.reset(0)
    assert env.step("search[town]")[3] is False
    obs, _, done, truncated, _ = env.step("search[river]")
    assert truncated and not done and obs.endswith("Episode ended without an answer.")


def test_bm25_finds_the_bridge_document():
    docs, questions = synthetic_data(0)
    retriever = BM25Retriever(docs)
    q = next(q for q in questions if q.question.startswith("In which country was"))
    person = q.question.split(" born?")[0].split(" ", 6)[-1]
    hits = retriever.search(person, 3)
    assert person in hits[0]["contents"]


# ---------------------------------------------------------------- retrieval server
@pytest.fixture(scope="module")
def server():
    srv = make_server(BM25Retriever(synthetic_data(0)[0]), "127.0.0.1", 0).start_background()
    yield srv
    srv.stop()


def test_server_health_and_retrieve(server):
    client = RetrievalClient(server.url, timeout_s=5)
    health = client.health()
    assert health["status"] == "healthy" and health["corpus_size"] == len(synthetic_data(0)[0])
    hits = client.search("capital country", 3)
    assert len(hits) == 3 and {"id", "content", "score"} <= set(hits[0])
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]


def test_server_search_r1_batch_form(server):
    c = JsonClient(server.url, timeout_s=5)
    out = c.call("POST", "/retrieve", {"queries": ["river", "company"], "topk": 2, "return_scores": True},
                 idempotent=True)
    assert len(out["result"]) == 2 and len(out["result"][0]) == 2
    assert {"document", "score"} == set(out["result"][0][0]) and "contents" in out["result"][0][0]["document"]


@pytest.mark.parametrize("body, status, words", [
    ({}, 400, "Missing field 'query'"),
    ({"query": 3}, 400, "must be str"),
    ({"query": " "}, 400, "empty"),
    ({"query": "x", "top_k": 0}, 400, "between 1 and"),
    ({"query": "x", "top_k": True}, 400, "must be int"),
])
def test_server_bad_requests_get_4xx(server, body, status, words):
    with pytest.raises(ServiceError, match=words) as err:
        JsonClient(server.url, timeout_s=5).call("POST", "/retrieve", body, idempotent=False)
    assert err.value.status == status


def _content_length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def test_server_unknown_path_and_bad_json(server):
    c = JsonClient(server.url, timeout_s=5)
    with pytest.raises(ServiceError) as err:
        c.call("GET", "/nope", idempotent=False)
    assert err.value.status == 404
    with pytest.raises(ServiceError) as err:
        c.call("GET", "/retrieve", idempotent=False)
    assert err.value.status == 405
    conn = socket.create_connection(server.server_address[:2], timeout=5)
    conn.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{nope")
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _content_length(reply):
        chunk = conn.recv(4096)  # headers and body may arrive in separate reads
        if not chunk:
            break
        reply += chunk
    conn.close()
    reply = reply.decode()
    assert reply.startswith("HTTP/1.1 400") and "not valid JSON" in reply


def test_env_through_server(server):
    env = make("SearchQA", retrieval_url=server.url, timeout_s=5)
    local = make("SearchQA")
    env.reset(5), local.reset(5)
    assert env.step("search[river town]")[0] == local.step("search[river town]")[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dead_server_raises_clear_error_quickly():
    env = make("SearchQA", retrieval_url=f"http://127.0.0.1:{_free_port()}", timeout_s=2, retries=1)
    env.reset(0)
    start = time.monotonic()
    with pytest.raises(RetrievalError, match="is the server running"):
        env.step("search[anything]")
    assert time.monotonic() - start < 30  # refused at once (a hang would never end); generous under load


def test_hung_server_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    stop = threading.Event()
    try:
        env = make("SearchQA", retrieval_url=f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
        env.reset(0)
        start = time.monotonic()
        with pytest.raises(RetrievalError, match="timed out"):
            env.step("search[anything]")
        assert time.monotonic() - start < 30  # the 0.5 s timeout fired: a hang would never return
    finally:
        stop.set()
        listener.close()


@pytest.mark.slow
def test_dense_retriever_with_a_tiny_local_encoder(tmp_path):
    """Dense retrieval from a local encoder folder (a tiny random BERT built here, no download)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from envs.searchqa.retriever import make_retriever

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "query", ":", "passage",
             "red", "blue", "cat", "dog", "river"]
    (tmp_path / "vocab.txt").write_text("\n".join(words))
    transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(tmp_path)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32)
    transformers.BertModel(config).save_pretrained(tmp_path)
    docs = [Document("a", "red cat"), Document("b", "blue dog river"), Document("c", "river")]
    retriever = make_retriever(docs, "dense", str(tmp_path))
    hits = retriever.search("red cat", 2)
    assert len(hits) == 2 and hits[0]["score"] >= hits[1]["score"] and -1.0 <= hits[1]["score"] <= 1.0001
    assert retriever.doc_vectors.shape == (3, 16)
    assert all(abs(float((v * v).sum()) - 1.0) < 1e-4 for v in retriever.doc_vectors)
    srv = make_server(retriever, "127.0.0.1", 0).start_background()
    try:
        assert RetrievalClient(srv.url, timeout_s=10).health()["index_type"] == "dense"
    finally:
        srv.stop()
    with pytest.raises(ValueError, match="needs model_dir"):
        make_retriever(docs, "dense")


@pytest.mark.parametrize("results, needle", [(["a plain string"], "a plain string"),
                                             ([{"id": "a", "content": "x", "score": None}], "'score': None"),
                                             ([{"id": "a", "content": "x", "score": "high"}], "'score': 'high'")])
def test_results_of_the_wrong_shape_are_a_retrieval_error(results, needle):
    """Another service's results (strings, or a non-numeric score) are a RetrievalError naming one, never an
    AttributeError or TypeError out of the formatting."""
    from envs.serve.http import JsonServer

    srv = JsonServer("127.0.0.1", 0, {("POST", "/retrieve"): lambda _body: (200, {"results": results})})
    srv.start_background()
    try:
        env = make("SearchQA", retrieval_url=srv.url, timeout_s=5)
        env.reset(0)
        with pytest.raises(RetrievalError, match="not {id, content, score} objects") as caught:
            env.step("search[anything]")
        assert needle in str(caught.value)
    finally:
        srv.stop()


def test_observation_echoes_the_query_and_answer_as_written():
    """RAGEN's text is `action[7:-1]` as written: "search[ town hall ]" shows "Search results for ' town hall ':"."""
    env = make("SearchQA")
    env.reset(0)
    obs = env.step("search[ town hall ]")[0]
    assert obs.startswith("Search results for ' town hall ':\n")
    obs = env.step("search[   ]")[0]
    assert obs.startswith("Search results for '   ':\nNo relevant documents found for the query.")
    gold = env.question.answers[0]
    obs, reward, done, _, info = env.step(f"finish[ {gold} ]")
    assert obs == f"Your answer:  {gold} . Reward: 1.00" and reward == 1.0 and done and info["answer"] == f" {gold} "


def test_ragen_finish_rules_partial_f1_case_and_step_cap():
    """RAGEN: success = exact match or reward > 0, so an F1 >= 0.3 answer succeeds with reward F1; the action names are
    case-sensitive ("Search[...]" is a free-text answer that ends the episode); a finish on the last step is scored."""
    env = make("SearchQA", max_steps=2)
    env.reset(2)
    assert env.question.answers == ("Mirtor River",)
    obs, reward, done, truncated, info = env.step("finish[Mirtor River delta]")
    # precision 2/3, recall 1: F1 = 2 * (2/3) / (5/3) = 0.8
    assert reward == pytest.approx(0.8) and info["success"] and not info["exact_match"]
    assert (done, truncated) == (True, False) and obs == "Your answer: Mirtor River delta. Reward: 0.80"
    env.reset(0)
    assert env.question.answers == ("yes",)
    assert env.step("finish[yes indeed]")[1:3] == (0.0, True)  # yes/no/noanswer must match exactly
    env.reset(2)
    _, reward, done, _, info = env.step("Search[Mirtor River]")
    # the whole text is the answer: "searchmirtor river" vs "mirtor river" shares 1 of 2 tokens, F1 = 0.5
    assert (reward, done, info["action_type"], info["action_is_valid"]) == (0.5, True, "fallback", False)
    env.reset(2)
    env.step("search[town]")
    _, reward, done, truncated, info = env.step("finish[Mirtor River]")
    assert (reward, done, truncated, info["success"]) == (1.0, True, False, True)
