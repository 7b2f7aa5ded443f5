"""One output object: data to stdout, everything else (hints, warnings, panels) to stderr."""

from __future__ import annotations

import json
import time
from functools import cached_property

from llmcli.environment import Environment

# A streamed reply is flushed at most this often: 20 updates a second still reads as streaming,
# and a fast model's tokens share one write(2) instead of paying one each between two decode steps.
STREAM_FLUSH_S = 0.05


class Output:
    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self._flushed = float("-inf")  # when stream() last flushed stdout

    @cached_property
    def err(self):
        """A rich console on stderr; colour only when stderr is a terminal."""
        from rich.console import Console

        return Console(
            file=self.env.stderr,
            stderr=True,
            highlight=False,
            no_color=self.env.no_color,
            force_terminal=None if self.env.stderr_isatty else False,
        )

    @cached_property
    def out(self):
        """A rich console on stdout for tables; plain (no ANSI) when stdout is not a terminal."""
        from rich.console import Console

        return Console(
            file=self.env.stdout,
            highlight=False,
            no_color=self.env.no_color,
            force_terminal=None if self.env.stdout_isatty else False,
            width=None if self.env.stdout_isatty else 200,
        )

    # -- data (stdout) -----------------------------------------------------------------------
    def write(self, text: str) -> None:
        """Raw reply text, streamed: no markup, no ANSI, flushed so a pipe sees it at once."""
        self.env.stdout.write(text)
        self.env.stdout.flush()

    def stream(self, text: str) -> None:
        """Reply text as it is generated: the first piece at once, then a flush at most every
        STREAM_FLUSH_S (text in between waits for the next piece, or for end_stream)."""
        stdout = self.env.stdout
        stdout.write(text)
        now = time.monotonic()
        if now - self._flushed >= STREAM_FLUSH_S:
            stdout.flush()
            self._flushed = now

    def end_stream(self) -> None:
        """The streamed reply is over (or cut short): whatever it still holds reaches stdout now."""
        self.env.stdout.flush()
        self._flushed = float("-inf")

    def json(self, data: object) -> None:
        self.env.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        self.env.stdout.flush()

    def table(self, columns: list[str], rows: list[list[str]]) -> None:
        """A plain, borderless table on stdout, as `docker ps` or `ollama list` print one."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False)
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # cells are data: '[red]' in a name is not markup
        self.data(table)

    def data(self, renderable) -> None:
        """A rich renderable (a table of data) on stdout, its lines without trailing spaces: rich pads
        the last column to its widest cell, and a pipe's diffs, `cut` and copies should not see it."""
        with self.out.capture() as captured:
            self.out.print(renderable)
        self.env.stdout.write("".join(line.rstrip(" ") + "\n" for line in captured.get().splitlines()))
        self.env.stdout.flush()

    # -- everything else (stderr) ------------------------------------------------------------
    def info(self, text: str) -> None:
        self.err.print(text, style="dim", markup=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        self.err.print(f"llmcli: {text}", style="yellow", markup=False, soft_wrap=True)
