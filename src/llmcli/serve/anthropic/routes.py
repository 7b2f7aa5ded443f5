"""Anthropic's routes: POST /v1/messages (SSE or JSON) and /v1/messages/count_tokens, also with
`?beta=true` (the query is not part of the route). The key comes as `x-api-key` or a Bearer token,
as on every route (serve/access.py); errors take Anthropic's shape (app.py asks wire.error)."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmcli.serve.anthropic import wire
from llmcli.serve.anthropic.protocol import CountTokensRequest, MessagesRequest
from llmcli.serve.call import Call
from llmcli.serve.named_events import named_events
from llmcli.serve.outcome import timings
from llmcli.serve.state import Server

router = APIRouter()
PATHS = ("/v1/messages",)  # whose errors are Anthropic's (and /v1/messages/count_tokens under it)


def _prompt_tokens(call: Call) -> int:
    assert call.prompt is not None  # the call has started
    return len(call.prompt.tokens)


def _timings(call: Call) -> dict:
    assert call.outcome is not None
    return timings(call.outcome, call.postprocess_s * 1000, call.return_s * 1000)


def stream(call: Call, events: wire.Events) -> StreamingResponse:
    """Anthropic's stream: named server-sent events."""
    end = lambda ending, outcome: events.end(ending, outcome, _timings(call))  # noqa: E731
    return named_events(call, events, events.start(_prompt_tokens(call)), end)


@router.post("/v1/messages")
async def messages(request: Request):
    server: Server = request.app.state.server
    body = await server.read(request, MessagesRequest)
    call = await server.start(request, body)
    events = wire.Events(wire.message_id(), body.model or call.served.name)
    if call.gen.stream:
        return stream(call, events)
    reply = await call.whole(request.is_disconnected)
    t0 = time.perf_counter()
    answer = wire.message(events.id, events.model, reply.text, reply.reasoning, reply.ending)
    call.return_s += time.perf_counter() - t0
    return JSONResponse(answer, headers={wire.TIMINGS_HEADER: json.dumps(_timings(call))})


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    """The prompt's tokens as the served model's template renders them: nothing is generated."""
    server: Server = request.app.state.server
    body = await server.read(request, CountTokensRequest)
    return {"input_tokens": await server.prompt_tokens(request, body)}


BODIES = {"/v1/messages": MessagesRequest, "/v1/messages/count_tokens": CountTokensRequest}
