"""The conversation file behind /save and /load: read it as untrusted input, write it atomically.

A /load file is refused with one line unless it is a bounded, flat list of role/content messages
whose text is real Unicode. /save encodes everything before it opens anything, then writes a
temporary file beside the target and renames it over, so a failure never truncates a saved file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmcli.engine.messages import BadMessage, Message, check_message, is_text
from llmcli.errors import UsageError
from llmcli.fsutil import read_text_file

CONVERSATION_FORMAT = "llmcli-conversation"
MAX_FILE_BYTES = 64 * 1024 * 1024  # far past any context; a bigger file is not a conversation
MAX_MESSAGES = 100_000
FIX = "give a file written by /save"


def _message(i: int, m: object, bad: str) -> Message:
    try:
        return check_message(m, i + 1)
    except BadMessage as exc:
        raise UsageError(f"{bad} ({exc}); {FIX}") from None


@dataclass
class LoadedConversation:
    system: str | None
    messages: list[Message]
    conversation_id: str | None = (
        None  # the logged conversation it was saved from (see usecases/conversation.py)
    )


def _conversation_id(data: object, bad: str) -> str | None:
    from llmcli.chatlog.schema import ID_PATTERN

    cid = data.get("conversation_id") if isinstance(data, dict) else None
    if cid is not None and not (isinstance(cid, str) and ID_PATTERN.fullmatch(cid)):
        raise UsageError(f"{bad} (conversation_id is not an id from the log); {FIX}")
    return cid


def _system_and_messages(data: object, bad: str) -> tuple[object, list]:
    """The two shapes a file may have: /save's object, or a bare list of messages (a system one first)."""
    if isinstance(data, list):
        if data and isinstance(data[0], dict) and data[0].get("role") == "system":
            return data[0].get("content"), data[1:]
        return None, data
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise UsageError(f"{bad} (no messages list); {FIX}")
    if data.get("format", CONVERSATION_FORMAT) != CONVERSATION_FORMAT:
        raise UsageError(f"{bad} (its format is not {CONVERSATION_FORMAT}); {FIX}")
    return data.get("system"), data["messages"]


def parse_loaded(text: str, source: str) -> LoadedConversation:
    """Validate a /save file (with the logged conversation's id when it has one); anything else is
    refused with the reason, in one line."""
    bad = f"{source} is not an llmcli conversation"
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError(f"{bad} (not JSON); {FIX}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise UsageError(f"{bad} (JSON nested too deeply); {FIX}") from None
    system, raw = _system_and_messages(data, bad)
    if system is not None and not isinstance(system, str):
        raise UsageError(f"{bad} (system is not text); {FIX}")
    if system is not None and not is_text(system):
        raise UsageError(f"{bad} (the system prompt holds a lone surrogate, which is not text); {FIX}")
    if len(raw) > MAX_MESSAGES:
        raise UsageError(f"{bad} ({len(raw):,} messages, over the {MAX_MESSAGES:,} limit); {FIX}")
    messages = [_message(i, m, bad) for i, m in enumerate(raw)]
    return LoadedConversation(system, messages, _conversation_id(data, bad))


def read_loaded(path: Path) -> LoadedConversation:
    """A regular file of bounded size, strict UTF-8, then parse_loaded."""
    text = read_text_file(path, what="conversation file", fix=FIX, limit=MAX_FILE_BYTES)
    return parse_loaded(text, str(path))


def encode_conversation(
    model: str, system: str | None, params: dict, messages: list[Message], conversation_id: str | None = None
) -> bytes:
    """The bytes /save writes; text that is not valid Unicode is refused before any file is opened."""
    if system is not None and not is_text(system):
        raise UsageError(
            "cannot save: the system prompt holds a lone surrogate, which is not text; "
            "set it again with /system"
        )
    for i, m in enumerate(messages):
        if not is_text(m.content):
            raise UsageError(
                f"cannot save: message {i + 1} holds a lone surrogate, which is not text; "
                "/clear the conversation or load another"
            )
    data = {
        "format": CONVERSATION_FORMAT,
        "version": 1,
        "model": model,
        "system": system,
        "params": params,
        "messages": [m.as_dict() for m in messages],
    }
    if conversation_id is not None:
        data["conversation_id"] = conversation_id
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8", "backslashreplace")


def save_conversation(
    path: Path,
    model: str,
    system: str | None,
    params: dict,
    messages: list[Message],
    conversation_id: str | None = None,
) -> None:
    """/save: encode everything first, then write atomically (through a symlink, as write_text
    would); a path that cannot be written is one UsageError naming it."""
    from llmcli.fsutil import write_atomic

    data = encode_conversation(model, system, params, messages, conversation_id)
    try:
        write_atomic(path, data, follow_symlink=True)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}; choose another path") from None
    except ValueError:  # a NUL or an unencodable character in the path
        raise UsageError(f"cannot write {path!r}: not a usable file name; choose another path") from None
