"""A thin wrapper around a transformers tokenizer: ids without implicit specials, chat template, eos set."""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Sequence

from ragen_jax.errors import MissingFileError
from ragen_jax.models.hf_files import CheckpointError

_EOS_CANDIDATES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")
# Files that hold a vocabulary (fast tokenizer, BPE vocab, sentencepiece, WordPiece); without one
# of them AutoTokenizer builds an empty tokenizer instead of failing.
VOCAB_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")


class Tokenizer:
    """What ragen_jax needs from a tokenizer; `hf` exposes the underlying transformers tokenizer.

    generation_eos_ids: the checkpoint's own end-of-generation ids (generation_config.json), which can name more
    than the tokenizer's eos (Llama 3.1's `<|eom_id|>`). generation_defaults: the rest of that file (sampling
    defaults such as temperature and top_p), which an export writes back for transformers and vLLM."""

    def __init__(self, hf: Any, generation_eos_ids: Sequence[int] = (),
                 generation_defaults: Mapping[str, Any] | None = None):
        self.hf = hf
        self.generation_eos_ids = tuple(int(i) for i in generation_eos_ids)
        self.generation_defaults = dict(generation_defaults or {})

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "Tokenizer":
        """Loads with transformers' AutoTokenizer from a local folder (never the network)."""
        from transformers import AutoTokenizer

        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise MissingFileError(f"Tokenizer folder {folder!r} does not exist; pass a local checkpoint folder.")
        if not any(os.path.isfile(os.path.join(folder, name)) for name in VOCAB_FILES):
            present = ", ".join(sorted(os.listdir(folder))) or "nothing"
            raise MissingFileError(
                f"No tokenizer files in {folder!r} (it holds {present}): a model folder needs tokenizer.json "
                "(or vocab.json + merges.txt, or tokenizer.model) and tokenizer_config.json. Copy them from "
                "the model the weights came from."
            )
        try:
            hf = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as e:  # transformers raises many kinds here; name the folder
            raise CheckpointError(
                f"Could not load a tokenizer from {folder!r} ({type(e).__name__}: {e}). The folder needs "
                "tokenizer.json (or vocab/merges files) and tokenizer_config.json."
            ) from e
        if not hf.encode("a", add_special_tokens=False):
            raise CheckpointError(f"The tokenizer in {folder!r} encodes 'a' to no ids (an empty vocabulary); its "
                             "tokenizer files are incomplete. Copy them from the model the weights came from.")
        tokenizer = cls(hf, generation_eos_ids(folder), generation_config(folder))
        if not tokenizer.eos_token_ids:  # generation would never end a turn, and padding had no id
            raise CheckpointError(
                f"The tokenizer in {folder!r} names no end-of-turn token: no eos_token in tokenizer_config.json, no "
                f"known end-of-message token ({', '.join(_EOS_CANDIDATES)}) and no eos_token_id in "
                "generation_config.json. Set eos_token in tokenizer_config.json to the token the chat template ends "
                "an assistant message with.")
        return tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of text, with no BOS/EOS or other special tokens added."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True,
                            tools: Sequence[Mapping] | None = None) -> str:
        """The prompt text given by the tokenizer's own chat template (`tools`: JSON schemas, through the
        template's own `tools=` argument)."""
        if not getattr(self.hf, "chat_template", None):
            raise ValueError("This tokenizer has no chat_template; add one to tokenizer_config.json or "
                             "chat_template.jinja.")
        return self.hf.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt,
            tools=[dict(t) for t in tools] if tools else None,
        )

    def token_id(self, token: str) -> int:
        """Id of a single (special) token; raises if the string is not exactly one token."""
        tid = self.hf.convert_tokens_to_ids(token)
        if tid is None or tid == self.hf.unk_token_id and token != self.hf.unk_token:
            raise KeyError(f"{token!r} is not a single token in this vocabulary.")
        return int(tid)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Ids that end a turn: the tokenizer's eos, the chat end-of-message tokens it knows, then any other
        end-of-generation id of the checkpoint's generation_config.json."""
        ids: list[int] = []
        if self.hf.eos_token_id is not None:
            ids.append(int(self.hf.eos_token_id))
        vocab = self.hf.get_vocab()
        for tok in _EOS_CANDIDATES:
            if tok in vocab and vocab[tok] not in ids:
                ids.append(int(vocab[tok]))
        ids += [i for i in dict.fromkeys(self.generation_eos_ids) if i not in ids]
        return tuple(ids)

    @property
    def pad_token_id(self) -> int:
        """The pad id; falls back to the first eos id when the tokenizer defines no pad token."""
        if self.hf.pad_token_id is not None:
            return int(self.hf.pad_token_id)
        return self.eos_token_ids[0]

    @property
    def vocab_size(self) -> int:
        """Number of ids (base vocabulary plus added tokens)."""
        return len(self.hf)

    def save(self, folder: str | os.PathLike) -> None:
        """Writes the tokenizer files (tokenizer.json, tokenizer_config.json, chat template) into folder."""
        os.makedirs(folder, exist_ok=True)
        self.hf.save_pretrained(os.fspath(folder))

    def __len__(self) -> int:
        return self.vocab_size


def generation_config(folder: str | os.PathLike) -> dict[str, Any]:
    """folder/generation_config.json as a dict ({} when absent), refused when it is not a JSON object."""
    path = os.path.join(os.fspath(folder), "generation_config.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        try:
            data = json.load(f)
        except ValueError as e:
            data = e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object ({data}); download it again or fix it.")
    return data


def generation_eos_ids(folder: str | os.PathLike) -> tuple[int, ...]:
    """`eos_token_id` (one id or a list) of folder/generation_config.json; () when the file or key is absent."""
    path = os.path.join(os.fspath(folder), "generation_config.json")
    eos = generation_config(folder).get("eos_token_id")
    if eos is None:
        return ()
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise CheckpointError(f"{path} has eos_token_id={eos!r}; it must be an id or a list of ids.")
    return tuple(ids)
