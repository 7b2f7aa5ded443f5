"""How deep a JSON value a client or a file handed in nests, checked against one limit (limits.py's
json_depth) before anything recursive reads it: the template's renderer, the schema checks and the
grammar converter each recurse per level, and 450-900 levels crashed them with a RecursionError.

Library code: no printing, no exits, no environment.
"""

from __future__ import annotations

from typing import Any

from llmcli.limits import limit

SHOWN = 100  # characters of a path a message repeats


def may_nest_past(raw: str | bytes) -> bool:
    """False when a JSON text holds too few brackets to nest past the limit (most do): no walk."""
    opens = raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes) else raw.count("[") + raw.count("{")
    return opens > limit("json_depth")


def too_deep(value: Any) -> str | None:
    """The path (`tools[0].function.parameters.properties.a`, cut to SHOWN characters; "" for the
    value itself) of the first place nested past the limit, or None."""
    most = limit("json_depth")
    stack: list[tuple[int, str, Any]] = [(0, "", value)]
    while stack:  # a loop, not recursion: the walk must not fail where the readers would
        depth, path, item = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= most:
                return path[:SHOWN] + ("…" if len(path) > SHOWN else "")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(child, (dict, list)):
                    step = f"[{key}]" if isinstance(key, int) else (f".{key}" if path else str(key))
                    stack.append((depth + 1, (path + step)[: SHOWN + 1], child))
    return None


def depth_message(where: str) -> str:
    """The one line for a value nested past the limit, naming where."""
    most = limit("json_depth")
    return f"{where} nests more than {most} levels deep, the limit for any JSON handed in; flatten it"


def text_too_deep(raw: str) -> bool:
    """Whether a JSON text nests past the limit (a text json cannot read for its depth does too);
    a text that is not JSON is not, here: its reader says what is wrong with it."""
    import json

    if not may_nest_past(raw):
        return False
    try:
        return too_deep(json.loads(raw)) is not None
    except RecursionError:
        return True
    except ValueError:
        return False
