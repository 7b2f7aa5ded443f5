"""Type and range checks on a tokenizer's token tables, before any id is used as an index.

tokenizer.json is untrusted: an id of -1 would silently overwrite the last token, an id past the
embedding would crash, and two tokens on one id would drop one of them. Each table is checked
whole and refused in one line naming the file and the token.
"""

from __future__ import annotations

from typing import Any

from llmcli.convert.errors import BadCheckpoint, shown

FIX = "the tokenizer and the weights do not match; download the tokenizer files again"


def _valid_id(tid: Any, n_rows: int) -> bool:
    return isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < n_rows


def checked_vocab(raw: Any, n_rows: int, where: str) -> dict[str, int]:
    """A {token text: id} table whose ids are distinct and index the embedding's `n_rows` rows."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadCheckpoint(f"{where}: the vocabulary is not an object of token -> id; download it again")
    seen: dict[int, str] = {}
    for text, tid in raw.items():
        if not _valid_id(tid, n_rows):
            raise BadCheckpoint(
                f"{where}: token {shown(repr(text))} has id {shown(repr(tid))}, "
                f"not one of the embedding's {n_rows} rows; {FIX}"
            )
        if tid in seen:
            raise BadCheckpoint(
                f"{where}: tokens {shown(repr(seen[tid]))} and {shown(repr(text))} share id {tid}; {FIX}"
            )
        seen[tid] = text
    return raw


def checked_added(raw: Any, n_rows: int, where: str) -> list[dict[str, Any]]:
    """added_tokens entries, each an object with an in-range int id and a string content."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadCheckpoint(f"{where}: added_tokens is not a list; download it again")
    for t in raw:
        if not isinstance(t, dict) or not isinstance(t.get("content"), str):
            raise BadCheckpoint(
                f"{where}: an added token {shown(repr(t))} has no text (content); download it again"
            )
        if not _valid_id(t.get("id"), n_rows):
            raise BadCheckpoint(
                f"{where}: added token {shown(repr(t['content']))} has id {shown(repr(t.get('id')))}, "
                f"not one of the embedding's {n_rows} rows; {FIX}"
            )
    return raw


def checked_tokens(tj: dict, n_rows: int, where: str) -> tuple[dict, list]:
    """tokenizer.json's vocabulary and added tokens, checked, and checked to fit the embedding's rows."""
    vocab_map = checked_vocab(tj["model"].get("vocab"), n_rows, where)
    added = checked_added(tj.get("added_tokens"), n_rows, where)
    n_tok = max([*vocab_map.values(), *(t["id"] for t in added), -1]) + 1
    if n_tok > n_rows:
        raise BadCheckpoint(
            f"the tokenizer has {n_tok} tokens but the embedding "
            f"only {n_rows} rows; tokenizer and weights do not match"
        )
    return vocab_map, added
