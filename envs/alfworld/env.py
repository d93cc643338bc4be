"""RAGEN's Alfworld env: text household tasks with ALFWorld's commands, on generated games or real ALFWorld data.

Observation: the game's text, then "\\n\\nAdmissible actions: [a, b, ...]" (RAGEN's format). The answer is one
command; RAGEN's `action_is_valid` is whether it is among the admissible ones (a command that is not changes
nothing). Reward `score` (10) when the task is done, else 0; the episode ends when it is done or after `max_steps`
commands (ALFWorld's 50). Without `data_dir` every seed is a generated game (envs.alfworld.generator); with it,
seed s plays game s mod n of the split's sorted game files.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from envs.alfworld.backend import GameBackend, TextWorldBackend
from envs.alfworld.data import find_games
from envs.alfworld.generator import TASK_TYPES, generate_game
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys

# RAGEN's config/envs.yaml env_instruction for Alfworld and AlfworldOOD.
INSTRUCTION = (
    "You are an expert agent in the ALFRED Embodied Environment.\n"
    "Complete household tasks by navigating and interacting with objects.\n\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <answer>...</answer> tags.\n")
EVAL_DATASETS = ("eval_in_distribution", "eval_out_of_distribution")
RAGEN_KEYS = RagenKeys(
    fixed={"render_mode": ("text", "the env renders text only")},
    unsupported={"config_file": "ragen-jax reads no ALFWorld yaml: pass data_dir (the $ALFWORLD_DATA folder), "
                                "task_types and max_steps as env kwargs"})


def format_observation(text: str, admissible: Sequence[str]) -> str:
    """RAGEN's observation: the game text and the admissible commands."""
    return f"{text}\n\nAdmissible actions: [{', '.join(admissible)}]"


class AlfworldEnv(HostEnv):
    """ALFWorld-style household tasks played by TextWorld's PDDL engine (RAGEN's AlfredTXTEnv)."""

    ragen_keys = RAGEN_KEYS
    # a batch's resets take turns translating their games (envs.alfworld.backend), so one may wait for many others
    step_timeout_s = 600.0

    def __init__(self, data_dir: str | None = None, split: str = "train",
                 eval_dataset: str = "eval_in_distribution", task_types: Sequence[int] = tuple(TASK_TYPES),
                 max_steps: int = 50, score: float = 10.0,
                 backend: Callable[[], GameBackend] | None = None) -> None:
        if split not in ("train", "val"):
            raise ValueError(f"Alfworld split must be 'train' or 'val' (RAGEN's modes; 'val' plays eval_dataset), "
                             f"got {split!r}.")
        if eval_dataset not in EVAL_DATASETS:
            raise ValueError(f"Alfworld eval_dataset must be one of {EVAL_DATASETS}, got {eval_dataset!r}.")
        self.task_types = tuple(int(t) for t in task_types)
        if not self.task_types or any(t not in TASK_TYPES for t in self.task_types):
            raise ValueError(f"task_types must be ALFWorld's task-type ids {sorted(TASK_TYPES)}, got {list(task_types)}.")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}.")
        self.split_name = "train" if split == "train" else eval_dataset
        self.games = find_games(data_dir, self.split_name, self.task_types) if data_dir else None
        self.backend = (backend or TextWorldBackend)()
        self.max_steps, self.score = int(max_steps), float(score)
        self.admissible: list[str] = []
        self.steps = 0
        self.started = False

    def instruction(self) -> str:
        return INSTRUCTION

    def game_for_seed(self, seed: int) -> tuple[dict[str, Any] | str, str]:
        """(game data or file, a name for it) of `seed`: a generated game, or RAGEN's `seed % n`-th game file."""
        if self.games is None:
            return generate_game(int(seed), self.task_types), f"generated:{int(seed)}"
        path = self.games[int(seed) % len(self.games)]
        return path, path

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        game, name = self.game_for_seed(seed)
        self.backend.load(game)
        text, self.admissible = self.backend.reset()
        self.steps, self.started = 0, True
        return format_observation(text, self.admissible), {"game": name}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self.started:
            raise RuntimeError("AlfworldEnv.step called before reset(seed).")
        command = str(action).strip()
        valid = command in self.admissible
        text, won, self.admissible = self.backend.step(command)
        self.steps += 1
        truncated = not won and self.steps >= self.max_steps
        info = {"action_is_valid": valid, "action_is_effective": valid, "success": won}
        return format_observation(text, self.admissible), self.score * float(won), won, truncated, info

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
