"""The seven stages of a chat request, as data, and the record each request keeps of each one.

A request runs ① template + tokenize → ② schedule → ③ prefill → ④ decode → ⑤ post-process
→ ⑥ return → ⑦ release. With llama.cpp in this process every stage runs here and is timed; in
front of a server, the server runs five of them and reports at most two (llama.cpp's `timings`):
a record then says `where="remote"` and keeps `ms=None` rather than invent a number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Where = Literal["local", "remote"]


@dataclass(frozen=True)
class Stage:
    key: str  # what the code calls it: StageRecord.name, Stats.stage_ms(key)
    number: str
    label: str
    covers: str  # what the stage does when llama.cpp runs in this process
    covers_remote: str  # what it does when a server answers
    on_server: bool  # whether a server runs it (the rest happens here either way)

    @property
    def title(self) -> str:
        return f"{self.number} {self.label}"


STAGES: tuple[Stage, ...] = (
    Stage(
        "tokenize",
        "①",
        "tokenize",
        "render the chat template, text -> token ids",
        "the server renders its template and tokenizes",
        True,
    ),
    Stage(
        "schedule",
        "②",
        "schedule",
        "context budget, KV-cache prefix plan",
        "the server batches the request and plans its KV cache",
        True,
    ),
    Stage(
        "prefill",
        "③",
        "prefill",
        "compute the new prompt tokens (decides TTFT)",
        "the server computes the prompt",
        True,
    ),
    Stage(
        "decode",
        "④",
        "decode",
        "forward -> sample -> stop check, per token",
        "the server generates, token by token",
        True,
    ),
    Stage(
        "postprocess",
        "⑤",
        "post-process",
        "detokenize, UTF-8, stop strings, filter",
        "detokenize on the server; stop strings and filter here",
        False,
    ),
    Stage("return", "⑥", "return", "stream to the terminal / pipe", "SSE stream -> terminal / pipe", False),
    Stage(
        "release",
        "⑦",
        "release",
        "keep the KV cache for the next turn, or free it",
        "the server keeps or frees its KV cache",
        True,
    ),
)
BY_KEY: dict[str, Stage] = {stage.key: stage for stage in STAGES}


@dataclass
class StageRecord:
    """What one stage of one request cost and did; ms is None when it ran where we cannot see."""

    name: str  # a Stage.key
    ms: float | None
    where: Where
    detail: str

    @property
    def stage(self) -> Stage:
        return BY_KEY[self.name]

    def as_dict(self) -> dict:
        data = asdict(self)
        data["ms"] = None if self.ms is None else round(self.ms, 3)
        return data


UNKNOWN = "—"  # a number nobody measured or reported


def num(x: float | None, digits: int = 1) -> str:
    """A number as the stats show it: thousands separated, fixed decimals; a dash when unknown."""
    return UNKNOWN if x is None else f"{x:,.{digits}f}"
