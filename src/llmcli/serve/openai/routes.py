"""OpenAI's routes: /v1/chat/completions and /v1/completions (SSE or JSON), /v1/models and
/v1/models/{id}; each also without the /v1 prefix, as llama-server answers them."""

from __future__ import annotations

import hashlib
import json
import time

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from llmcli.serve import library
from llmcli.serve.call import Call
from llmcli.serve.catalog import Served
from llmcli.serve.errors import ApiError
from llmcli.serve.logprobs import ChoiceLogprobs
from llmcli.serve.openai import wire
from llmcli.serve.openai.protocol import ChatCompletionRequest, CompletionRequest
from llmcli.serve.openai.wire import sse
from llmcli.serve.outcome import timings
from llmcli.serve.reply import Ending, Piece
from llmcli.serve.state import Server

router = APIRouter()


def fingerprint(server: Server, served: Served) -> str:
    """OpenAI's system_fingerprint: changes when what answers changes (llmcli, the model, the pool)."""
    from llmcli import __version__

    c = server.config
    seen = f"{__version__}|{served.name}|{served.path.stat().st_size}|{c.ctx}|{c.parallel}"
    return "fp_" + hashlib.sha256(seen.encode()).hexdigest()[:10]


class Logprobs:
    """The reply's log-probabilities, choice by choice, in the route's shape (a completion's
    text_offset carries on from chunk to chunk), when the request asked for them."""

    def __init__(self, call: Call, chat: bool) -> None:
        self.call = call
        asked = call.gen.logprobs is not None
        self.shapers = [ChoiceLogprobs(chat) for _ in range(call.gen.n)] if asked else None

    def take(self, index: int, entries: list | None = None) -> dict | None:
        """Choice index's: `entries`, else those that arrived since its last chunk."""
        if self.shapers is None:
            return None
        return self.shapers[index].shape(self.call.take_logprobs(index) if entries is None else entries)

    def held(self, index: int) -> dict | None:
        """What arrived since the last chunk, for the choice's finishing chunk; None when none."""
        if self.shapers is None:
            return None
        held = self.call.take_logprobs(index)
        return self.take(index, held) if held else None


def _timings(call: Call) -> dict:
    assert call.outcome is not None
    return timings(call.outcome, call.postprocess_s * 1000, call.return_s * 1000)


async def answer(request, call: Call, head: wire.Head):
    """The whole reply as one JSON object."""
    from starlette.responses import JSONResponse

    replies = await call.choices(request.is_disconnected)
    t0 = time.perf_counter()
    logprobs = Logprobs(call, head.chat)
    choices = [wire.whole_choice(head, i, r, logprobs.take(i, r.logprobs)) for i, r in enumerate(replies)]
    call.return_s += time.perf_counter() - t0
    assert call.outcome is not None  # the choices' together
    return JSONResponse(wire.whole(head, choices, call.outcome, _timings(call)))


class Events(EventSourceResponse):
    """OpenAI's stream, server-sent events."""

    async def _send_with_timeout(self, send, message) -> None:
        """sse-starlette's, without its per-send timeout (this response sets none): it opened an anyio
        cancel scope with no deadline around every chunk's send."""
        if self.send_timeout is not None:
            return await super()._send_with_timeout(send, message)
        try:
            await send(message)
        except BaseException:
            self._send_interrupted = True
            raise


def stream(server: Server, call: Call, head: wire.Head):
    """Server-sent events in OpenAI's format, `data: [DONE]` last."""
    logprobs = Logprobs(call, head.chat)
    frames: wire.Frames = {}

    def chunk(item: Piece | Ending) -> bytes:
        if isinstance(item, Ending):  # each choice's last chunk, the last one with the timings
            i = item.outcome.index
            last = wire.envelope(head, [wire.last_choice(head, i, item, logprobs.held(i))], True)
            if i == call.gen.n - 1:
                last["timings"] = _timings(call)
            return sse(json.dumps(last))
        if item.call is None and logprobs.shapers is None:
            return sse(wire.plain_chunk(head, item, frames))
        choice = wire.piece_choice(head, item, logprobs.take(item.choice))
        return sse(json.dumps(wire.envelope(head, [choice], True)))

    async def events():
        for i in range(call.gen.n) if head.chat else ():
            yield sse(json.dumps(wire.role_chunk(head, i)))
        async for data in call.streamed(chunk, lambda exc: sse(json.dumps(wire.failed(exc)))):
            yield data
        if call.outcome is None:
            return
        if call.gen.include_usage:
            yield sse(json.dumps(wire.usage_chunk(head, call.outcome)))
        yield sse("[DONE]")

    # sse-starlette's own cut comes after the call's, which ends the stream with an error event
    return Events(events(), sep="\n", shutdown_grace_period=server.config.grace + 1)


def _model(served: Served) -> dict:
    created = int(library.modified(served.path))
    return {"id": served.name, "object": "model", "created": created, "owned_by": "llmcli"}


@router.get("/models")
async def models_list(request: Request):
    """Every model the server answers for: the whole store, in store mode."""
    server: Server = request.app.state.server
    server.ready_or_503()
    return {"object": "list", "data": [_model(served) for served in server.catalog.all()]}


@router.get("/models/{model_id:path}")
async def model(request: Request, model_id: str):
    server: Server = request.app.state.server
    server.ready_or_503()
    one = server.catalog.one
    if one is not None and model_id not in (one.name, f"{one.name}:latest"):
        raise ApiError(
            404, f"The model '{model_id[:200]}' does not exist; this server serves '{one.name}'", "model"
        )
    return _model(server.find(model_id))


async def _generate(request: Request, kind: type[ChatCompletionRequest]):
    server: Server = request.app.state.server
    body = await server.read(request, kind)
    call = await server.start(request, body)
    head = wire.Head.new(kind is ChatCompletionRequest, call.served.name, fingerprint(server, call.served))
    if call.gen.stream:
        return stream(server, call, head)
    return await answer(request, call, head)


BODIES = {"/chat/completions": ChatCompletionRequest, "/completions": CompletionRequest}


@router.post("/chat/completions")
async def chat_completions(request: Request):
    return await _generate(request, ChatCompletionRequest)


@router.post("/completions")
async def completions(request: Request):
    return await _generate(request, CompletionRequest)
