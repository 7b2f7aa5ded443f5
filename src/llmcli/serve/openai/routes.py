"""OpenAI's routes: /v1/chat/completions and /v1/completions (SSE or JSON), /v1/models and
/v1/models/{id}; each also without the /v1 prefix, as llama-server answers them."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from llmcli.engine.templates.thinking import REASONING
from llmcli.serve.call import Call, ClosesCall
from llmcli.serve.errors import ApiError
from llmcli.serve.openai.protocol import ChatCompletionRequest, CompletionRequest
from llmcli.serve.outcome import Outcome, timings, usage
from llmcli.serve.state import Server
from llmcli.serve.tool_calls import CALL, ToolReader, openai_call_delta

router = APIRouter()


def fingerprint(server: Server) -> str:
    """OpenAI's system_fingerprint: changes when what answers changes (llmcli, the model, the pool)."""
    from llmcli import __version__

    c = server.config
    seen = f"{__version__}|{c.model_name}|{Path(c.model_path).stat().st_size}|{c.ctx}|{c.parallel}"
    return "fp_" + hashlib.sha256(seen.encode()).hexdigest()[:10]


class Shape:
    """How one route words its objects: a chat's message and delta, or a completion's text."""

    def __init__(self, chat: bool, model: str, fingerprint: str, tools: ToolReader | None = None) -> None:
        self.chat = chat
        self.tools = tools  # the reply's tool calls, when it is read for them
        self.model = model
        self.fingerprint = fingerprint
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

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

    def piece(self, kind: str, text: Any) -> dict:
        if kind == CALL:
            return {"index": 0, "delta": {"tool_calls": [openai_call_delta(text)]}, "finish_reason": None}
        if self.chat:
            key = "reasoning_content" if kind == REASONING else "content"
            return {"index": 0, "delta": {key: text}, "finish_reason": None}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": None}

    def _reason(self, outcome: Outcome) -> str:
        if self.tools is not None:
            return self.tools.finish_reason(outcome.finish_reason)
        return "length" if outcome.finish_reason == "length" else "stop"

    def _malformed(self, choice: dict) -> dict:
        """llmcli's word on a dropped call (docs/tools.md), beside the finish_reason it explains."""
        if self.tools is not None and self.tools.malformed is not None:
            choice["malformed_tool_call"] = self.tools.malformed
        return choice

    def last(self, outcome: Outcome) -> dict:
        reason = self._reason(outcome)
        if self.chat:
            return self._malformed({"index": 0, "delta": {}, "finish_reason": reason})
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": reason}

    def whole(self, text: str, reasoning: str, outcome: Outcome) -> dict:
        reason = self._reason(outcome)
        if self.chat:
            message: dict = {"role": "assistant", "content": text}
            if reasoning:
                message["reasoning_content"] = reasoning
            if self.tools is not None and self.tools.calls:
                message["tool_calls"] = self.tools.openai_calls()
                message["content"] = text or None  # OpenAI's: null beside calls
            choice = {"index": 0, "message": message, "finish_reason": reason, "logprobs": None}
            return self._malformed(choice)
        return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}


async def answer(request, call: Call, shape: Shape):
    """The whole reply as one JSON object."""
    from starlette.responses import JSONResponse

    reply = await call.whole(request.is_disconnected)
    t0 = time.perf_counter()
    body = shape.envelope([shape.whole(reply.text, reply.reasoning, reply.outcome)], False)
    body["usage"] = usage(reply.outcome)
    call.return_s += time.perf_counter() - t0
    body["timings"] = timings(reply.outcome, call.postprocess_s * 1000, call.return_s * 1000)
    return JSONResponse(body)


class ClosingEvents(ClosesCall, EventSourceResponse):
    """OpenAI's stream, server-sent events."""


def stream(server: Server, call: Call, shape: Shape):
    """Server-sent events in OpenAI's format, `data: [DONE]` last."""

    async def events():
        if shape.chat:
            yield json.dumps(
                shape.envelope(
                    [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}], True
                )
            )
        async for data in call.streamed(
            lambda kind, text: json.dumps(shape.envelope([shape.piece(kind, text)], True)),
            lambda exc: json.dumps(exc.body(ollama=False)),  # OpenAI's mid-stream error
        ):
            yield data
        outcome = call.outcome
        if outcome is None:
            return
        last = shape.envelope([shape.last(outcome)], True)
        last["timings"] = timings(outcome, call.postprocess_s * 1000, call.return_s * 1000)
        yield json.dumps(last)
        if call.gen.include_usage:
            tail = shape.envelope([], True)
            tail["usage"] = usage(outcome)
            yield json.dumps(tail)
        yield "[DONE]"

    # sse-starlette's own cut comes after the call's, which ends the stream with an error event
    return ClosingEvents(call, events(), sep="\n", shutdown_grace_period=server.config.grace + 1)


def _model(server: Server) -> dict:
    c = server.config
    created = int(Path(c.model_path).stat().st_mtime)
    return {"id": c.model_name, "object": "model", "created": created, "owned_by": "llmcli"}


@router.get("/models")
async def models(request: Request):
    server: Server = request.app.state.server
    server.ready_or_503()
    return {"object": "list", "data": [_model(server)]}


@router.get("/models/{model_id:path}")
async def model(request: Request, model_id: str):
    server: Server = request.app.state.server
    server.ready_or_503()
    name = server.config.model_name
    if model_id not in (name, f"{name}:latest"):
        raise ApiError(
            404, f"The model '{model_id[:200]}' does not exist; this server serves '{name}'", "model"
        )
    return _model(server)


async def _generate(request: Request, kind: type[ChatCompletionRequest]):
    server: Server = request.app.state.server
    server.ready_or_503()
    body = await server.read(request, kind)
    call = Call(server, body.generation(server.defaults), request.state.who, request.state.t_arrival)
    await call.start()
    shape = Shape(kind is ChatCompletionRequest, server.config.model_name, fingerprint(server), call.tools)
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
