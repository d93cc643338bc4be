"""Sampling configuration: a hashable dataclass. The compiled sampling programs are keyed by `program_key`, which
leaves the temperature out (the programs take it as an argument), so configs that differ only in temperature, such
as training's and validation's, share their programs."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens and when to stop; lists given for the tuple fields are converted to tuples."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1 (vLLM's and veRL's "off") = off; -1 is stored as 0
    greedy: bool = False
    eos_ids: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # e.g. the token ids of "</answer>"
    # when given, a stop sequence ends a row only after one of these was generated before it (e.g. "</think>": an
    # "</answer>" the reasoning quotes does not end the turn)
    stop_after: tuple[tuple[int, ...], ...] = ()
    # ids never sampled (a vision-language policy's image tokens: images are environment input); a cut of the
    # sampling distribution as top-k's, the raw log-probs stay the model's
    banned_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
        object.__setattr__(self, "stop_sequences", tuple(tuple(int(t) for t in s) for s in self.stop_sequences))
        object.__setattr__(self, "stop_after", tuple(tuple(int(t) for t in s) for s in self.stop_after))
        if self.top_k == -1:  # one program for both spellings of "off"
            object.__setattr__(self, "top_k", 0)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use greedy=True for argmax decoding.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}; 1.0 turns nucleus filtering off.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 or -1 (0 and -1 = off), got {self.top_k}.")
        if any(len(s) == 0 for s in self.stop_sequences + self.stop_after):
            raise ValueError("stop_sequences and stop_after must not contain an empty sequence.")

    @property
    def truncates(self) -> bool:
        """Whether top-k or top-p cut the vocabulary (part of the compiled program, unlike the temperature)."""
        return self.top_k > 0 or self.top_p < 1.0 or bool(self.banned_ids)

    def program_key(self) -> SamplingConfig:
        """What a compiled sampling program depends on: this config at temperature 1 (the temperature is the
        programs' argument)."""
        return dataclasses.replace(self, temperature=1.0)
