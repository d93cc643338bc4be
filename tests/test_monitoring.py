"""Monitor: metric names TensorBoard keeps as they are, the config as hparams and text, the wandb mirror."""

import glob
import json
import logging
import struct
import sys
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata

from configs.base import get_base_config
from ragen_jax.diagnostics import CollapseConfig, RolloutPairs, collapse_metrics
from ragen_jax.monitoring import Monitor, flatten_config, is_valid_tag, wandb_settings
from ragen_jax.rollout.metrics import episode_metrics
from ragen_jax.rollout.prompts import TurnRecord
from ragen_jax.rollout.types import Episode


def _reload(logdir: str) -> EventAccumulator:
    acc = EventAccumulator(logdir)
    acc.Reload()
    return acc


def _episodes(groups: int, group_size: int) -> list[Episode]:
    return [Episode(env_tag="Bandit", seed=g, group_id=g, system="", success=bool((g + i) % 2),
                    history=[TurnRecord(state="s", actions_left=1, response_tokens=[1, 2], reward=1.0)],
                    info_sums={"action_is_valid": 1.0})
            for g in range(groups) for i in range(group_size)]


def _produced_metric_names() -> dict[str, float]:
    """Names the rollout and the collapse diagnostics produce, with the trainer's prefixes."""
    names = {f"train/{k}": v for k, v in episode_metrics(_episodes(4, 8), "Bandit").items()}
    names.update({f"val/{k}": v for k, v in episode_metrics(_episodes(4, 1), "Bandit").items()})
    prompts = [[g, g + 1] for g in range(4) for _ in range(2)]
    reasonings = [[7, g % 3 + 1] for g in range(8)]
    pairs = RolloutPairs(prompts, reasonings, [g // 2 for g in range(8)], [[p] for p in prompts],
                         [[z] for z in reasonings])

    def score(cols, rows):
        L = -np.abs(np.subtract.outer(np.arange(len(rows)), np.arange(len(cols)))).astype(float)
        return L, 2 * L

    metrics, _ = collapse_metrics(pairs, score, CollapseConfig(num_samples=None), np.random.default_rng(0))
    names.update(metrics)
    return names


def test_produced_metric_names_are_valid_tensorboard_tags(tmp_path, caplog):
    metrics = _produced_metric_names()
    assert "train/Bandit/pass_at_8" in metrics and "val/Bandit/pass_at_1" in metrics
    assert "collapse_first_turn_sample/retrieval_accuracy_at_8" in metrics
    assert [n for n in metrics if not is_valid_tag(n)] == []
    caplog.set_level(logging.DEBUG)
    m = Monitor(str(tmp_path / "tb"))
    for step in range(3):
        m.scalars(metrics, step)
    m.close()
    assert not [r.getMessage() for r in caplog.records
                if "illegal" in r.getMessage() or "not a valid" in r.getMessage()]
    assert set(_reload(str(tmp_path / "tb")).Tags()["scalars"]) == set(metrics)


def test_an_invalid_name_is_reported_once_and_logged_as_tensorboard_would(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    m = Monitor(str(tmp_path / "tb"))
    for step in range(3):
        m.scalars({"train/Bandit/pass@8": 0.5}, step)
    m.close()
    ours = [r for r in caplog.records if r.name == "ragen_jax.monitoring"]
    assert len(ours) == 1 and "'train/Bandit/pass@8'" in ours[0].getMessage()
    assert not [r for r in caplog.records if "illegal" in r.getMessage()]  # tensorboardX's per-step message
    assert _reload(str(tmp_path / "tb")).Tags()["scalars"] == ["train/Bandit/pass_8"]
    assert not is_valid_tag("/leading/slash") and not is_valid_tag("a b") and is_valid_tag("timing_s/a-b.c")


def test_config_is_written_as_hparams_and_as_text(tmp_path):
    cfg = get_base_config()
    flat = flatten_config(cfg.to_dict())
    assert flat["model.lora.rank"] == 0 and flat["env.name"] == "CoordSokoban"
    m = Monitor(str(tmp_path / "tb"))
    m.config(flat, {"final/val_success": 0.25})
    m.close()
    acc = _reload(str(tmp_path / "tb"))
    content = acc.PluginTagToContent("hparams")
    assert set(content) == {"_hparams_/session_start_info"}  # no experiment summary: TensorBoard infers columns
    hp = hparams_metadata.parse_session_start_info_plugin_data(content["_hparams_/session_start_info"]).hparams
    assert set(hp) == set(flat)
    assert hp["env.name"].string_value == "CoordSokoban"
    assert hp["algo.kl_loss_coef"].number_value == pytest.approx(cfg.algo.kl_loss_coef)
    assert hp["rollout.enable_think"].bool_value is True
    assert hp["trainer.total_steps"].number_value == 200
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| model.lora.rank | 0 |" in text and "| env.name | CoordSokoban |" in text
    assert [e.value for e in acc.Scalars("final/val_success")] == [0.25]


def test_wandb_settings_from_the_config():
    cfg = get_base_config()
    assert wandb_settings(cfg.logging, "runs/a") is None
    cfg.logging.wandb, cfg.logging.wandb_mode = True, "offline"
    assert wandb_settings(cfg.logging, "runs/a/") == {"project": "ragen-jax", "entity": None, "mode": "offline",
                                                       "name": "a", "dir": "runs/a/"}
    cfg.logging.wandb_mode = "ofline"
    with pytest.raises(ValueError, match="wandb_mode='ofline'"):
        wandb_settings(cfg.logging, "runs/a")


def test_missing_wandb_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ImportError, match="pip install wandb"):
        Monitor(str(tmp_path / "tb"), wandb={"mode": "offline", "dir": str(tmp_path)})


def _wandb_records(run_file: str) -> list:
    """The records of an offline run's .wandb file (LevelDB log framing: 32 KiB blocks, 7-byte chunk headers)."""
    from wandb.proto import wandb_internal_pb2

    data = open(run_file, "rb").read()
    pos, chunk, records = 7, b"", []  # after the file header ":W&B" + magic + version
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):  # the end, or a record still being written
            break
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def test_wandb_offline_run_mirrors_scalars_text_images_and_config(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is in requirements-test.txt; `pip install wandb`")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    m = Monitor(str(tmp_path / "run" / "tb"), wandb={"project": "ragen-jax", "mode": "offline",
                                                    "dir": str(tmp_path / "run"), "name": "run"})
    m.config({"algo.kl_loss_coef": 0.05, "env.name": "Bandit", "env.kwargs.sizes": [1, 2]})
    m.scalars({"sft/loss": 2.0}, 30)  # the warm start's own steps, then RL from 0: both kept
    m.scalars({"train/Bandit/success": 0.5, "bad": float("nan")}, 0)
    m.scalars({"train/Bandit/success": 0.75}, 1)
    m.text("samples/trajectory", "<think>left</think>", 1)
    m.image("collapse/regime_plane", np.full((8, 8, 3), 200, np.uint8), 1)
    m.close()
    (run_file,) = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    deadline = time.monotonic() + 30  # wandb's service may still be writing the file after finish()
    while not ((records := _wandb_records(run_file)) and records[-1].HasField("exit")) and time.monotonic() < deadline:
        time.sleep(0.2)
    config = {u.key: u.value_json for r in records if r.HasField("config") for u in r.config.update}
    assert records[-1].HasField("exit")
    assert {k: json.loads(v) for k, v in config.items() if not k.startswith("_")} == {
        "algo.kl_loss_coef": 0.05, "env.name": "Bandit", "env.kwargs.sizes": "[1, 2]"}
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in records if r.HasField("history")]
    logged = [(row["trainer/step"], key, row[key]) for row in rows for key in row
              if key in ("sft/loss", "train/Bandit/success")]
    assert logged == [(30, "sft/loss", 2.0), (0, "train/Bandit/success", 0.5), (1, "train/Bandit/success", 0.75)]
    assert not any("bad" in row for row in rows)
    media = {key.split("/_type")[0]: row[key] for row in rows for key in row if key.endswith("/_type")}
    assert media == {"samples/trajectory": "html-file", "collapse/regime_plane": "image-file"}


def test_a_full_disk_turns_tensorboard_off_with_one_error_and_never_blocks(tmp_path, caplog):
    """tensorboardX's writer thread died on a failed write and the trainer then waited forever on its full queue
    (after ~10 more scalars). Now the first failed write is one error, later writes are no-ops, nothing blocks,
    and what was written before stays readable."""
    import threading

    from disk_testlib import full_disk

    monitor = Monitor(str(tmp_path))
    monitor.scalars({"train/a": 1.0}, 0)
    monitor.flush()
    finished = threading.Event()

    def log_a_run():
        for step in range(1, 200):
            monitor.scalars({"train/a": float(step), "train/b": 2.0}, step)
            monitor.text("sample", "x" * 10_000, step)
        monitor.image("plot", np.zeros((8, 8, 3), np.uint8), 200)
        monitor.flush()
        monitor.close()
        finished.set()

    with caplog.at_level(logging.ERROR), full_disk():
        writer = threading.Thread(target=log_a_run, daemon=True)
        writer.start()
        writer.join(timeout=60)
    assert finished.is_set(), "logging blocked on a full disk"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "TensorBoard logging stops" in errors[0] and "File too large" in errors[0], errors
    assert [e.step for e in _reload(str(tmp_path)).Scalars("train/a")] == [0]


def test_events_reach_the_file_every_flush_secs_without_a_flush(tmp_path):
    from ragen_jax.monitoring import EventFile
    from tensorboardX.summary import scalar

    events = EventFile(str(tmp_path), flush_secs=0.0)
    events.add(scalar("a", 1.0), 3)
    assert [e.step for e in _reload(str(tmp_path)).Scalars("a")] == [3]
    events.close()


def _turns(*lengths: int) -> list[TurnRecord]:
    return [TurnRecord(state="s", actions_left=1, response_tokens=[1] * n, reward=0.0) for n in lengths]


def test_response_length_is_ragens_response_tokens_per_training_sample():
    """RAGEN's `response_length` is its response mask summed per training row, averaged over rows: in the "full"
    context mode a row is an episode's conversation from its final context's oldest turn on (5 turns of 100 tokens
    read 500, not 100); the per-turn modes train one turn per row. `response_length_per_turn` is the mean turn."""
    from ragen_jax.rollout.metrics import response_length, response_length_per_turn

    a = Episode(env_tag="T", seed=0, group_id=0, system="", history=_turns(100, 100, 100, 100, 100))
    b = Episode(env_tag="T", seed=0, group_id=0, system="", history=_turns(40, 60))
    cut = Episode(env_tag="T", seed=1, group_id=1, system="", history=_turns(300, 200, 50), history_start=1)
    unplayed = Episode(env_tag="T", seed=2, group_id=2, system="",
                       history=[TurnRecord(state="s", actions_left=1)])  # its reset failed: no row
    episodes = [a, b, cut, unplayed]
    assert response_length(episodes, "full") == pytest.approx((500 + 100 + 250) / 3)
    for mode in ("single_turn", "limited_multi_turn"):
        assert response_length(episodes, mode) == pytest.approx(1150 / 10)
    assert response_length_per_turn(episodes) == pytest.approx(1150 / 10)
    assert response_length([unplayed], "full") == 0.0 and response_length_per_turn([unplayed]) == 0.0
    with pytest.raises(ValueError, match="context mode"):
        response_length(episodes, "whole")


def test_a_non_finite_scalar_is_left_out_and_reported_once_by_name(tmp_path, caplog):
    """TensorBoard cannot draw NaN/inf: the point is left out, and the first one of each metric says so (a silent
    gap in actor/pg_loss hid a diverged loss)."""
    caplog.set_level(logging.DEBUG)
    m = Monitor(str(tmp_path / "tb"))
    for step in range(3):
        m.scalars({"actor/pg_loss": float("nan") if step else 0.5, "actor/grad_norm": float("inf"),
                   "train/Bandit/success": 0.25}, step)
    m.close()
    ours = [r.getMessage() for r in caplog.records if r.name == "ragen_jax.monitoring"]
    assert len(ours) == 2 and any("'actor/pg_loss'" in s and "nan" in s and "step 1" in s for s in ours)
    assert any("'actor/grad_norm'" in s and "inf" in s and "step 0" in s for s in ours)
    acc = _reload(str(tmp_path / "tb"))
    assert [e.step for e in acc.Scalars("actor/pg_loss")] == [0]
    assert [e.step for e in acc.Scalars("train/Bandit/success")] == [0, 1, 2]
    assert "actor/grad_norm" not in acc.Tags()["scalars"]
