"""Sampling configuration: a hashable dataclass, so each distinct config compiles its own decode loop."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens and when to stop; lists given for the tuple fields are converted to tuples."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    greedy: bool = False
    eos_ids: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # e.g. the token ids of "</answer>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
        object.__setattr__(self, "stop_sequences", tuple(tuple(int(t) for t in s) for s in self.stop_sequences))
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use greedy=True for argmax decoding.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}; 1.0 turns nucleus filtering off.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}.")
        if any(len(s) == 0 for s in self.stop_sequences):
            raise ValueError("stop_sequences must not contain an empty sequence.")

    @property
    def filters_logits(self) -> bool:
        """Whether the sampling distribution differs from the raw model's (temperature, top-k or top-p)."""
        return self.temperature != 1.0 or self.top_k > 0 or self.top_p < 1.0
