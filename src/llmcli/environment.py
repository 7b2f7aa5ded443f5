"""The process as llmcli sees it: streams, terminal flags and every environment variable it reads.

As httpie's Environment: `cli.main(argv, env)` passes one down through Typer's context (`ctx.obj`)
to the commands, which hand its values to the use-cases; tests pass their own (StringIO streams, a
dict of variables). The variables are parsed once, from a snapshot, into typed fields; the library
never reads os.environ and takes these values as parameters. (huggingface_hub reads its own HF_*
variables on import.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


# An on/off variable's accepted values (case-blind); unset is off.
FLAG_VALUES = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
    "": False,
}


def parse_flag(text: str | None, name: str) -> bool:
    """An on/off variable: 1/true/yes/on, 0/false/no/off/empty (unset: off); else a UsageError naming it."""
    from llmcli.errors import UsageError

    value = FLAG_VALUES.get((text or "").strip().lower())
    if value is None:
        raise UsageError(
            f"{name}={text!r} is not on or off; give 1, true, yes or on (0, false, no, off or empty for off)"
        )
    return value


def _debug_flag(text: str | None) -> bool:
    """LLMCLI_DEBUG, as parse_flag reads it; a value it does not know is on. It is read while another
    error is being reported, where a second error cannot be shown, and asking for more detail is its point."""
    return FLAG_VALUES.get((text or "").strip().lower(), True)


def _home(vars: Mapping[str, str]) -> Path:
    """$HOME, else the user's home from the password database (as Python's expanduser does)."""
    if home := vars.get("HOME"):
        return Path(home)
    try:
        import pwd

        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):  # no password database (Windows), or no entry for this user
        return Path.home()


def _store_root(vars: Mapping[str, str], home: Path) -> Path:
    """LLMCLI_HOME, else $XDG_DATA_HOME/llmcli, else ~/.local/share/llmcli."""
    if (root := vars.get("LLMCLI_HOME")) and root.startswith("~"):
        from llmcli.fsutil import expand_home  # only then: `llmcli --help` loads no more than it uses

        return expand_home(root, home)
    if root:
        return Path(root)
    xdg = vars.get("XDG_DATA_HOME") or str(home / ".local" / "share")
    return Path(xdg) / "llmcli"


CACHE_MAX_DEFAULT = 2 * 10**9
SIZE_SUFFIXES = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}  # decimal, as every size llmcli shows


def parse_size(text: str, name: str) -> int:
    """'2G', '500M', '1.5g', '750kB', '0' -> bytes (decimal units); UsageError naming the variable."""
    from llmcli.errors import UsageError

    raw = text.strip().upper().removesuffix("B")
    number, suffix = (raw[:-1], raw[-1]) if raw and raw[-1] in SIZE_SUFFIXES else (raw, "")
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not number or value != value or value < 0 or value == float("inf"):
        raise UsageError(
            f"{name}={text!r} is not a size; give bytes with an optional K, M or G suffix, "
            "e.g. 2G (0 turns the cache off)"
        )
    return int(value * SIZE_SUFFIXES[suffix])


@dataclass
class Environment:
    vars: Mapping[str, str] = field(default_factory=lambda: os.environ.copy(), repr=False)
    stdin: TextIO | None = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    # Parsed once from `vars` (name: variable).
    home: Path = field(init=False)  # HOME: what `~` means in a path the user gives
    store_root: Path = field(init=False)  # LLMCLI_HOME / XDG_DATA_HOME / HOME
    default_model: str | None = field(init=False)  # LLMCLI_MODEL: the model when none is given
    debug: bool = field(init=False)  # LLMCLI_DEBUG: the traceback and llama.cpp's log on failure
    endpoint: str | None = field(init=False)  # LLMCLI_ENDPOINT: a server instead of the local engine
    api_key: str | None = field(init=False, repr=False)  # LLMCLI_API_KEY
    no_color: bool = field(init=False)  # NO_COLOR (https://no-color.org): any non-empty value
    no_log_text: str | None = field(init=False)  # LLMCLI_NO_LOG, as given (see no_log)
    cache_max_text: str | None = field(init=False)  # LLMCLI_CACHE_MAX, as given (see cache_max)

    def __post_init__(self) -> None:
        self.vars = dict(self.vars)  # a snapshot: a later os.environ change does not leak in
        self.home = _home(self.vars)
        self.store_root = _store_root(self.vars, self.home)
        self.default_model = self.vars.get("LLMCLI_MODEL") or None
        self.debug = _debug_flag(self.vars.get("LLMCLI_DEBUG"))
        self.endpoint = self.vars.get("LLMCLI_ENDPOINT") or None
        self.api_key = self.vars.get("LLMCLI_API_KEY") or None
        self.no_color = bool(self.vars.get("NO_COLOR"))
        self.no_log_text = self.vars.get("LLMCLI_NO_LOG")
        self.cache_max_text = self.vars.get("LLMCLI_CACHE_MAX") or None

    @property
    def cache_max(self) -> int:
        """LLMCLI_CACHE_MAX in bytes (default 2 GB; 0: no disk prefix cache). Parsed where a command
        uses it, so a bad value fails that command with a clear line, not every command."""
        if self.cache_max_text is None:
            return CACHE_MAX_DEFAULT
        return parse_size(self.cache_max_text, "LLMCLI_CACHE_MAX")

    @property
    def no_log(self) -> bool:
        """LLMCLI_NO_LOG: chat logs no exchange (as --no-log). Parsed where chat uses it, as cache_max."""
        return parse_flag(self.no_log_text, "LLMCLI_NO_LOG")

    def expand_user(self, path: str | os.PathLike[str]) -> Path:
        """PATH with a leading `~` made this environment's home (never the process's $HOME)."""
        from llmcli.fsutil import expand_home

        return expand_home(path, self.home)

    @property
    def stdin_isatty(self) -> bool:
        return self.stdin is None or _isatty(self.stdin)

    @property
    def stdout_isatty(self) -> bool:
        return _isatty(self.stdout)

    @property
    def stderr_isatty(self) -> bool:
        return _isatty(self.stderr)
