"""A stream of named server-sent events, Anthropic's Messages' and OpenAI's Responses': the dialect's
`wire.Events` words the start, each piece, the end and a mid-stream failure, and this makes them one
response over the call's stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from starlette.responses import StreamingResponse

from llmcli.serve.reply import Ending, Piece

if TYPE_CHECKING:
    from llmcli.serve.call import Call
    from llmcli.serve.errors import ApiError
    from llmcli.serve.outcome import Outcome


class Events(Protocol):
    """What a dialect's wire.Events words besides its start and end."""

    def piece(self, kind: str, text: str, call: Any = None) -> bytes | None: ...

    def failed(self, error: ApiError) -> bytes: ...


def named_events(
    call: Call, events: Events, start: bytes, end: Callable[[Ending, Outcome], bytes]
) -> StreamingResponse:
    """`start`, each piece as `events` words it, then `end(ending, outcome)` (the request's), or a
    failure's event when the time limit or the engine cuts the stream."""

    def render(item: Piece | Ending) -> bytes | None:
        if isinstance(item, Ending):
            assert call.outcome is not None  # set before the Endings come
            return end(item, call.outcome)
        return events.piece(item.kind, item.text, item.call)

    async def sent():
        yield start
        async for data in call.streamed(render, events.failed):
            yield data

    return StreamingResponse(sent(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
