"""Conversion progress on stderr: the tensor being written and MB/s, drawn by rich.

Shown only when stderr is a terminal; otherwise silent, so logs and pipes stay clean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class ConvertProgress:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ConvertProgress:
        if not self.stream.isatty():
            return self
        from llmcli.ui.download import transfer_progress

        self._progress = transfer_progress(self.stream, label_width=28, transient=True)
        self._progress.__enter__()
        self._task = self._progress.add_task("reading", total=None)
        return self

    def update(self, label: str, done: int, total: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=label[:28], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
