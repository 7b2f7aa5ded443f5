"""OpenAI's routes: /v1/chat/completions and /v1/completions (SSE or JSON), /v1/models and
/v1/models/{id}; each also without the /v1 prefix, as llama-server answers them."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from llmcli.engine.templates.thinking import REASONING
from llmcli.serve import library
from llmcli.serve.call import Call, ClosesCall, Piece, Reply
from llmcli.serve.catalog import Served
from llmcli.serve.errors import ApiError
from llmcli.serve.logprobs import ChoiceLogprobs
from llmcli.serve.openai.protocol import ChatCompletionRequest, CompletionRequest
from llmcli.serve.outcome import Outcome, timings, usage
from llmcli.serve.state import Server
from llmcli.serve.tool_calls import openai_call_delta

router = APIRouter()


def fingerprint(server: Server, served: Served) -> str:
    """OpenAI's system_fingerprint: changes when what answers changes (llmcli, the model, the pool)."""
    from llmcli import __version__

    c = server.config
    seen = f"{__version__}|{served.name}|{served.path.stat().st_size}|{c.ctx}|{c.parallel}"
    return "fp_" + hashlib.sha256(seen.encode()).hexdigest()[:10]


class Shape:
    """How one route words its objects: a chat's message and delta, or a completion's text; each
    choice with its index and, when asked, its tokens' log-probabilities."""

    def __init__(self, chat: bool, model: str, fingerprint: str, call: Call) -> None:
        self.chat = chat
        self.model = model
        self.fingerprint = fingerprint
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.call = call
        asked = call.gen.logprobs is not None
        self.logprobs = [ChoiceLogprobs(chat) for _ in range(call.gen.n)] if asked else None
        self._frames: dict[tuple[int, str], tuple[str, str]] = {}  # see chunk

    def _logprobs(self, index: int, entries: list | None = None) -> dict | None:
        """Choice index's log-probabilities: `entries`, else those that arrived since its last chunk."""
        if self.logprobs is None:
            return None
        return self.logprobs[index].shape(self.call.take_logprobs(index) if entries is None else entries)

    def envelope(self, choices: list[dict], chunk: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (
            ".chunk" if chunk and self.chat else ""
        )
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        }

    def chunk(self, piece: Piece) -> str:
        """A streamed piece's chunk as JSON text: json.dumps(envelope([piece(...)])), byte for byte.
        A plain piece (no call, no log-probabilities) is its text spliced into the chunk's words,
        made once per choice and kind: building and encoding the whole envelope for every token
        cost more than the rest of a token's work on the event loop."""
        if piece.call is not None or self.logprobs is not None:
            return json.dumps(self.envelope([self.piece(piece)], True))
        key = (piece.choice, piece.kind)
        frame = self._frames.get(key)
        if frame is None:
            # The text is the last string of the chunk: nothing the client sent follows it.
            mark = "\x00"
            words = json.dumps(self.envelope([self.piece(piece._replace(text=mark))], True))
            head, _, tail = words.rpartition(json.dumps(mark))
            frame = self._frames[key] = (head, tail)
        return frame[0] + json.dumps(piece.text) + frame[1]

    def piece(self, piece: Piece) -> dict:
        i, logprobs = piece.choice, self._logprobs(piece.choice)
        if piece.call is not None:
            delta = {"tool_calls": [openai_call_delta(piece.call)]}
            return {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": None}
        if self.chat:
            key = "reasoning_content" if piece.kind == REASONING else "content"
            return {"index": i, "delta": {key: piece.text}, "logprobs": logprobs, "finish_reason": None}
        return {"index": i, "text": piece.text, "logprobs": logprobs, "finish_reason": None}

    def _reason(self, index: int, outcome: Outcome) -> str:
        tools = self.call.tools[index]
        if tools is not None:
            return tools.finish_reason(outcome.finish_reason)
        return "length" if outcome.finish_reason == "length" else "stop"

    def _malformed(self, index: int, choice: dict) -> dict:
        """llmcli's word on a dropped tool call (docs/tools.md), beside the finish_reason it explains."""
        tools = self.call.tools[index]
        if tools is not None and tools.malformed is not None:
            choice["malformed_tool_call"] = tools.malformed
        return choice

    def last(self, index: int, outcome: Outcome) -> dict:
        """Choice index's finishing chunk, with the log-probabilities of tokens whose text was held
        back (a partial character, a possible stop string)."""
        reason = self._reason(index, outcome)
        held = self.call.take_logprobs(index) if self.logprobs is not None else []
        logprobs = self._logprobs(index, held) if held else None
        if self.chat:
            last = {"index": index, "delta": {}, "logprobs": logprobs, "finish_reason": reason}
            return self._malformed(index, last)
        return {"index": index, "text": "", "logprobs": logprobs, "finish_reason": reason}

    def whole(self, index: int, reply: Reply) -> dict:
        reason = self._reason(index, reply.outcome)
        logprobs = self._logprobs(index, reply.logprobs)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            tools = self.call.tools[index]
            if tools is not None and tools.calls:
                message["tool_calls"] = tools.openai_calls()
                message["content"] = reply.text or None  # OpenAI's: null beside calls
            choice = {"index": index, "message": message, "finish_reason": reason, "logprobs": logprobs}
            return self._malformed(index, choice)
        return {"index": index, "text": reply.text, "finish_reason": reason, "logprobs": logprobs}


async def answer(request, call: Call, shape: Shape):
    """The whole reply as one JSON object."""
    from starlette.responses import JSONResponse

    replies = await call.choices(request.is_disconnected)
    t0 = time.perf_counter()
    body = shape.envelope([shape.whole(i, reply) for i, reply in enumerate(replies)], False)
    assert call.outcome is not None  # the choices' together
    body["usage"] = usage(call.outcome)
    call.return_s += time.perf_counter() - t0
    body["timings"] = timings(call.outcome, call.postprocess_s * 1000, call.return_s * 1000)
    return JSONResponse(body)


class ClosingEvents(ClosesCall, EventSourceResponse):
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


def sse(data: str) -> bytes:
    """One server-sent event of one line, as sse-starlette's ServerSentEvent(data, sep="\n") encodes
    it, which would build an event object and split its data into lines for every chunk. The data
    is json.dumps' (ASCII, no line breaks) or [DONE]."""
    return b"data: " + data.encode() + b"\n\n"


def stream(server: Server, call: Call, shape: Shape):
    """Server-sent events in OpenAI's format, `data: [DONE]` last."""

    async def events():
        for i in range(call.gen.n) if shape.chat else ():
            role = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            yield sse(json.dumps(shape.envelope([{**role, "finish_reason": None}], True)))
        async for data in call.streamed(
            lambda piece: sse(shape.chunk(piece)),
            lambda exc: sse(json.dumps(exc.body(ollama=False))),  # OpenAI's mid-stream error
        ):
            yield data
        outcome = call.outcome
        if outcome is None:
            return
        for i, each in enumerate(call.outcomes):
            assert each is not None  # every choice's came before the request's
            last = shape.envelope([shape.last(i, each)], True)
            if i == call.gen.n - 1:
                last["timings"] = timings(outcome, call.postprocess_s * 1000, call.return_s * 1000)
            yield sse(json.dumps(last))
        if call.gen.include_usage:
            tail = shape.envelope([], True)
            tail["usage"] = usage(outcome)
            yield sse(json.dumps(tail))
        yield sse("[DONE]")

    # sse-starlette's own cut comes after the call's, which ends the stream with an error event
    return ClosingEvents(call, events(), sep="\n", shutdown_grace_period=server.config.grace + 1)


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
    server.ready_or_503()
    body = await server.read(request, kind)
    served = server.find(body.model)
    # keep_alive as Ollama's: a body field, or the X-Keep-Alive header
    sent, where = (
        (body.keep_alive, "keep_alive")
        if body.keep_alive is not None
        else (request.headers.get("x-keep-alive"), "X-Keep-Alive")
    )
    call = await server.start_call(request, served, body, sent, where)
    shape = Shape(kind is ChatCompletionRequest, served.name, fingerprint(server, served), call)
    if call.gen.stream:
        return stream(server, call, shape)
    return await answer(request, call, shape)


BODIES = {"/chat/completions": ChatCompletionRequest, "/completions": CompletionRequest}


@router.post("/chat/completions")
async def chat_completions(request: Request):
    return await _generate(request, ChatCompletionRequest)


@router.post("/completions")
async def completions(request: Request):
    return await _generate(request, CompletionRequest)
