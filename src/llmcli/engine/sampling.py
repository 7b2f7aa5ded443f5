"""Sampling parameters: one value per row of the generation-parameter table, whichever backend samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmcli.params import PARAMS, check_all


def _default(name: str) -> Any:
    """The table's default for a field declared with its row's type (check_all checks it on construction)."""
    return PARAMS[name].default


@dataclass
class SamplingParams:
    """One value per row of llmcli.params.PARAMS (same names, same order); the defaults and the
    bounds are the table's. Out-of-range values raise UsageError on construction."""

    temperature: float = _default("temperature")
    top_p: float = _default("top_p")
    top_k: int = _default("top_k")
    min_p: float = _default("min_p")
    repeat_penalty: float = _default("repeat_penalty")
    repeat_last_n: int = _default("repeat_last_n")
    seed: int | None = _default("seed")  # None: a fresh random seed per session
    max_tokens: int = _default("max_tokens")

    def __post_init__(self) -> None:
        for name, value in check_all(self.as_dict()).items():
            setattr(self, name, value)  # as the table reads it: a seed of -1 (llama.cpp's "random") is None

    def as_dict(self) -> dict:
        return asdict(self)
