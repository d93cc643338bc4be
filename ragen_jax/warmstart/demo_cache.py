"""Demonstration rows for a run: from a JSONL file, or oracle / random play cached on disk by what shapes them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zipfile
from typing import Any

import jax

from ragen_jax.errors import MissingFileError
from ragen_jax.warmstart.demo_jsonl import load_jsonl_demos
from ragen_jax.warmstart.demos import DemoRows, demo_rows, oracle_demo_episodes

DEMO_CACHE_VERSION = 1
_DEMO_MEMO: dict[str, DemoRows] = {}


def _demo_cache_path(key: str) -> str:
    root = os.environ.get("RAGEN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "ragen_jax"))
    return os.path.join(root, "demos", f"{key}.npz")


def _demo_code_files(env_batch) -> list[str]:
    """The source files that shape demos: the rollout's prompts, contexts, parsing and batches, the env batch, the
    env's module and every file beside it (its generator, renderer, oracle), the env state descriptions and the
    grid symbol tables."""
    import inspect

    from envs import describe, symbols
    from ragen_jax.rollout import batching, config, context, episodes, parsing, prompts
    from ragen_jax import tool_calls
    from ragen_jax.warmstart import demo_jsonl, demos, scripted

    modules = (batching, config, context, episodes, parsing, prompts, demos, demo_jsonl, scripted, tool_calls,
               describe, symbols)
    files = [inspect.getsourcefile(m) for m in modules]
    for obj in (env_batch, getattr(env_batch, "env", None), (getattr(env_batch, "envs", None) or [None])[0]):
        module = inspect.getmodule(type(obj)) if obj is not None else None
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py"):
            folder = os.path.dirname(os.path.abspath(path))
            files.append(path)
            if os.path.isfile(os.path.join(folder, "__init__.py")):  # an env package: its sibling modules too
                files += [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
    return sorted({os.path.abspath(f) for f in files if f})


def _format_code_fingerprint(env_batch) -> str:
    """A hash of the code that shapes demos (`_demo_code_files`), so edits invalidate caches."""
    digest = hashlib.sha256()
    for path in _demo_code_files(env_batch):
        digest.update(os.path.basename(path).encode())  # not the folder: checkouts of one code share a cache
        try:
            with open(path, "rb") as f:
                digest.update(f.read())
        except OSError:
            pass
    return digest.hexdigest()[:16]


def _canonical_env_kwargs(name: str, overrides: Any) -> str:
    """The constructor kwargs of env `name` with `overrides` (envs.registry.env_kwargs: RAGEN's env_config names
    translated to ours, over the variant's values), less those at the constructor's default, as one string: one
    setting written either way keys one entry."""
    import inspect

    from envs import registry
    from envs.ragen_keys import plain

    spec = registry.get_spec(name)
    kwargs = plain(registry.env_kwargs(spec, dict(overrides or {})))
    try:
        params = inspect.signature(spec.resolve_factory()).parameters
    except (TypeError, ValueError):
        params = {}
    defaults = {k: plain(p.default) for k, p in params.items() if p.default is not inspect.Parameter.empty}
    return repr(sorted((k, v) for k, v in kwargs.items() if k not in defaults or defaults[k] != v))


# rollout settings that do not change a demonstration's rows (how episodes are scheduled, not what they are)
SCHEDULE_KEYS = ("engine", "slots", "chunk", "lanes")


@dataclasses.dataclass(frozen=True)
class DemoSource:
    """What demonstrations are made from: the env (its config section and a batch of it, whose code shapes the
    rows), the warm start's settings, the rollout format and the tokenizer."""

    env: Any
    env_batch: Any
    warmstart: Any
    rollout: Any
    tokenizer: Any


def demo_cache_key(source: DemoSource, num: int) -> str:
    """The demo cache's key: everything the played rows depend on (code, env and its kwargs, demo count, seed and
    reasoning, the rollout format and lengths, and the tokenizer: vocabulary, chat template, end and pad ids)."""
    env, w, tok = source.env, source.warmstart, source.tokenizer
    rollout = {k: v for k, v in dataclasses.asdict(source.rollout).items() if k not in SCHEDULE_KEYS}
    probe = tok.apply_chat_template([{"role": "user", "content": "probe"}], add_generation_prompt=True)
    blob = json.dumps({"v": DEMO_CACHE_VERSION, "code": _format_code_fingerprint(source.env_batch),
                       "env": env.name, "kwargs": _canonical_env_kwargs(env.name, env.kwargs),
                       "num": int(num), "seed": int(w.seed), "source": w.source,
                       "reasoning": [w.reasoning, w.reasoning_text, int(w.filler_words)],
                       "rollout": rollout, "vocab": len(tok), "probe": probe,
                       "probe_ids": tok.encode(probe + "</think><answer>Up || Left</answer>"),
                       "eos": [int(i) for i in tok.eos_token_ids], "pad": int(tok.pad_token_id)},
                      sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _load_cached_demos(path: str) -> DemoRows | None:
    """The rows cached at `path`, or None when there are none or the file is damaged (it is then rebuilt)."""
    if not os.path.exists(path):
        return None
    try:
        rows = DemoRows.load(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # truncated, empty or foreign
        return None
    shapes = {rows.tokens.shape, rows.attention_mask.shape, rows.loss_mask.shape}
    return rows if len(shapes) == 1 and rows.tokens.ndim == 2 and rows.num_rows else None


def _save_cached_demos(rows: DemoRows, path: str) -> None:
    """Write rows to `path` atomically (a private temporary file, then a rename): a reader, another process or
    another host sharing the folder never sees a partial file. A cache that cannot be written is skipped."""
    tmp = path + f".{jax.process_index()}.{os.getpid()}.tmp.npz"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        rows.save(tmp)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs rebuilding; leave no partial file behind
        try:
            os.remove(tmp)
        except OSError:
            pass


def build_demos(source: DemoSource, num_demos: int | None = None) -> DemoRows:
    """Demonstration rows for an env and rollout format (oracle or random play is cached on disk)."""
    w, rcfg, tok = source.warmstart, source.rollout, source.tokenizer
    if w.source not in ("oracle", "random"):
        if not os.path.isfile(w.source):
            raise MissingFileError(f"config.warmstart.source={w.source!r} is neither 'oracle', 'random' nor a "
                                    f"JSONL file.")
        return load_jsonl_demos(w.source, tok, rcfg)
    num = int(num_demos or w.num_demos)
    key = demo_cache_key(source, num)
    if key in _DEMO_MEMO:
        return _DEMO_MEMO[key]
    path = _demo_cache_path(key)
    rows = _load_cached_demos(path)
    if rows is not None:
        _DEMO_MEMO[key] = rows
        return rows
    episodes = oracle_demo_episodes(source.env.name, num, tok, rcfg, seed=int(w.seed), env_kwargs=dict(source.env.kwargs),
                                    reasoning_text=w.reasoning_text, random_actions=w.source == "random",
                                    reasoning=w.reasoning, filler_words=int(w.filler_words))
    rows = _DEMO_MEMO[key] = demo_rows(episodes, tok, rcfg)
    _save_cached_demos(rows, path)
    return rows
