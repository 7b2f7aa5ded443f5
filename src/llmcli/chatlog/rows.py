"""The conversation log's rows as read back: the checks a row passes before it becomes a record.

The database is input like any file: a row is checked (types, JSON shapes, roles, UTF-8) before it
becomes an Exchange or a message. A row that fails is `LogDamaged`, naming the exchange and what is
wrong with it; the reader skips it and keeps the rest (the policy is log.py's ChatLog).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from llmcli.chatlog.records import ROLES, Exchange
from llmcli.display import printable
from llmcli.engine.messages import Message
from llmcli.errors import RuntimeFailure


class LogDamaged(RuntimeFailure):
    """A row read back is not what llmcli writes (edited by hand or by another program).

    `what`: the row and what is wrong with it, for a note that skips it."""

    def __init__(self, message: str, what: str = "") -> None:
        super().__init__(message)
        self.what = what


class NotText(bytes):
    """A TEXT value whose bytes are not UTF-8 (the connection's text_factory makes these, not an error,
    so one such value costs its own row only)."""


def text_or_bytes(raw: bytes) -> str | NotText:
    """The connection's text_factory: UTF-8 text, or the bytes marked as not text."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return NotText(raw)


# Columns as read back: name -> (accepts, what it must be). A row that fails is LogDamaged.
def _text(v: object) -> bool:
    return isinstance(v, str)


def _opt_text(v: object) -> bool:
    return v is None or isinstance(v, str)


COLUMNS: dict[str, Callable[[object], bool]] = {
    "id": _text,
    "conversation_id": _text,
    "model": _text,
    "system": _opt_text,
    "messages": _text,
    "prompt": _text,
    "reply": _text,
    "reasoning": _opt_text,
    "options": _text,
    "usage": _text,
    "timings": _text,
    "finish_reason": _opt_text,
    "datetime_utc": _text,
}
SELECT = ", ".join(f"e.{name}" for name in COLUMNS)
JSON_COLUMNS = {"messages": list, "options": dict, "usage": dict, "timings": dict}


def damaged_row(path: Path, what: str) -> LogDamaged:
    return LogDamaged(
        f"the conversation log {path} has a damaged row ({what}); continue another conversation, "
        f"or move the log aside: mv {path} {path}.bad",
        what,
    )


def exchange_of(row: tuple, path: Path) -> Exchange:
    """A row -> an Exchange, every column checked: the file may have been edited by anything."""
    values = dict(zip(COLUMNS, row, strict=True))
    rid = values["id"] if isinstance(values["id"], str) else "?"
    for name, accepts in COLUMNS.items():
        if not accepts(values[name]):
            raise damaged_row(path, f"exchange {printable(rid, 40)}: {name} is {_kind(values[name])}")
    for name, kind in JSON_COLUMNS.items():
        try:
            values[name] = json.loads(values[name])
        except (ValueError, RecursionError):
            raise damaged_row(path, f"exchange {printable(rid, 40)}: {name} is not JSON") from None
        if not isinstance(values[name], kind):
            raise damaged_row(
                path,
                f"exchange {printable(rid, 40)}: {name} is not a JSON {'list' if kind is list else 'object'}",
            )
    return Exchange(**values)


def message_of(i: int, m: object, path: Path, where: str) -> Message:
    from llmcli.engine.messages import BadMessage, check_message

    try:
        return check_message(m, i + 1, ROLES)
    except BadMessage as exc:
        raise damaged_row(path, f"{where}: {exc}") from None


def _kind(value: object) -> str:
    return "not UTF-8 text" if isinstance(value, NotText) else f"{type(value).__name__}, not text"
