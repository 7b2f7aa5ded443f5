"""The JSON inside a request held to the outer body's rules: one nesting limit for the body and for
each JSON text a field carries (OpenAI's string-encoded tool-call `arguments`), and Unicode text in
both (a lone surrogate escape inside `arguments` reached the tokenizer and crashed it)."""

from __future__ import annotations

import json
import re
from typing import Any

from llmcli.json_depth import depth_message, may_nest_past, text_too_deep, too_deep
from llmcli.serve.errors import bad
from llmcli.serve.protocol import refuse


def refuse_deep(body: dict, data: bytes) -> None:
    """A 400 naming the field (its top-level name as the param) when the body nests past the limit."""
    where = too_deep(body) if may_nest_past(data) else None
    if where is not None:
        field = re.split(r"[.\[]", where, maxsplit=1)[0] or None
        raise bad(field, depth_message(where or "the body"))


def call_arguments(raw: Any, i: int) -> dict | None:
    """A message's tool call's `arguments` (an object, or OpenAI's string of one) as a dict; None
    when it is neither. A string nested past the limit, or decoding to a lone surrogate, is refused
    with the field's place (`[i].function.arguments`), as the outer body's would be (an object's
    depth was the body's)."""
    from llmcli.engine.tools.calls import arguments_of

    where = f"[{i}].function.arguments"
    if not isinstance(raw, str):
        return arguments_of(raw)
    if text_too_deep(raw):
        raise refuse(depth_message(where))
    value = arguments_of(raw)
    if value is not None and not _is_text(value):
        raise refuse(
            f"{where} holds a lone surrogate escape (\\ud800-\\udfff), which is not text; send UTF-8 text"
        )
    return value


def _is_text(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
