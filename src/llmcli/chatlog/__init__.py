"""The conversation log and the conversation file, in SQLite and JSON: what chat writes and `logs` reads.

- log.py: the log database (`ChatLog`): open and migrate, write an exchange whole or not at all,
  read, search, continue a conversation; the typed errors a damaged or unwritable file raises;
- records.py: the records it holds (`Exchange`, `Conversation`);
- rows.py: a row read back, checked before it becomes a record (`LogDamaged` when it fails);
- schema.py: ids, tables, the full-text index, the migrations and the write transaction;
- file.py: the conversation file behind /save and /load, read as untrusted input.

Library code: never prints, exits or reads the environment.
"""

from __future__ import annotations

from llmcli.chatlog.log import LOG_FILE, ChatLog, LogUnavailable, LogWriteFailed
from llmcli.chatlog.records import Conversation, Exchange
from llmcli.chatlog.rows import LogDamaged
from llmcli.chatlog.schema import ID_PATTERN, new_id

__all__ = [
    "ID_PATTERN",
    "LOG_FILE",
    "ChatLog",
    "Conversation",
    "Exchange",
    "LogDamaged",
    "LogUnavailable",
    "LogWriteFailed",
    "new_id",
]
