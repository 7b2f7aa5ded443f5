"""How a pull looks on stderr: rich bars per file on a terminal, a few plain lines anywhere else.

Both reporters are callables that take `llmcli.hub.events` progress records; a table maps each record type to
its handler, so a new record is one line here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from llmcli.hub.events import (
    Converting,
    FileDone,
    FileProgress,
    FileStarted,
    FileVerifying,
    Note,
    Progress,
    PullEvent,
)
from llmcli.units import format_bytes

if TYPE_CHECKING:
    import rich.progress


class PlainReport:
    """For logs and pipes: one line when a file starts, at each quarter, and when it is done."""

    STEPS = 4

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._shown: dict[str, int] = {}
        self._handlers: dict[type, Callable[[Any], str | None]] = {
            Note: lambda e: e.text,
            FileStarted: self._started,
            FileProgress: self._progress,
            FileVerifying: lambda e: f"verifying {e.filename}",
            FileDone: lambda e: (
                f"{e.filename}: {'already in the cache' if e.cached else 'done'} ({format_bytes(e.size)})"
            ),
            Converting: self._converting,
        }

    def __enter__(self) -> PlainReport:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, event: PullEvent) -> None:
        line = self._handlers[type(event)](event)
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _started(self, e: FileStarted) -> str:
        self._shown[e.filename] = e.resumed_from * self.STEPS // max(e.total, 1)
        if e.resumed_from:
            return f"resuming {e.filename} at {format_bytes(e.resumed_from)} of {format_bytes(e.total)}"
        return f"fetching {e.filename} ({format_bytes(e.total)})"

    def _converting(self, e: Converting) -> str | None:
        if (
            e.total is None or e.total <= 1
        ):  # a stage: "converting X to GGUF q4_k_m", "quantizing with llama.cpp"
            return None if e.done else e.detail
        # Per tensor, the converter reports bytes of the checkpoint read so far: show quarters only.
        step = e.done * self.STEPS // max(e.total, 1) if e.done is not None else 0
        if step <= self._shown.get("\0convert", 0) or step >= self.STEPS:
            return None
        self._shown["\0convert"] = step
        return f"  converting: {100 * step // self.STEPS}%"

    def _progress(self, e: FileProgress) -> str | None:
        step = e.done * self.STEPS // max(e.total, 1)
        if step <= self._shown.get(e.filename, 0) or step >= self.STEPS:
            return None
        self._shown[e.filename] = step
        return f"  {e.filename}: {100 * step // self.STEPS}% ({format_bytes(e.done)})"


def transfer_progress(
    stream: TextIO, *, label_width: int | None = None, transient: bool = False
) -> rich.progress.Progress:
    """The one look of llmcli's byte-counting bars (downloads, conversion): label, bar, bytes, speed, ETA."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    label = "{task.description:<%d}" % label_width if label_width else "{task.description}"
    return Progress(
        TextColumn(label),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(file=stream, stderr=True),
        transient=transient,
    )


class RichReport:
    """For a terminal: one bar per file with bytes, speed and time left."""

    def __init__(self, stream: TextIO) -> None:
        self.progress = transfer_progress(stream)
        self._tasks: dict[str, Any] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            Note: lambda e: self.progress.console.print(e.text, style="dim", highlight=False),
            FileStarted: self._started,
            FileProgress: lambda e: self.progress.update(self._tasks[e.filename], completed=e.done),
            FileVerifying: lambda e: self.progress.update(
                self._tasks[e.filename], description=f"verifying {e.filename}"
            ),
            FileDone: self._done,
            Converting: self._converting,
        }

    def __enter__(self) -> RichReport:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, event: PullEvent) -> None:
        self._handlers[type(event)](event)

    def _started(self, e: FileStarted) -> None:
        if e.resumed_from:
            self.progress.console.print(
                f"resuming {e.filename} at {format_bytes(e.resumed_from)}", style="dim"
            )
        self._tasks[e.filename] = self.progress.add_task(e.filename, total=e.total, completed=e.resumed_from)

    def _converting(self, e: Converting) -> None:
        if e.total is None or e.total <= 1:  # a stage, reported at its start (done 0) and end (done 1)
            if not e.done:
                self.progress.console.print(e.detail, highlight=False)
            return
        task = self._tasks.get("\0convert")
        if task is None:
            task = self._tasks["\0convert"] = self.progress.add_task("converting", total=e.total)
        # The label is the tensor being written; the bar counts checkpoint bytes read.
        self.progress.update(task, completed=e.done, total=e.total, description=f"converting {e.detail[:24]}")

    def _done(self, e: FileDone) -> None:
        task = self._tasks.get(e.filename)
        if task is None:  # nothing was fetched: say so in one line, no bar
            self.progress.console.print(
                f"{e.filename}: already in the cache ({format_bytes(e.size)})", style="dim"
            )
            return
        self.progress.update(task, completed=e.size, description=e.filename)


def download_report(stream: TextIO, isatty: bool) -> PlainReport | RichReport:
    return RichReport(stream) if isatty else PlainReport(stream)


class _ToReport(logging.Handler):
    def __init__(self, report: Callable[[Note], None]) -> None:
        super().__init__(logging.WARNING)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        # "Error while downloading from URL: peer closed ...\nTrying to resume download...": line 1 says it.
        self.report(Note(f"huggingface_hub: {record.getMessage().splitlines()[0]}; retrying"))


@contextmanager
def hub_warnings_to(report: Callable[[Note], None]) -> Iterator[None]:
    """huggingface_hub logs its in-run retries to stderr on its own handler, which would tear through the
    bars; for the length of a pull they go through the report instead, as one line each."""
    # huggingface_hub adds its stderr handler when its logging module is first imported: import it
    # before the swap, or a first pull in a fresh process would add that handler back inside it.
    import huggingface_hub.utils.logging  # noqa: F401

    logger = logging.getLogger("huggingface_hub")
    saved = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [_ToReport(report)], False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved


@contextmanager
def pull_report(stream: TextIO, isatty: bool) -> Iterator[Progress]:
    """The reporter a pull draws on `stream` for its whole length, huggingface_hub's retry lines included."""
    with download_report(stream, isatty) as report, hub_warnings_to(report):
        yield report
