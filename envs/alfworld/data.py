"""Real ALFWorld game files on disk (what `alfworld-download` puts under $ALFWORLD_DATA), chosen as ALFWorld's
AlfredTWEnv chooses them: trial folders holding `traj_data.json` and `game.tw-pddl`, of the wanted task types, not
"movable" or "Sliced", and marked solvable. Never downloads anything.
"""

from __future__ import annotations

import functools
import json
import os

from envs.alfworld.generator import TASK_TYPES

# RAGEN's / ALFWorld's split names -> the folders of json_2.1.1
SPLIT_FOLDERS = {"train": "train", "eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}
LAYOUT = ("data_dir must be an ALFWorld data folder as `alfworld-download` writes it ($ALFWORLD_DATA): "
          "DIR/json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/ holding traj_data.json and game.tw-pddl "
          "(or DIR may be that json_2.1.1 folder itself)")


def split_folder(data_dir: str, split: str) -> str:
    """The folder of ALFWorld split `split` (a key of SPLIT_FOLDERS) under `data_dir`, or an error naming the layout."""
    if split not in SPLIT_FOLDERS:
        raise ValueError(f"Unknown ALFWorld split {split!r}; use one of {', '.join(SPLIT_FOLDERS)}.")
    root = os.path.expanduser(data_dir)
    for folder in (os.path.join(root, "json_2.1.1", SPLIT_FOLDERS[split]), os.path.join(root, SPLIT_FOLDERS[split])):
        if os.path.isdir(folder):
            return folder
    what = "does not exist" if not os.path.exists(root) else f"has no {SPLIT_FOLDERS[split]} split folder"
    raise FileNotFoundError(f"ALFWorld data_dir {data_dir!r} {what}. {LAYOUT}.")


@functools.lru_cache(maxsize=16)
def find_games(data_dir: str, split: str, task_types: tuple[int, ...]) -> tuple[str, ...]:
    """Paths of the playable game files of `split`, sorted (one scan per process for each argument set)."""
    wanted = {TASK_TYPES[t] for t in task_types}
    folder = split_folder(data_dir, split)
    games = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        if "traj_data.json" not in files or "game.tw-pddl" not in files or "movable" in root or "Sliced" in root:
            continue
        with open(os.path.join(root, "traj_data.json"), encoding="utf-8") as f:
            if json.load(f).get("task_type") not in wanted:
                continue
        game_file = os.path.join(root, "game.tw-pddl")
        with open(game_file, encoding="utf-8") as f:
            if not json.load(f).get("solvable", False):
                continue
        games.append(game_file)
    if not games:
        raise FileNotFoundError(f"No playable ALFWorld game in {folder!r} (task types {sorted(task_types)}): no trial "
                                f"folder with traj_data.json and a solvable game.tw-pddl. {LAYOUT}.")
    return tuple(sorted(games))
