"""OpenAI-format JSONL dumps: RAGEN's record shape ({"custom_id", "messages", "metadata"}), RAGEN's converter
messages and metadata keys (scripts/convert_to_jsonl.py), and loading with a plain JSON reader and `datasets`."""

import json
import pickle

import pytest

from ragen_jax.rollout.dump import (group_outcomes, ragen_messages, read_jsonl, write_jsonl, write_pkl,
                                    write_ragen_jsonl)
from ragen_jax.rollout.prompts import TurnRecord
from ragen_jax.rollout.types import Episode, RolloutResult

PROMPT = dict(max_tokens=16, enable_think=True, format_penalty=-0.1)
RIGHT = "<think>go</think><answer>Right</answer>"


def episodes() -> list[Episode]:
    """Three hand-made episodes: a success in two turns, a failure in one group with it, and an env error."""
    won = Episode(env_tag="Line", seed=5, group_id=0, system="Move right.", history=[
        TurnRecord("P__", 2, response_text=RIGHT, response_tokens=[1, 2, 3], reward=0.0, actions_executed=1),
        TurnRecord("_P_", 1, response_text=RIGHT, response_tokens=[4, 5], reward=1.0, actions_executed=1)],
        num_actions=2, terminated=True, success=True, valid_turns=2, effective_turns=2,
        info_sums={"action_is_valid": 2.0, "dist": 1.0}, final_state="__P")
    lost = Episode(env_tag="Line", seed=5, group_id=0, system="Move right.", history=[
        TurnRecord("P__", 2, response_text="no tags", response_tokens=[6], reward=-0.5, actions_executed=1)],
        num_actions=1, penalty=-0.1, truncated=True, valid_turns=0, final_state="P__")
    broken = Episode(env_tag="Line", seed=6, group_id=1, system="Move right.", history=[
        TurnRecord("P__", 2, response_text=RIGHT, response_tokens=[7], actions_executed=0)],
        terminated=True, error="EnvError: boom", info_sums={"dist": float("nan")}, final_state=None)
    return [won, lost, broken]


def test_ragen_messages_follow_ragens_converter():
    won, lost, broken = episodes()
    assert ragen_messages(won) == [  # the 1.0 earned from "_P_" is shown with "_P_", as RAGEN's history keeps it
        {"role": "user", "content": "P__"}, {"role": "assistant", "content": RIGHT},
        {"role": "user", "content": "_P_ (reward: 1.0)"}, {"role": "assistant", "content": RIGHT},
        {"role": "user", "content": "__P"}]
    assert ragen_messages(lost) == [  # the first state never shows a reward
        {"role": "user", "content": "P__"}, {"role": "assistant", "content": "no tags"},
        {"role": "user", "content": "P__"}]
    assert ragen_messages(broken)[-1] == {"role": "assistant", "content": RIGHT}  # no final state after an error


def test_ragen_jsonl_has_ragens_metadata_keys(tmp_path):
    path = write_ragen_jsonl(str(tmp_path / "ragen.jsonl"), episodes())
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line["custom_id"] for line in lines] == ["traj_0", "traj_1", "traj_2"]
    assert set(lines[0]) == {"custom_id", "messages", "metadata"}
    meta = lines[0]["metadata"]
    assert {k: meta[k] for k in ("env_id", "group_id", "num_turns", "total_reward", "success", "n_tokens")} == {
        "env_id": 0, "group_id": 0, "num_turns": 2, "total_reward": 1.0, "success": True, "n_tokens": 5}
    assert meta["Line/success"] == 1.0 and meta["Line/num_actions"] == 2.0 and meta["Line/pass@2"] == 1.0
    assert meta["Line/action_is_valid"] == 1.0 and meta["Line/dist"] == 0.5
    lost, broken = lines[1]["metadata"], lines[2]["metadata"]
    assert lost["Line/pass@2"] == 1.0 and lost["success"] is False  # its group had a success
    assert lost["total_reward"] == pytest.approx(-0.6) and lost["Line/action_is_valid"] == 0.0
    assert broken["Line/pass@1"] == 0.0 and broken["Line/dist"] is None  # NaN becomes null


def test_trainer_dump_keeps_the_conversation_and_adds_ragens_metadata(tmp_path):
    lines = read_jsonl(write_jsonl(str(tmp_path / "dump.jsonl"), episodes(), **PROMPT))
    roles = [m["role"] for m in lines[0]["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert "Turn 1:\nState:\nP__" in lines[0]["messages"][1]["content"]
    ragen = read_jsonl(write_ragen_jsonl(str(tmp_path / "ragen.jsonl"), episodes()))
    for ours, theirs in zip(lines, ragen):
        assert ours["metadata"].items() >= theirs["metadata"].items()  # RAGEN's keys and values, and more
    assert lines[0]["metadata"]["response_tokens"] == [[1, 2, 3], [4, 5]]
    assert lines[2]["metadata"]["error"] == "EnvError: boom" and lines[2]["metadata"]["final_state"] is None


def test_group_outcomes_split_groups_by_env_tag_too():
    won, lost, broken = episodes()
    other = Episode(env_tag="Other", seed=5, group_id=0, system="", history=[])
    assert group_outcomes([won, lost, broken, other]) == [(2, True), (2, True), (1, False), (1, False)]


def test_both_dumps_load_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    ours = write_jsonl(str(tmp_path / "dump.jsonl"), episodes(), **PROMPT)
    ragen = write_ragen_jsonl(str(tmp_path / "ragen.jsonl"), episodes())
    for path in (ours, ragen):
        loaded = datasets.load_dataset("json", data_files=path, split="train", cache_dir=str(tmp_path / "cache"))
        assert loaded.num_rows == 3
        assert loaded[0]["messages"] == read_jsonl(path)[0]["messages"]
        assert [row["metadata"]["success"] for row in loaded] == [True, False, False]


def test_convert_cli_writes_ragens_jsonl_from_an_eval_pkl(tmp_path):
    from ragen_jax.rollout import to_jsonl

    pkl = write_pkl(str(tmp_path / "rollouts.pkl"), RolloutResult(episodes=episodes(), batch=None, metrics={},
                                                                  timing={}))
    assert to_jsonl.main(["--input", pkl]) == 0
    assert read_jsonl(str(tmp_path / "rollouts.jsonl")) == read_jsonl(write_ragen_jsonl(str(tmp_path / "r.jsonl"),
                                                                                         episodes()))
    out = tmp_path / "chat.jsonl"
    assert to_jsonl.main(["--input", pkl, "--output", str(out), "--messages", "chat", "--response-length", "16"]) == 0
    assert read_jsonl(str(out))[0]["messages"][0] == {"role": "system", "content": "Move right."}
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps({"something": 1}))
    with pytest.raises(SystemExit, match="episodes"):
        to_jsonl.main(["--input", str(bad)])
