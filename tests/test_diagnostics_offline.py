"""The offline collapse report on played episodes: a PKL of one step's rollouts gives the trainer's MI metrics
of that step (`--step`), the CLI reads the PKL and the JSONL of a tiny run, and a run folder serves as
`--checkpoint` (its hf_export/, else its latest Orbax checkpoint)."""

import json
import logging
import shutil
import types

import jax
import numpy as np
import pytest
from flax import nnx
from test_rollout_engine import ScriptedSampler

from configs.bandit import get_config
from ragen_jax.diagnostics.__main__ import main
from ragen_jax.diagnostics.offline import load_dump, offline_report
from ragen_jax.diagnostics.policy import load_policy
from ragen_jax.rollout import group_seeds
from ragen_jax.rollout.dump import dump_kwargs, write_jsonl, write_pkl

STEP = 3  # the trainer's diagnostics step (what TensorBoard shows)
WORDS = ["teacher", "trader", "first", "second", "safe", "risky", "left", "right"]


def _tiny_bandit_config():
    c = get_config("tiny")
    c.model.tiny.update(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128)
    c.env.groups, c.env.group_size = 4, 2
    c.val.groups = c.val.batch_size = 2
    c.rollout.response_length, c.rollout.max_model_len = 24, 384
    c.trainer.mini_batch_size = c.trainer.micro_batch_size = 8
    c.warmstart.enabled = False
    c.diagnostics.update(every=1, max_pairs=6, batch_size=8,  # 6 of the 8 episodes: the step's draw matters
                         std_eps=0.05)  # not the default: the CLI must take it from the run folder
    c.rollout.engine = "lockstep"  # the scripted sampler stands in for Sampler.generate
    c.rollout.temperature = 0.7  # the scripted replies ignore it; the trainer scores pairs under it
    return c


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """One training step's rollout of the tiny model on Bandit (scripted reasoning, real engine and env), the
    trainer's MI metrics for it, and the run folder: config.json, the PKL/JSONL dumps, a checkpoint, hf_export."""
    from ragen_jax.trainer import Trainer

    cfg = _tiny_bandit_config()
    run = tmp_path_factory.mktemp("run")
    trainer = Trainer(cfg, str(run))
    replies = [f"the {WORDS[b]} arm pays {'more' if b % 3 else 'less'}</think><answer>{WORDS[b]}</answer>"
               for b in range(8)]
    trainer.engine.sampler = ScriptedSampler(trainer.engine.sampler, trainer.tokenizer, [replies])
    seeds, gids = group_seeds(cfg.env.train_seed, cfg.env.groups, cfg.env.group_size)
    res = trainer.engine.run(trainer.models.sampling_params(), trainer.train_env, seeds, gids, jax.random.PRNGKey(0),
                             tag=trainer.tag)
    metrics = trainer.collapse.mi_metrics(STEP, res.episodes, trainer.models.actor.graphdef, trainer.models.actor.full())
    (run / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    pkl = write_pkl(str(run / "rollouts" / "train.pkl"), res)
    jsonl = write_jsonl(str(run / "rollouts" / "train.jsonl"), res.episodes, **dump_kwargs(trainer.rollout))
    trainer.save(STEP - 1)
    export = trainer.export(str(run / "hf_export"))
    return types.SimpleNamespace(cfg=cfg, run=run, pkl=pkl, jsonl=jsonl, export=export, metrics=metrics,
                                 episodes=res.episodes)


def _comparable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith("timing_s/") and k != "collapse/num_trajectories"}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_trainer_metrics_equal_the_offline_report_on_the_pkl(played):
    d = played.cfg.diagnostics
    assert played.metrics["collapse_first_turn_sample/num_samples"] == 6.0  # a draw of 6 from 8
    kind, episodes = load_dump(played.pkl)
    assert kind == "episodes" and len(episodes) == 8
    offline = offline_report(played.pkl, played.export, step=STEP, num_samples=d.max_pairs, batch_size=d.batch_size,
                             thresholds={"conditional_entropy": d.entropy_threshold, "mi": d.mi_threshold},
                             temperature=played.cfg.rollout.temperature, std_eps=d.std_eps)
    assert _comparable(offline) == pytest.approx(_comparable(played.metrics), abs=1e-6)
    default_eps = offline_report(played.pkl, played.export, step=STEP, num_samples=d.max_pairs,
                                 batch_size=d.batch_size, temperature=played.cfg.rollout.temperature)
    assert default_eps["collapse_first_turn_sample/mi_zscore"] != pytest.approx(
        offline["collapse_first_turn_sample/mi_zscore"], abs=1e-6)
    untempered = offline_report(played.pkl, played.export, step=STEP, num_samples=d.max_pairs,
                                batch_size=d.batch_size)  # scored at temperature 1: other log-probs
    assert untempered["collapse_first_turn_sample/conditional_entropy_est"] != pytest.approx(
        offline["collapse_first_turn_sample/conditional_entropy_est"], abs=1e-4)
    other_step = offline_report(played.pkl, played.export, step=STEP + 1, num_samples=d.max_pairs,
                                batch_size=d.batch_size, sampling="first_turn")
    assert other_step["collapse_first_turn_sample/mi_estimate"] != pytest.approx(
        offline["collapse_first_turn_sample/mi_estimate"], abs=1e-9)


def test_cli_on_the_run_folder_uses_the_run_settings_and_matches_the_trainer(played, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "report.json"
    assert main([played.pkl, "--checkpoint", str(played.run), "--step", str(STEP), "--batch-size", "8",
                 "--out", str(out)]) == 0
    assert f"policy: Hugging Face folder {played.export}" in caplog.text
    assert "(8 episodes, exact sampled tokens)" in caplog.text
    assert _comparable(json.loads(out.read_text())) == pytest.approx(_comparable(played.metrics), abs=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_cli_reads_the_jsonl_of_the_same_run(played, tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "report.json"
    assert main([played.jsonl, "--checkpoint", played.export, "--num-samples", "0", "--sampling", "first_turn",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    from_text = json.loads(out.read_text())
    prompts = int(from_text["collapse_first_turn_sample/num_prompts"])  # distinct arm pairs among the 8 episodes
    assert f"[collapse_first_turn_sample] 8 pairs x {prompts} prompts" in text and "regime" in text
    assert "retrieval_at_1" in text and "@" not in text
    assert "(8 trajectories, recorded sampled tokens)" in caplog.text
    exact = offline_report(played.pkl, played.export, num_samples=None, sampling="first_turn")
    # The JSONL's rebuilt prompts are the sampled contexts: the same first-turn numbers as the exact tokens.
    first_turn = {k: v for k, v in exact.items() if k.startswith("collapse_first_turn_sample/")}
    assert {k: from_text[k] for k in first_turn} == pytest.approx(first_turn, abs=1e-5)


def test_a_run_folder_without_hf_export_restores_its_latest_checkpoint(played, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(played.run / "config.json", run / "config.json")
    shutil.copytree(played.run / "checkpoints", run / "checkpoints")
    model, tok, source = load_policy(str(run))
    assert source.startswith(f"checkpoint {STEP - 1} of {run}")
    exported, exported_tok, _ = load_policy(played.export)
    for a, b in zip(jax.tree.leaves(nnx.state(model, nnx.Param)), jax.tree.leaves(nnx.state(exported, nnx.Param))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert tok.encode("<think>a</think>") == exported_tok.encode("<think>a</think>")


def test_a_damaged_checkpoint_is_named_with_the_fix(played, tmp_path, capsys):
    """The offline CLI restores checkpoints by its own path: a damaged one is the trainer's CheckpointError, not an
    Orbax traceback."""
    from ragen_jax.models import CheckpointError

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(played.run / "config.json", run / "config.json")
    shutil.copytree(played.run / "checkpoints", run / "checkpoints")
    state = run / "checkpoints" / str(STEP - 1) / "state"
    for path in [p for p in state.rglob("*") if p.is_file() and p.parent.name == "d"]:
        with open(path, "r+b") as f:  # every data file half-written
            f.truncate(path.stat().st_size // 2)
    with pytest.raises(CheckpointError, match=f"Checkpoint {STEP - 1} in .* cannot be read"):
        load_policy(str(run))
    assert main([played.pkl, "--checkpoint", str(run)]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_bad_checkpoint_folders_are_named(played, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="hf_export/ or checkpoints/"):
        load_policy(str(tmp_path / "empty"))
    assert main([played.pkl, "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    no_config = tmp_path / "no_config"
    shutil.copytree(played.run / "checkpoints", no_config / "checkpoints")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(str(no_config))


def test_jsonl_pairs_are_cut_from_the_recorded_tokens_as_the_trainer_cuts_them(played):
    """A sampled response need not be its text's canonical tokenization; the trainer scores the sampled tokens, so
    the JSONL path now reads them from metadata.response_tokens (before, the text was re-tokenized: the offline
    report of a training step's JSONL read 6.04 nats where the trainer logged 6.01). RAGEN's dumps, without
    token ids, still use the text."""
    from ragen_jax.diagnostics.offline import load_rollouts, record_pairs
    from ragen_jax.diagnostics.pairs import rollout_pairs
    from ragen_jax.models.tokenizer import Tokenizer

    tok = Tokenizer.from_folder(played.export)
    records = load_rollouts(played.jsonl)
    text = tok.decode(records[0]["metadata"]["response_tokens"][0])
    by_piece = [t for piece in text.split(" ") for t in tok.encode(piece + " ")][:-1]  # the same text, other tokens
    assert tok.decode(by_piece).rstrip() == text.rstrip() and by_piece != tok.encode(text)
    records[0]["metadata"]["response_tokens"][0] = by_piece
    played.episodes[0].history[0].response_tokens, kept = by_piece, played.episodes[0].history[0].response_tokens
    try:
        want = rollout_pairs(played.episodes, tok.encode("</think>"), tok.decode)
    finally:
        played.episodes[0].history[0].response_tokens = kept
    got = record_pairs(records, tok)
    assert got.turn_reasonings == want.turn_reasonings and got.turn_prompts == want.turn_prompts
    assert got.first_turn_reasonings[0] != tok.encode(text.split("</think>")[0].strip())
    for rec in records:
        del rec["metadata"]["response_tokens"]
    by_text = record_pairs(records, tok)
    assert by_text.first_turn_reasonings[0] == tok.encode(text.split("</think>")[0].strip())
    assert by_text.turn_prompts == want.turn_prompts


def test_a_failed_episode_is_left_out_of_the_jsonl_and_pkl_pairs_alike(played):
    """A record whose env failed (metadata.error) is left out of the offline pairs as the trainer leaves the episode
    out, and counted in num_failed; a dump where every episode failed says so."""
    from ragen_jax.diagnostics.offline import load_rollouts, record_pairs
    from ragen_jax.diagnostics.pairs import rollout_pairs
    from ragen_jax.models.tokenizer import Tokenizer

    tok = Tokenizer.from_folder(played.export)
    records = load_rollouts(played.jsonl)
    records[1]["metadata"]["error"] = "ConnectionError: env server gone"
    played.episodes[1].error = "ConnectionError: env server gone"
    try:
        want = rollout_pairs(played.episodes, tok.encode("</think>"), tok.decode)
    finally:
        played.episodes[1].error = ""
    got = record_pairs(records, tok)
    assert want.num_failed == got.num_failed == 1
    assert len(got.group_ids) == len(records) - 1 and got.turn_reasonings == want.turn_reasonings
    assert got.turn_prompts == want.turn_prompts and got.group_ids == want.group_ids
    for rec in records:
        rec["metadata"]["error"] = "boom"
    with pytest.raises(ValueError, match=f"{len(records)} of {len(records)} failed in their env"):
        record_pairs(records, tok)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_checkpoint_continues_the_runs_ema_of_the_z_score(played):
    """The EMA z-scores continue the EMA the trainer saved with the checkpoint (RAGEN keeps it across steps; a
    Hugging Face folder has none, and test_trainer_metrics_equal_the_offline_report_on_the_pkl sees it start
    at the call's own std, as the trainer's first diagnostics step)."""
    from ragen_jax.diagnostics.policy import checkpoint_meta

    saved = checkpoint_meta(str(played.run), STEP - 1)["collapse"]["ema"]["collapse_first_turn_sample"]
    d = played.cfg.diagnostics
    kwargs = dict(step=STEP + 1, num_samples=d.max_pairs, batch_size=d.batch_size, sampling="first_turn",
                  temperature=played.cfg.rollout.temperature, std_eps=d.std_eps)  # another draw: another std
    m = offline_report(played.pkl, str(played.run), checkpoint_step=STEP - 1, **kwargs)
    g = lambda k: m[f"collapse_first_turn_sample/{k}"]  # noqa: E731
    ema = d.ema_decay * saved[0] + (1 - d.ema_decay) * g("marginal_std")
    assert abs(g("marginal_std") - saved[0]) > 1e-4 and g("marginal_std_ema") == pytest.approx(ema, abs=1e-7)
    assert g("mi_zscore_ema") * (ema + d.std_eps) == pytest.approx(g("mi_estimate"), abs=1e-6)
