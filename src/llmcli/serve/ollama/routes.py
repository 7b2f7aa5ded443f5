"""Ollama's routes: /api/chat and /api/generate (NDJSON streams, or one object), /api/tags,
/api/show, /api/version. Durations are nanoseconds, as Ollama reports them; `timings` is added."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmcli.errors import LlmcliError
from llmcli.serve import library
from llmcli.serve.call import Call
from llmcli.serve.catalog import Served
from llmcli.serve.embedding import file_capabilities
from llmcli.serve.errors import ApiError
from llmcli.serve.logprobs import ChoiceLogprobs
from llmcli.serve.ollama import wire
from llmcli.serve.ollama.protocol import ChatRequest, GenerateRequest, ShowRequest
from llmcli.serve.ollama.wire import tagged
from llmcli.serve.outcome import timings
from llmcli.serve.reply import Ending, Piece
from llmcli.serve.state import Server

if TYPE_CHECKING:
    from llmcli.gguf_check.facts import ModelFacts

router = APIRouter(prefix="/api")


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


def _served(server: Server, name: str) -> None:
    one = server.catalog.one
    if one is not None and name not in (one.name, tagged(one.name)):
        raise ApiError(404, f"model '{name[:200]}' not found; this server serves '{tagged(one.name)}'")


async def _generate(request: Request, kind: type[ChatRequest] | type[GenerateRequest]):
    server: Server = request.app.state.server
    body = await server.read(request, kind)
    if body.loads_only:
        return await _load(request, body, kind is ChatRequest)
    call = await server.start(request, body)
    head = wire.Head(kind is ChatRequest, tagged(call.served.name))
    if call.gen.stream:
        return StreamingResponse(lines(call, head), media_type="application/x-ndjson")
    reply = await call.whole(request.is_disconnected)
    last = wire.final(head, reply.ending, _total_ms(call), _timings(call), reply.text, reply.reasoning, True)
    return JSONResponse(with_logprobs(call, last))


async def _load(request: Request, body: ChatRequest | GenerateRequest, chat: bool) -> JSONResponse:
    """A body with no messages (or prompt) loads its model, or with keep_alive 0 unloads it."""
    server: Server = request.app.state.server
    served = server.find(body.model)
    head = wire.Head(chat, tagged(served.name))
    if body.unloads:
        if not server.pool.one:  # `serve MODEL` keeps its model, and says it let it go, as before
            await server.pool.unload(served.name)
        return JSONResponse(wire.loaded(head, True))
    (await server.lease(served, body.keep_alive, request.state.t_arrival)).release()
    return JSONResponse(wire.loaded(head, False))


def _total_ms(call: Call) -> float:
    return (time.perf_counter() - call.t_arrival) * 1000


def _timings(call: Call) -> dict:
    assert call.outcome is not None
    return timings(call.outcome, call.postprocess_s * 1000, call.return_s * 1000)


def with_logprobs(call: Call, body: dict) -> dict:
    """Ollama's `logprobs` (OpenAI's chat entries) of the tokens since the last line, when asked (left
    out when there are none, as Ollama leaves it out)."""
    entries = call.take_logprobs(0) if call.gen.logprobs is not None else []
    if entries:
        body["logprobs"] = ChoiceLogprobs(chat=True).shape(entries)["content"]
    return body


def lines(call: Call, head: wire.Head) -> AsyncIterator[str | bytes]:
    def render(piece: Piece | Ending) -> str | None:
        if isinstance(piece, Ending):
            body = wire.final(head, piece, _total_ms(call), _timings(call))
        elif piece.call is None:
            body = wire.line(head, piece.kind, piece.text)
        elif piece.call.name is not None:
            return None  # a call's id and name: its arguments follow at once, and Ollama's line holds both
        else:
            body = wire.call_line(head, call.readers[piece.choice].made()[piece.call.index])
        return json.dumps(with_logprobs(call, body)) + "\n"

    return call.streamed(render, lambda exc: json.dumps(wire.failed(exc)) + "\n")


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
        "capabilities": capabilities(
            template, await asyncio.to_thread(file_capabilities, served.path, arch, server.config.pooling)
        ),
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
        # Ollama's digest is its manifest's; here, an identity of the file (its name, size and time),
        # as hashing gigabytes on each call would be too slow.
        digest = hashlib.sha256(library.file_identity(each.path).encode()).hexdigest()
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


def capabilities(template: str, found: list[str]) -> list[str]:
    """Ollama's capabilities: what the GGUF says the model can do (serve/embedding.py), and thinking
    for a model that completes and whose template writes or switches <think>."""
    from llmcli.engine.templates.thinking import OPEN, TOGGLE

    thinks = "completion" in found and (OPEN in template or TOGGLE in template)
    return [*found, *(["thinking"] if thinks else [])]


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
