"""OpenAI's Responses routes: POST /v1/responses (SSE or JSON) and /v1/responses/input_tokens, also
without the /v1 prefix as OpenAI's other routes here. Errors are OpenAI's shape, as on /v1/chat."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmcli.serve.call import Call
from llmcli.serve.named_events import named_events
from llmcli.serve.outcome import timings
from llmcli.serve.responses import wire
from llmcli.serve.responses.protocol import ResponsesRequest
from llmcli.serve.state import Server

router = APIRouter()


def _asked(body: ResponsesRequest) -> dict:
    """What a response repeats of its request, as OpenAI's does."""
    return {
        "instructions": body.instructions,
        "tools": body.tools or [],
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_output_tokens": body.max_output_tokens,
        "reasoning": body.reasoning or {"effort": None, "summary": None},
        "text": body.text or {"format": {"type": "text"}},
    }


def _timings(call: Call) -> dict:
    assert call.outcome is not None
    return timings(call.outcome, call.postprocess_s * 1000, call.return_s * 1000)


def stream(call: Call, events: wire.Events) -> StreamingResponse:
    """The Responses stream: named server-sent events."""
    return named_events(call, events, events.start(), lambda _ending, outcome: events.end(outcome))


@router.post("/responses")
async def responses(request: Request):
    server: Server = request.app.state.server
    body = await server.read(request, ResponsesRequest)
    call = await server.start(request, body)
    shell = wire.Shell(body.model or call.served.name, _asked(body))
    if call.gen.stream:
        return stream(call, wire.Events(shell))
    reply = await call.whole(request.is_disconnected)
    t0 = time.perf_counter()
    answer = shell.response(
        "completed", wire.output(reply.text, reply.reasoning, reply.ending.calls), reply.outcome
    )
    call.return_s += time.perf_counter() - t0
    answer["timings"] = _timings(call)  # llmcli's, as on /v1/chat/completions: clients ignore it
    return JSONResponse(answer)


@router.post("/responses/input_tokens")
async def input_tokens(request: Request):
    """The input's tokens as the served model's template renders them: nothing is generated."""
    server: Server = request.app.state.server
    body = await server.read(request, ResponsesRequest)
    return {"object": "response.input_tokens", "input_tokens": await server.prompt_tokens(request, body)}


BODIES = {"/v1/responses": ResponsesRequest, "/v1/responses/input_tokens": ResponsesRequest}
