"""Work a request can make heavy, kept off the event loop: every stream, /health and every model's
requests share that one thread, and 128 tools with distinct schemas (half a megabyte) held it 6-7 s
per request, a body of 120,000 empty messages for 3 s.

Past a size, a body's parse and validation run in a worker thread, and so does the making of a
generation whose request gives tools (the schema checks and the grammar, serve/tools.py, which
remembers both by the tools' text). A light request stays on the loop: a thread's hand-off costs
more than its work.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llmcli.serve.limits_json import refuse_deep
from llmcli.serve.protocol import read_body, validate

# Bytes of a body parsed on the loop; a larger one is parsed and validated in a worker (a 32 kB
# body takes well under a millisecond).
BIG_BODY = 64 * 1024
MANY_MESSAGES = 256  # a generation of more messages is made in a worker (120,000 took 0.25 s)


def _validated(model: type[Any], data: bytes) -> Any:
    body = read_body(data)
    refuse_deep(body, data)  # before anything that recurses reads it
    return validate(model, body)


async def validated(model: type[Any], data: bytes) -> Any:
    """The body validated into `model` (ApiError as validate raises it), off the loop when big."""
    if len(data) <= BIG_BODY:
        return _validated(model, data)
    return await asyncio.to_thread(_validated, model, data)


async def generation(body: Any, defaults: Any) -> Any:
    """body.generation(defaults), in a worker when the request gives tools (their checks and grammar)
    or many messages, on the loop otherwise."""
    if not getattr(body, "tools", None) and len(getattr(body, "messages", None) or ()) <= MANY_MESSAGES:
        return body.generation(defaults)
    return await asyncio.to_thread(body.generation, defaults)
