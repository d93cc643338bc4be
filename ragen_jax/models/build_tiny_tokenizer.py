"""Builds the tiny preset's byte-level BPE tokenizer deterministically into models/assets/tiny_tokenizer/.

Run `python -m ragen_jax.models.build_tiny_tokenizer [--out DIR]`. The corpus is generated here
(RAGEN-style prompts, grids, answers); grid symbols and digits are isolated by the pre-tokenizer so
a grid cell or a digit is always exactly one token.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from typing import Iterator

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ASSET_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "tiny_tokenizer")
VOCAB_SIZE = 1536
GRID_SYMBOLS = "#_O√XPSG"
CHAT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
ACTIONS = ("Up", "Down", "Left", "Right")
ARMS = ("Teacher", "Trader", "Explorer", "Gambler", "Farmer", "Banker", "Phoenix", "Dragon", "Saver", "Miner")
WORDS = (
    "the box is next to the target so I should push it the player must move around the wall to reach "
    "I need to go first then after that this will put on goal avoid hole ice frozen lake is safe path "
    "row col left of right of above below number numbers target equation use each exactly once result "
    "if we move up the box goes into the corner which makes the puzzle unsolvable so instead we step "
    "down and around because pushing from the other side keeps it free and brings it closer to where "
    "it has to be; since there are only a few actions left the shortest route matters most and every "
    "wasted move costs a small penalty while finishing gives a large reward at the end of the episode "
    "a farmer sells apples and oranges at the market each day how many does she have after a week when "
    "half of them are given away compute the total cost of three books if one costs twelve dollars the "
    "answer is the sum of all values divided by their count what is the probability that a fair coin "
    "lands heads twice in a row multiply subtract add divide square root fraction percent average speed "
    "distance time rate price discount profit area perimeter triangle circle radius angle degrees even "
    "odd prime factor multiple remainder integer positive negative greater less than equal to twice "
    "which arm gives higher reward on average the teacher earns a steady salary while the trader takes "
    "risky bets that sometimes pay off big and often lose so a careful player prefers the safe choice "
    "valid invalid action format reward penalty success failure state observation environment agent "
    "policy reasoning thinking answer question problem solution step plan check verify again carefully"
).split()


def _grid(rng: random.Random, size: int, symbols: str) -> str:
    cells = [[rng.choice(symbols) for _ in range(size)] for _ in range(size)]
    return "\n".join("".join(row) for row in cells)


def _coords(rng: random.Random, n: int, size: int) -> str:
    return ", ".join(f"({rng.randrange(size)}, {rng.randrange(size)})" for _ in range(n))


def _sokoban_state(rng: random.Random) -> str:
    size = rng.choice((6, 6, 8))
    grid = _grid(rng, size, "##__OXP√S")
    return (
        f"Coordinates: \nBoard size: {size} rows x {size} cols (zero-indexed).\nTargets: {_coords(rng, 1, size)}\n"
        f"Boxes: {_coords(rng, rng.choice((1, 2)), size)}\nPlayer: {_coords(rng, 1, size)}\nGrid Map: \n{grid}"
    )


def _frozenlake_state(rng: random.Random) -> str:
    return (
        f"Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: {_coords(rng, 1, 4)}\n"
        f"Goal: {_coords(rng, 1, 4)}\nPlayer: {_coords(rng, 1, 4)}\nHoles: {_coords(rng, rng.randint(1, 3), 4)}\n"
        f"Grid Map: \n{_grid(rng, 4, 'P____OGX√')}"
    )


def _bandit_state(rng: random.Random) -> str:
    a, b = rng.sample(ARMS, 2)
    return (
        "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
        f"Game Rules: \n1. There are 2 arms, named {a} and {b}\n2. Each arm has its own reward distribution, "
        "related to their names. \n3. Analyze the symbolic meaning of each arm's name to guess how their reward "
        "distribution might behave.\n4. Based on the symbolic meaning of their names, which arm do you think is "
        f"more likely to give higher rewards on average? Choose between {a} and {b}, and output like "
        f"<answer> {a} </answer> or <answer> {b} </answer>.\n"
    )


def _countdown_state(rng: random.Random) -> str:
    nums = [rng.randint(1, 99) for _ in range(rng.randint(3, 4))]
    return f"Target: {rng.randint(1, 200)}, nums: {nums}"


def _system(rng: random.Random, env: str) -> str:
    legends = {
        "sokoban": "You are solving the Sokoban puzzle. Push all boxes onto targets. The symbols: "
        "# Wall | _ Floor | O Target | X Box | P You | √ Box on Target | S You on Target",
        "frozenlake": "You are walking on a frozen lake. Reach the goal without falling into a hole. The symbols: "
        "P Player | _ Frozen | O Hole | G Goal | X Player in hole | √ Player on goal",
        "bandit": "You are playing a bandit game.",
        "countdown": "Using the numbers, create an equation that equals the target. Use each number exactly once.",
    }
    text = "You're a helpful assistant. " + legends[env]
    if env in ("sokoban", "frozenlake"):
        text += f"\nYour available actions are:\n{', '.join(ACTIONS)}"
        text += f'\nYou can make up to {rng.choice((6, 10))} actions, separated by the action separator " || "'
    return text


def _answer(rng: random.Random, env: str) -> str:
    start = rng.randrange(len(WORDS))
    thought = " ".join(WORDS[start:start + rng.randint(3, 30)] or WORDS[:5])
    if env == "bandit":
        body = rng.choice(ARMS)
    elif env == "countdown":
        a, b, c = (rng.randint(1, 99) for _ in range(3))
        body = f"{a} + {b} - {c} = {a + b - c}" if rng.random() < 0.5 else f"({a} * {b}) / {c}"
    else:
        body = " || ".join(rng.choice(ACTIONS) for _ in range(rng.randint(1, 2)))
    return f"<think> {thought} </think> <answer> {body} </answer>"


def _episode(rng: random.Random) -> str:
    env = rng.choice(("sokoban", "sokoban", "frozenlake", "frozenlake", "bandit", "countdown"))
    state = {"sokoban": _sokoban_state, "frozenlake": _frozenlake_state,
             "bandit": _bandit_state, "countdown": _countdown_state}[env]
    parts = [f"<|im_start|>system\n{_system(rng, env)}<|im_end|>\n"]
    turns = 1 if env in ("bandit", "countdown") else rng.randint(1, 3)
    for t in range(1, turns + 1):
        user = f"Turn {t}:\nState:\n{state(rng)}\n"
        if rng.random() < 0.2:
            user += "No valid action provided previously. Environment state remains the same. Please try again.\n"
        user += (
            f"You have {rng.randint(1, 10)} actions left. Always output: <think> [Your thoughts] </think> "
            "<answer> [your answer] </answer> with no extra text. Strictly follow this format. "
            f"Max response length: {rng.choice((100, 200, 400))} words (tokens)."
        )
        parts.append(f"<|im_start|>user\n{user}<|im_end|>\n")
        parts.append(f"<|im_start|>assistant\n{_answer(rng, env)}<|im_end|>\n")
        reward = rng.choice(("-0.1", "0.9", "10.9", "0", "1.0", "0.1", "-1.1"))
        parts.append(f"<|im_start|>user\nReward:\n{reward}\n<|im_end|>\n")
    return "".join(parts) + "<|endoftext|>"


def corpus(num_episodes: int = 3000, seed: int = 0) -> Iterator[str]:
    """Deterministic training text: RAGEN-style multi-turn episodes for the built-in environments."""
    rng = random.Random(seed)
    for _ in range(num_episodes):
        yield _episode(rng)


def build_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Trains the byte-level BPE; specials and <think>/<answer> tags are single added tokens."""
    tok = Tokenizer(models.BPE())
    isolate = "[" + "".join("\\" + c if c in "#_" else c for c in GRID_SYMBOLS) + "0-9]"
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(isolate), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(CHAT_SPECIALS + TAG_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # The tags stay in the text when special tokens are skipped on decode (as Qwen3's <think>).
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return tok


def _added_tokens_decoder(tok: Tokenizer) -> dict[str, dict]:
    out = {}
    for t in CHAT_SPECIALS + TAG_TOKENS:
        out[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "rstrip": False, "normalized": False,
            "single_word": False, "special": t in CHAT_SPECIALS,
        }
    return out


def write_assets(out_dir: str = ASSET_DIR) -> None:
    """Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json (stable byte content)."""
    tok = build_tokenizer()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=True) + "\n")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": _added_tokens_decoder(tok),
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 32768,
        "split_special_tokens": False,
    }
    specials = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]}
    for name, payload in (("tokenizer_config.json", config), ("special_tokens_map.json", specials)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=ASSET_DIR, help="output folder (default: the committed assets)")
    write_assets(parser.parse_args().out)


if __name__ == "__main__":
    main()
