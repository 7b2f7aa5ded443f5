"""Ollama's /api/embed (vectors L2-normalized, `truncate` default true, durations in nanoseconds) and
its legacy /api/embeddings (one prompt, the vector as the model pooled it, unnormalized). Both answer
a JSONResponse, past FastAPI's jsonable_encoder (serve/openai/embeddings.py says why)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from llmcli.serve.embed_call import embed
from llmcli.serve.embed_protocol import EmbeddingsRequest, EmbedRequest
from llmcli.serve.embedding import timings
from llmcli.serve.state import Server
from llmcli.usecases.embed import shaped

router = APIRouter(prefix="/api")

NS = 1_000_000  # ns a millisecond


@router.post("/embed")
async def embed_route(request: Request) -> JSONResponse:
    server: Server = request.app.state.server
    body = await server.read(request, EmbedRequest)
    truncate = True if body.truncate is None else body.truncate
    answer = await embed(
        server,
        request,
        body.model,
        body.input,
        truncate=truncate,
        keep_alive=body.keep_alive,
        dimensions=body.dimensions,
        ollama=True,
    )
    done, job = answer.done, answer.job
    total_ms = (time.perf_counter() - job.t_arrival) * 1000
    return JSONResponse(
        {
            "model": answer.model,
            "embeddings": [shaped(v, body.dimensions) for v in done.vectors],
            "total_duration": int(total_ms * NS),
            "load_duration": int(job.lease_ms * NS),  # the wait for the model: its load, when it had to load
            "prompt_eval_count": sum(done.n_tokens),
            "timings": timings(job, done),
        }
    )


@router.post("/embeddings")
async def embeddings_route(request: Request) -> JSONResponse:
    server: Server = request.app.state.server
    body = await server.read(request, EmbeddingsRequest)
    answer = await embed(
        server, request, body.model, body.prompt, truncate=True, keep_alive=body.keep_alive, ollama=True
    )
    return JSONResponse({"embedding": shaped(answer.done.vectors[0], None, normalize=False)})
