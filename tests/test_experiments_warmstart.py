"""experiments/bench/bench_warmstart.py: its documented commands parse; --compare_prefix times both layouts of the same
rows and stops when their losses differ."""

import shlex
import types

import pytest

from experiments.bench import bench_warmstart as bench


def test_the_docstrings_commands_parse():
    commands = [line.strip() for line in bench.__doc__.splitlines()
                if line.strip().startswith("python experiments/bench/bench_warmstart.py")]
    assert len(commands) >= 2
    for command in commands:
        bench.parser().parse_args(shlex.split(command)[2:])  # argparse exits 2 on an unknown flag


@pytest.fixture(scope="module")
def bandit():
    from configs.base import apply_tiny, get_base_config
    from ragen_jax.models.tiny import load_tiny_tokenizer, make_tiny_model
    from ragen_jax.monitoring import Monitor
    from ragen_jax.warmstart.demos import demo_rows, oracle_demo_episodes
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.trainer.setup import split_model

    c = get_base_config()
    apply_tiny(c)
    c.env.name, c.env.max_turn, c.env.max_actions_per_turn = "Bandit", 1, 1
    c.warmstart.update(lr=1e-3, warmup_steps=0)
    tok = load_tiny_tokenizer()
    rows = demo_rows(oracle_demo_episodes("Bandit", 8, tok, RolloutConfig.of(c), seed=5, batch_size=8), tok,
                     RolloutConfig.of(c))
    model, _ = make_tiny_model(seed=0, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                               intermediate_size=64)
    trainer = types.SimpleNamespace(cfg=c, actor=split_model(model, lora=False), monitor=Monitor("", enabled=False))
    return trainer, rows


@pytest.mark.slow  # builds demos and compiles two SFT steps: ~40 s on 2 busy cores
def test_compare_prefix_prints_a_labelled_ratio_of_equal_losses(bandit, capsys):
    trainer, rows = bandit
    bench.compare_prefix(trainer, rows, batch=8, micro=4, repeats=1)
    out = capsys.readouterr().out
    assert "above 1: sharing the prefix is faster" in out and "during the timed calls" in out


@pytest.mark.slow
def test_compare_prefix_exits_when_the_two_losses_differ(bandit, monkeypatch):
    trainer, rows = bandit
    stepper = bench._sft_stepper

    def plain_off_by_one(trainer, data, batch, micro):
        call = stepper(trainer, data, batch, micro)
        return call if len(data.prefix) else (lambda: call() + 1.0)

    monkeypatch.setattr(bench, "_sft_stepper", plain_off_by_one)
    with pytest.raises(SystemExit, match="disagree"):
        bench.compare_prefix(trainer, rows, batch=8, micro=4, repeats=1)
