"""docs/configuration.md names every config key, so a key added to the schema without a line there fails here."""

import os

from ragen_jax.config import default_plain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def leaf_keys(tree: dict, prefix: str = "") -> list[str]:
    keys = []
    for name, value in tree.items():
        if isinstance(value, dict) and value and prefix + name not in ("env.kwargs", "val.env_kwargs"):
            keys += leaf_keys(value, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def documented(key: str, text: str) -> bool:
    """`a.b.c` itself, `.c` in a row that names `a.b.` (grouped keys), or `optim.*.c` (both optimizers' keys)."""
    parent, _, last = key.rpartition(".")
    starred = ".".join(["optim", "*", *key.split(".")[2:]]) if key.startswith("optim.") else None
    return (f"`{key}`" in text or (bool(parent) and f"`.{last}`" in text and f"`{parent}." in text)
            or (starred is not None and f"`{starred}`" in text))


def test_every_config_key_is_in_the_configuration_doc():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        text = f.read()
    keys = leaf_keys(default_plain())
    assert len(keys) > 150 and "trainer.early_stop.max_policy_kl" in keys
    assert [k for k in keys if not documented(k, text)] == []


def test_a_missing_key_is_found():
    assert not documented("trainer.no_such_key", "`trainer.total_steps`")
    assert documented("model.tiny.num_layers", "`model.tiny.hidden_size`, `.num_layers`")
    assert documented("optim.critic.b2", "`optim.*.b2`")
