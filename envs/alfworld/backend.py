"""Plays `.tw-pddl` games (generated ones and ALFWorld's own game files) with TextWorld's PDDL engine.

TextWorld (`textworld.envs.pddl.PddlEnv`) needs the optional `textworld[pddl]` install: its `fast-downward-textworld`
dependency has no wheel on PyPI and compiles Fast Downward (C++, needs cmake and a compiler) when installed. Each
backend holds one copy of Fast Downward's library, so episodes in threads do not share planner state; translating a
game (Fast Downward's Python translator, on every load and reset) swaps `sys.stdout`, overwrites `sys.argv` and sets
module-wide translator options, so loads and resets hold a process-wide lock and put `sys.argv` back.

Two caches of pure functions make the engine usable for batches of episodes (`install_caches`, once per process):
a game's translation (`fast_downward.pddl2sas`, run three times per load and reset, and again for every episode of a
group, which share a game) is kept per (domain, problem, mode); and TextWorld's grammar parses, which it redoes for
every admissible command on every step, are kept and handed out as copies (a derivation writes into its symbols).
Object names are shown as ALFWorld shows them (envs.alfworld.names).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import threading
from typing import Any, Iterator, Protocol

from envs.alfworld.names import display_names

INSTALL = 'pip install "textworld[pddl]==1.7.0"'
_TRANSLATE_LOCK = threading.Lock()


@contextlib.contextmanager
def _translating() -> Iterator[None]:
    """One game translation at a time, with the process's `sys.argv` restored after it."""
    with _TRANSLATE_LOCK:
        argv = sys.argv
        try:
            yield
        finally:
            sys.argv = argv


class GameBackend(Protocol):
    """What the env needs of a text-game engine (a stand-in with this interface can replace TextWorld)."""

    def load(self, game: dict[str, Any] | str) -> None:
        """Load one game: its `.tw-pddl` data, or the path of a `.tw-pddl` file."""

    def reset(self) -> tuple[str, list[str]]:
        """Start the loaded game -> (observation, admissible commands)."""

    def step(self, command: str) -> tuple[str, bool, list[str]]:
        """Play one command -> (feedback, won, admissible commands); a non-admissible command changes nothing."""


def import_pddl_env():
    """TextWorld's PddlEnv class, or an ImportError that names the install command."""
    try:
        import fast_downward  # noqa: F401 - textworld[pddl]'s planner; PddlEnv says only "requires fast_downward"
        import textworld
        from textworld.envs.pddl import PddlEnv
    except ImportError as e:
        raise ImportError(f"The ALFWorld env plays its games with TextWorld's PDDL engine, which is not installed "
                          f"({e}). Install it with: {INSTALL} (its fast-downward-textworld dependency compiles C++ "
                          "with cmake and a compiler, several minutes).") from e
    return textworld, PddlEnv


def install_caches() -> None:
    """Remember Fast Downward's translations and TextWorld's grammar parses (module docstring); idempotent."""
    import fast_downward
    from textworld.envs.pddl import textgen

    translate = fast_downward.pddl2sas
    if not getattr(translate, "ragen_jax_cached", False):
        remembered_translation = functools.lru_cache(maxsize=256)(
            lambda domain, problem, optimize: translate(domain, problem, verbose=False, optimize=optimize))

        def cached_translate(domain, problem, verbose=False, optimize=False):
            if verbose:
                return translate(domain, problem, verbose=verbose, optimize=optimize)
            return remembered_translation(domain, problem, bool(optimize))

        cached_translate.ragen_jax_cached = True
        fast_downward.pddl2sas = cached_translate
    parse = textgen._parse_and_convert  # noqa: SLF001 - a pure function of its text
    if not getattr(parse, "ragen_jax_cached", False):
        remembered_parse = functools.lru_cache(maxsize=8192)(
            lambda text, rule_name, trace: parse(text, rule_name=rule_name, trace=trace))

        def cached_parse(text, rule_name="symbols", trace=False, **kwargs):
            if kwargs or not isinstance(text, str):
                return parse(text, rule_name=rule_name, trace=trace, **kwargs)
            return copy.deepcopy(remembered_parse(text, rule_name, bool(trace)))

        cached_parse.ragen_jax_cached = True
        textgen._parse_and_convert = cached_parse  # noqa: SLF001


class TextWorldBackend:
    """One TextWorld PddlEnv, reused across games (GameBackend)."""

    def __init__(self) -> None:
        textworld, pddl_env = import_pddl_env()
        with _TRANSLATE_LOCK:
            install_caches()
        self.env = pddl_env(textworld.EnvInfos(admissible_commands=True, won=True))

    def load(self, game: dict[str, Any] | str) -> None:
        with _translating():
            self.env.load(game)
        infos = self.env._entity_infos  # noqa: SLF001 - where PddlEnv keeps the names it shows (ALFWorld renames here too)
        names = display_names(infos)
        for object_id, info in infos.items():
            info.name = names[object_id]

    def reset(self) -> tuple[str, list[str]]:
        with _translating():
            state = self.env.reset()
        return state.feedback, list(state["admissible_commands"])

    def step(self, command: str) -> tuple[str, bool, list[str]]:
        state, _, _ = self.env.step(command)
        return state.feedback, bool(state["won"]), list(state["admissible_commands"])

    def close(self) -> None:
        self.env.close()
