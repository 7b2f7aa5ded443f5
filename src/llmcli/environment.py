"""The process's streams, held in one place so tests can swap them (as httpie's Environment does)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TextIO


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass
class Environment:
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def stdin_isatty(self) -> bool:
        return self.stdin is None or _isatty(self.stdin)

    @property
    def stdout_isatty(self) -> bool:
        return _isatty(self.stdout)

    @property
    def stderr_isatty(self) -> bool:
        return _isatty(self.stderr)

    @property
    def debug(self) -> bool:
        return os.environ.get("LLMCLI_DEBUG", "") not in ("", "0")


env = Environment()
