"""Convert a PKL of played episodes to OpenAI-format JSONL (RAGEN's scripts/convert_to_jsonl.py for our PKLs).

    python -m ragen_jax.rollout.to_jsonl --input runs/x/eval/init/rollouts.pkl [--output out.jsonl]
        [--messages ragen|chat]

`--messages ragen` (default) writes RAGEN's converter records (dump.write_ragen_jsonl: bare states and raw
responses); `chat` writes the trainer's records (dump.write_jsonl: the whole conversation the policy saw), whose
prompts take the run's rollout settings from the config.json beside the PKL, or from --response-length,
--no-think and --format-penalty. RAGEN's own PKLs (veRL DataProto) are not read: convert those with RAGEN's script.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from typing import Any, Sequence

from ragen_jax.rollout.dump import write_jsonl, write_ragen_jsonl


def load_episodes(path: str) -> list[Any]:
    """The episodes of a PKL written by dump.write_pkl ({"episodes": [...], ...}) or a pickled list of them."""
    if not os.path.isfile(path):
        sys.exit(f"to_jsonl: input {path!r} does not exist; pass a rollouts.pkl of run.py --mode=eval.")
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except Exception as e:  # noqa: BLE001 - not a pickle, cut short, or another program's classes
        sys.exit(f"to_jsonl: {path!r} is not a readable pickle of ragen-jax episodes ({type(e).__name__}: {e}); RAGEN's "
                 "own DataProto PKLs convert with RAGEN's scripts/convert_to_jsonl.py.")
    episodes = data.get("episodes") if isinstance(data, dict) else data
    if not isinstance(episodes, list) or not all(hasattr(ep, "history") for ep in episodes):
        sys.exit(f"to_jsonl: {path!r} holds no played episodes; it must pickle {{'episodes': [Episode, ...]}} as "
                 "run.py --mode=eval's rollouts.pkl does.")
    return episodes


def prompt_settings(args: argparse.Namespace) -> dict[str, Any]:
    """max_tokens / enable_think / format_penalty for the chat messages: the flags, else the config.json beside the
    input, else an exit naming both."""
    config_path = os.path.join(os.path.dirname(os.path.abspath(args.input)), "config.json")
    rollout = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            rollout = json.load(f).get("rollout", {})
    max_tokens = args.response_length if args.response_length is not None else rollout.get("response_length")
    if max_tokens is None:
        sys.exit(f"to_jsonl: --messages chat rebuilds the prompts and needs the run's rollout.response_length: pass "
                 f"--response-length, or keep the run's config.json beside the input (no {config_path}).")
    think = False if args.no_think else rollout.get("enable_think", True)
    penalty = args.format_penalty if args.format_penalty is not None else rollout.get("format_penalty", -0.1)
    return dict(max_tokens=int(max_tokens), enable_think=bool(think), format_penalty=float(penalty))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="a PKL of played episodes (run.py --mode=eval's rollouts.pkl)")
    parser.add_argument("--output", help="the JSONL to write (default: the input with .jsonl)")
    parser.add_argument("--messages", choices=("ragen", "chat"), default="ragen")
    parser.add_argument("--response-length", type=int, help="chat: the run's rollout.response_length")
    parser.add_argument("--no-think", action="store_true", help="chat: the run had rollout.enable_think False")
    parser.add_argument("--format-penalty", type=float, help="chat: the run's rollout.format_penalty")
    args = parser.parse_args(argv)
    episodes = load_episodes(args.input)
    output = args.output or os.path.splitext(args.input)[0] + ".jsonl"
    if args.messages == "chat":
        write_jsonl(output, episodes, **prompt_settings(args))
    else:
        write_ragen_jsonl(output, episodes)
    print(f"Wrote {len(episodes)} trajectories to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
