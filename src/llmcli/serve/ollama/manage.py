"""Ollama's routes that change the store: /api/pull (NDJSON progress, or one object), /api/delete and
/api/copy. What they do is serve/library.py's; here is only Ollama's shape of it."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, StreamingResponse

from llmcli.serve import library
from llmcli.serve.ollama.protocol import CopyRequest, PullRequest, ShowRequest
from llmcli.serve.state import Server

router = APIRouter(prefix="/api")


@router.post("/pull")
async def pull(request: Request):
    server: Server = request.app.state.server
    # the store's checks (--read-only, one model) come before the 503 of a server not ready: library.py
    body = await server.read(request, PullRequest, ready=False)
    records = library.pull(server, body.named)
    first = await anext(records)  # the checks (a store, not read-only, a repo's name) answer with a status
    if body.stream is False:
        try:
            *_, last = [first] + [record async for record in records]
        except library.PullFailed as failed:
            raise failed.error from None
        return JSONResponse(last)

    async def lines():
        yield json.dumps(first) + "\n"
        try:
            async for record in records:
                yield json.dumps(record) + "\n"
        except library.PullFailed as failed:  # the status is sent: Ollama's client reads `error` in a line
            yield json.dumps(failed.error.body(ollama=True)) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.delete("/delete")
async def delete(request: Request):
    server: Server = request.app.state.server
    body = await server.read(request, ShowRequest, ready=False)
    await library.delete(server, body.named)
    return JSONResponse({"status": "success"})


@router.post("/copy")
async def copy(request: Request):
    server: Server = request.app.state.server
    body = await server.read(request, CopyRequest, ready=False)
    await library.copy(server, *body.names())
    return JSONResponse({"status": "success"})


BODIES: dict[str, Any] = {"/api/pull": PullRequest, "/api/delete": ShowRequest, "/api/copy": CopyRequest}
