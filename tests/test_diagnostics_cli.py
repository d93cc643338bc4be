"""Offline CLI: a tiny HF checkpoint + a small JSONL rollout dump -> the collapse report."""

import json
import pickle

import numpy as np
import pytest

from ragen_jax.diagnostics.__main__ import main
from ragen_jax.diagnostics.offline import load_rollouts, record_pairs, think_text
from ragen_jax.models import make_tiny_model, save_pretrained


def _trajectory(n, group, state, thought):
    return {
        "custom_id": f"traj_{n}",
        "messages": [
            {"role": "system", "content": "You're a helpful assistant. Solve the puzzle."},
            {"role": "user", "content": f"Turn 1:\nState:\n{state}\nAlways output: <think> ..."},
            {"role": "assistant", "content": f"<think>{thought}</think><answer>Up</answer>"},
            {"role": "user", "content": f"Reward:\n0\nTurn 2:\nState:\n{state}#\n"},
            {"role": "assistant", "content": f"{thought} again</think><answer>Left</answer>"},
        ],
        "metadata": {"env_id": n, "group_id": group, "num_turns": 2, "total_reward": 0.0},
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_ckpt")
    model, tok = make_tiny_model(seed=0, num_layers=1, hidden_size=64, intermediate_size=128)
    save_pretrained(model, folder, tok)
    return str(folder)


@pytest.fixture()
def rollouts(tmp_path):
    states = ["#P_O#", "#_PO#", "#O_P#"]
    records = [
        _trajectory(n, n // 2, states[n // 2], f"push the box {'up' if n % 2 else 'left'}")
        for n in range(6)
    ]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path, records


def test_think_text():
    assert think_text("<think> a b </think><answer>x</answer>") == "a b"
    assert think_text("a b</think><answer>x</answer>") == "a b"
    assert think_text("<answer>x</answer>") == ""


def test_record_pairs_rebuild_prompts(checkpoint, rollouts):
    from ragen_jax.models import load_tokenizer

    tok = load_tokenizer(checkpoint)
    _, records = rollouts
    pairs = record_pairs(records, tok)
    assert pairs.group_ids == [0, 0, 1, 1, 2, 2]
    assert pairs.first_turn_prompts[0] == pairs.first_turn_prompts[1]
    assert pairs.first_turn_prompts[0] != pairs.first_turn_prompts[2]
    text = tok.decode(pairs.first_turn_prompts[0])
    assert text.endswith("<|im_start|>assistant\n<think>") and "#P_O#" in text
    assert tok.decode(pairs.first_turn_reasonings[1]) == "push the box up"
    assert len(pairs.turn_prompts[0]) == 2 and len(pairs.turn_prompts[0][1]) > len(pairs.turn_prompts[0][0])
    assert tok.decode(pairs.turn_reasonings[0][1]) == "push the box left again"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_cli_reports_metrics(checkpoint, rollouts, tmp_path, capsys):
    path, records = rollouts
    out = tmp_path / "report.json"
    assert main([str(path), "--checkpoint", checkpoint, "--out", str(out), "--batch-size", "8"]) == 0
    text = capsys.readouterr().out
    assert "MI estimate" in text and "regime" in text
    m = json.loads(out.read_text())
    assert m["collapse_first_turn_sample/num_prompts"] == 3.0
    assert m["collapse_first_turn_sample/mi_upper_bound"] == pytest.approx(np.log(3))
    assert m["collapse_first_turn_sample/mi_estimate"] <= np.log(3) + 1e-9
    assert np.isfinite(m["collapse_first_turn_sample/conditional_entropy_est"])
    assert m["collapse_first_turn_sample/conditional_entropy_est"] > 0
    assert "collapse_trajectory_sample/mi_estimate" in m
    # The pickle form of the same dump gives the same first-turn numbers.
    pkl = tmp_path / "rollouts.pkl"
    pkl.write_bytes(pickle.dumps(records))
    assert len(load_rollouts(str(pkl))) == 6
    out2 = tmp_path / "report2.json"
    main([str(pkl), "--checkpoint", checkpoint, "--out", str(out2), "--sampling", "first_turn"])
    m2 = json.loads(out2.read_text())
    assert m2["collapse_first_turn_sample/mi_estimate"] == pytest.approx(
        m["collapse_first_turn_sample/mi_estimate"], abs=1e-6
    )
    assert "collapse_trajectory_sample/mi_estimate" not in m2


def test_bad_dump_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"custom_id": "x"}) + "\n")
    with pytest.raises(ValueError, match="messages"):
        load_rollouts(str(bad))
    with pytest.raises(FileNotFoundError):
        load_rollouts(str(tmp_path / "missing.jsonl"))


def test_an_empty_report_says_why_even_with_timings():
    from ragen_jax.diagnostics.__main__ import summary

    text = summary({"timing_s/collapse_first_turn_step": 0.0, "timing_s/collapse_multi_turn_step": 0.01})
    assert text.startswith("No sampling had two or more prompts with reasoning") and "tiny_reasoning" in text


_CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>a</think>"}]
_BAD_DUMPS = [
    ("empty.jsonl", b"", "holds no trajectories"),
    ("blank.jsonl", b"\n \n", "holds no trajectories"),
    ("badline.jsonl", json.dumps({"messages": _CHAT}).encode() + b"\n{not json\n", "Line 2 of .* is not JSON"),
    ("binary.jsonl", bytes(range(256)), "not UTF-8 text"),
    ("cut.pkl", pickle.dumps([{"messages": _CHAT}])[:12], "not a readable pickle .*cut short"),
    ("empty.pkl", pickle.dumps({"episodes": []}), "holds no trajectories"),
    ("nocontent.jsonl", json.dumps({"messages": [{"role": "assistant"}]}).encode(), "Message 0 of record 0"),
    ("nullcontent.jsonl", json.dumps({"messages": [_CHAT[0], {"role": "assistant", "content": None}]}).encode(),
     "Message 1 of record 0"),
    ("strings.jsonl", json.dumps({"messages": ["hi", "there"]}).encode(), "not a chat message"),
    ("gid.jsonl", json.dumps({"messages": _CHAT, "metadata": {"group_id": "g1"}}).encode(),
     "group_id 'g1', not an integer"),
]


@pytest.mark.parametrize("name, data, message", _BAD_DUMPS, ids=[case[0] for case in _BAD_DUMPS])
def test_a_malformed_dump_is_named_before_the_model_loads(tmp_path, capsys, name, data, message):
    """Each bad dump gives one line naming the file (and line / record) instead of a traceback or a bare
    "Expecting value"; the checkpoint is never touched (here it does not even exist)."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message):
        load_rollouts(str(path))
    assert main([str(path), "--checkpoint", str(tmp_path / "no_model")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and name in err and "no_model" not in err


def test_integer_group_ids_written_as_text_still_group(checkpoint):
    from ragen_jax.models import load_tokenizer

    records = [{"messages": _CHAT, "metadata": {"group_id": "3"}}, {"messages": _CHAT, "metadata": {}}]
    assert record_pairs(records, load_tokenizer(checkpoint)).group_ids == [3, 0]


def test_out_is_checked_before_the_work_and_never_overwrites_the_dump(checkpoint, rollouts, tmp_path, capsys):
    path, _ = rollouts
    before = path.read_bytes()
    assert main([str(path), "--checkpoint", checkpoint, "--out", str(path)]) == 2
    assert "overwrite the rollouts" in capsys.readouterr().err and path.read_bytes() == before
    assert main([str(path), "--checkpoint", checkpoint, "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    # a report in a folder that does not exist yet is written there (it was lost after the whole run)
    out = tmp_path / "reports" / "run1.json"
    assert main([str(path), "--checkpoint", checkpoint, "--out", str(out), "--sampling", "first_turn"]) == 0
    assert "collapse_first_turn_sample/mi_estimate" in json.loads(out.read_text())


@pytest.mark.parametrize("flag, value, message", [
    ("--num-samples", "-1", "must be >= 0"), ("--batch-size", "0", "must be >= 1"),
    ("--temperature", "0", "must be > 0"), ("--std-eps", "-1e-3", "must be > 0"),
    ("--num-samples", "ten", "'ten' is not an integer"),
])
def test_a_bad_number_is_refused_before_the_model_loads(tmp_path, capsys, flag, value, message):
    """--num-samples -1 failed after the model load with numpy's "negative dimensions"; --batch-size 0 after it too."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "rollouts.jsonl"), "--checkpoint", str(tmp_path / "no_model"), f"{flag}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {message}" in err
