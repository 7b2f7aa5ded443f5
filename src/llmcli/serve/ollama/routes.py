"""Ollama's routes: /api/chat and /api/generate (NDJSON streams, or one object), /api/tags,
/api/show, /api/version. Durations are nanoseconds, as Ollama reports them; `timings` is added."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmcli.engine.templates.thinking import REASONING
from llmcli.engine.tools import CallDelta
from llmcli.errors import LlmcliError
from llmcli.serve import library
from llmcli.serve.call import Call, ClosesCall, Piece
from llmcli.serve.catalog import Served
from llmcli.serve.errors import ApiError
from llmcli.serve.logprobs import ChoiceLogprobs
from llmcli.serve.ollama.protocol import ChatRequest, GenerateRequest, ShowRequest
from llmcli.serve.outcome import Outcome, timings
from llmcli.serve.state import Server
from llmcli.serve.tool_calls import ToolReader

if TYPE_CHECKING:
    from llmcli.gguf_check.facts import ModelFacts

router = APIRouter(prefix="/api")

NS = 1_000_000  # ns a millisecond


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _ns(ms: float | None) -> int:
    return int((ms or 0.0) * NS)


class Shape:
    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model

    def piece(self, text: str, thinking: str, done: bool, calls: list[dict] | None = None) -> dict:
        body: dict = {"model": self.model, "created_at": _now()}
        if self.chat:
            message: dict = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            body["message"] = message
        else:
            body["response"] = text
            if thinking:
                body["thinking"] = thinking
        body["done"] = done
        return body

    def line(self, kind: str, text: str) -> dict:
        """A streamed piece: the answer's text, or the reasoning's."""
        return self.piece("" if kind == REASONING else text, text if kind == REASONING else "", False)

    def call_line(self, tools: ToolReader | None, delta: CallDelta) -> dict | None:
        """A streamed tool call: one line once its arguments are whole, as Ollama streams it."""
        assert tools is not None
        ready = tools.ollama_ready(delta)
        return self.piece("", "", False, [ready]) if ready is not None else None

    def final(
        self, call: Call, outcome: Outcome, text: str = "", thinking: str = "", whole: bool = False
    ) -> dict:
        tools = call.tools[0]  # Ollama asks for one reply
        calls = tools.ollama_calls() if whole and tools is not None else None
        body = self.piece(text, thinking, True, calls)
        if tools is not None and tools.malformed is not None:
            body["malformed_tool_call"] = tools.malformed  # llmcli's word on a dropped call
        total = (time.perf_counter() - call.job.t_arrival) * 1000
        body.update(
            done_reason="length" if outcome.finish_reason == "length" else "stop",
            total_duration=_ns(total),
            load_duration=0,
            prompt_eval_count=outcome.prompt_tokens,
            prompt_eval_duration=_ns(outcome.prefill_ms),
            eval_count=outcome.completion_tokens,
            eval_duration=_ns(outcome.decode_ms),
            timings=timings(outcome, call.postprocess_s * 1000, call.return_s * 1000),
        )
        return body


class ClosingStream(ClosesCall, StreamingResponse):
    """Ollama's stream, one JSON object a line."""


def details(facts: ModelFacts | None) -> dict:
    """Ollama's details of a model, from its GGUF header (empty where the header could not be read)."""
    arch = facts.arch if facts is not None else ""
    n_params = facts.n_params if facts is not None else None
    size = (
        f"{n_params / 1e6:.0f}M"
        if isinstance(n_params, int) and n_params < 1e9
        else (f"{n_params / 1e9:.1f}B" if isinstance(n_params, int) else "")
    )
    return {
        "parent_model": "",
        "format": "gguf",
        "family": arch,
        "families": [arch] if arch else None,
        "parameter_size": size,
        "quantization_level": (facts.quant or "") if facts is not None else "",
    }


def tagged(name: str) -> str:
    """Ollama's clients (Open WebUI) name a model with a tag, `:latest` when it has none."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _served(server: Server, name: str) -> None:
    one = server.catalog.one
    if one is not None and name not in (one.name, tagged(one.name)):
        raise ApiError(404, f"model '{name[:200]}' not found; this server serves '{tagged(one.name)}'")


def _loaded(shape: Shape, unloaded: bool) -> dict:
    """Ollama's answer to a request with nothing to generate: the model is loaded (or kept), or,
    with keep_alive 0, unloaded."""
    answer = shape.piece("", "", True)
    answer["done_reason"] = "unload" if unloaded else "load"
    return answer


async def _generate(request: Request, kind: type[ChatRequest] | type[GenerateRequest]):
    server: Server = request.app.state.server
    server.ready_or_503()
    body = await server.read(request, kind)
    served = server.find(body.model)
    shape = Shape(kind is ChatRequest, tagged(served.name))
    if body.loads_only and body.unloads:
        if not server.pool.one:  # `serve MODEL` keeps its model, and says it let it go, as before
            await server.pool.unload(served.name)
        return JSONResponse(_loaded(shape, True))
    if body.loads_only:
        (await server.lease(served, body.keep_alive, request.state.t_arrival)).release()
        return JSONResponse(_loaded(shape, False))
    call = await server.start_call(request, served, body, body.keep_alive)
    if call.gen.stream:
        return ClosingStream(call, lines(call, shape), media_type="application/x-ndjson")
    reply = await call.whole(request.is_disconnected)
    return JSONResponse(
        with_logprobs(call, shape.final(call, reply.outcome, reply.text, reply.reasoning, whole=True))
    )


def with_logprobs(call: Call, body: dict) -> dict:
    """Ollama's `logprobs` (OpenAI's chat entries) of the tokens since the last line, when asked (left
    out when there are none, as Ollama leaves it out)."""
    entries = call.take_logprobs(0) if call.gen.logprobs is not None else []
    if entries:
        body["logprobs"] = ChoiceLogprobs(chat=True).shape(entries)["content"]
    return body


async def lines(call: Call, shape: Shape):
    def render(piece: Piece) -> str | None:
        if piece.call is not None:
            body = shape.call_line(call.tools[piece.choice], piece.call)
        else:
            body = shape.line(piece.kind, piece.text)
        return json.dumps(with_logprobs(call, body)) + "\n" if body is not None else None

    async for line in call.streamed(render, lambda exc: json.dumps(exc.body(ollama=True)) + "\n"):
        yield line
    if call.outcome is not None:
        yield json.dumps(with_logprobs(call, shape.final(call, call.outcome))) + "\n"


BODIES = {"/api/chat": ChatRequest, "/api/generate": GenerateRequest, "/api/show": ShowRequest}


@router.post("/chat")
async def api_chat(request: Request):
    return await _generate(request, ChatRequest)


@router.post("/generate")
async def api_generate(request: Request):
    return await _generate(request, GenerateRequest)


def _stamp(served: Served) -> str:
    """When the model's file was last written, as Ollama words a time."""
    at = datetime.fromtimestamp(library.modified(served.path), timezone.utc)
    return at.isoformat().replace("+00:00", "Z")


@router.get("/tags")
async def tags(request: Request):
    """Every model the server answers for (the whole store, in store mode), read from the GGUF
    headers: nothing is loaded."""
    server: Server = request.app.state.server
    server.ready_or_503()  # `llmcli serve MODEL` answers once its model is loaded
    listed = []
    for served in server.catalog.all():
        facts = await library.facts_off_loop(served)
        listed.append(
            {
                "name": tagged(served.name),
                "model": tagged(served.name),
                "modified_at": _stamp(served),
                "size": facts.size if facts is not None else 0,
                "details": details(facts),
            }
        )
    return {"models": listed}


@router.post("/show")
async def show(request: Request):
    """Any model's details and template, from its GGUF header, without loading it."""
    server: Server = request.app.state.server
    server.ready_or_503()  # `llmcli serve MODEL` answers once its model is loaded
    body = await server.read(request, ShowRequest)
    _served(server, body.named)  # `llmcli serve MODEL` names its one model
    served = server.find(body.named)
    try:
        facts = await asyncio.to_thread(library.facts, served)
    except (OSError, LlmcliError) as exc:
        raise ApiError(500, f"cannot read model '{served.name}': {exc}") from None
    arch = facts.arch or "general"
    template = facts.chat_template or ""
    return {
        "modelfile": "",
        "parameters": "",
        "template": template,
        "details": details(facts),
        "model_info": {
            "general.architecture": arch,
            "general.basename": facts.name or served.name,
            "general.parameter_count": facts.n_params,
            f"{arch}.context_length": facts.context_length,
        },
        "capabilities": capabilities(template),
        "modified_at": _stamp(served),
    }


def _time(epoch: float | None) -> str:
    """An expiry as Ollama writes it; a model kept for ever expires far in the future, as Ollama's."""
    when = (
        datetime.fromtimestamp(epoch, timezone.utc)
        if epoch is not None
        else datetime(9999, 12, 31, tzinfo=timezone.utc)
    )
    return when.isoformat().replace("+00:00", "Z")


@router.get("/ps")
async def ps(request: Request):
    """The loaded models, as Ollama's /api/ps lists them."""
    server: Server = request.app.state.server
    models = []
    for each in server.pool.loaded():
        stat = Path(each.path).stat()
        # Ollama's digest is its manifest's; here, an identity of the file (its name, size and time),
        # as hashing gigabytes on each call would be too slow.
        digest = hashlib.sha256(f"{each.path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
        models.append(
            {
                "name": tagged(each.name),
                "model": tagged(each.name),
                "size": each.size,
                "digest": digest,
                "details": details(await library.facts_off_loop(Served(each.name, Path(each.path)))),
                "expires_at": _time(each.expires_at),
                "size_vram": each.size_vram,
                "context_length": each.context_length,
            }
        )
    return {"models": models}


def capabilities(template: str) -> list[str]:
    """Ollama's capabilities: any model completes and calls tools (a grammar holds its calls,
    docs/tools.md); one whose template writes or switches <think> thinks. No embeddings here."""
    from llmcli.engine.templates.thinking import OPEN, TOGGLE

    thinks = OPEN in template or TOGGLE in template
    return ["completion", "tools", *(["thinking"] if thinks else [])]


# The Ollama API level this server answers: clients gate features on it (VS Code Copilot's Ollama
# provider refuses below 0.6.4; `codex --oss` takes below 0.13.4 for an Ollama without Responses).
OLLAMA_LEVEL = "0.13.5"
VERSION_HEADER = "X-Llmcli-Version"


def llmcli_version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("llmcli")
    except PackageNotFoundError:
        return "0.0.0"


@router.get("/version")
async def version():
    """The Ollama API level; llmcli's own version is in a header (and GET /version)."""
    return JSONResponse({"version": OLLAMA_LEVEL}, headers={VERSION_HEADER: llmcli_version()})
