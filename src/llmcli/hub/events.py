"""The progress records a pull reports through its `progress` callback; `ui/download.py` draws them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass


@dataclass(frozen=True)
class Note:
    """A choice or a fact worth one line: the quant picked, the outtype, 'already up to date'."""

    text: str


@dataclass(frozen=True)
class FileStarted:
    filename: str
    total: int
    resumed_from: int = 0  # bytes already on disk from an earlier, interrupted run
    sha256: str | None = None  # the hub's checksum of an LFS file (what serve's /api/pull calls its digest)


@dataclass(frozen=True)
class FileProgress:
    filename: str
    done: int
    total: int


@dataclass(frozen=True)
class FileVerifying:
    filename: str
    total: int


@dataclass(frozen=True)
class FileDone:
    filename: str
    size: int
    cached: bool  # True when nothing had to be downloaded
    sha256: str | None = None


@dataclass(frozen=True)
class Converting:
    """The converter is running; `detail` is whatever it reported (a stage, a tensor name)."""

    detail: str
    done: int | None = None
    total: int | None = None


PullEvent = Note | FileStarted | FileProgress | FileVerifying | FileDone | Converting
Progress = Callable[[PullEvent], None]
# Opens a reporter only when a pull really starts (chat MODEL pulls only when the store lacks the model).
ProgressScope = Callable[[], AbstractContextManager[Progress]]


def quiet(_event: PullEvent) -> None:
    pass
